#!/usr/bin/env bash
# Builds (once) Kubeflow's training operator v1 from its Go module and prints the binary's
# path; the CRDs (PyTorchJob and friends) are copied next to it.
#
#   benchmarks/kubeflow/build.sh           # build if missing, print the binary's path
#   benchmarks/kubeflow/build.sh --crds    # print the folder of its CRD manifests
#
# The module comes from the Go module proxy (`go mod download`, retried); the build runs
# in a writable copy of the module with GOFLAGS=-mod=mod (go install refuses modules with
# replace directives). Cached in ${CRUCIBLE_CACHE:-$HOME/.cache/crucible}/kubeflow/<key>,
# like scripts/cluster.d/build.sh caches the Kubernetes binaries.
set -euo pipefail

MODULE=github.com/kubeflow/training-operator
VERSION="${KUBEFLOW_TRAINING_OPERATOR_VERSION:-v1.8.1}"
BUILD_REV=1  # bump when the build flags change

export GOTOOLCHAIN=local
export CGO_ENABLED=0

log() { printf '[kubeflow build] %s\n' "$*" >&2; }
die() { printf '[kubeflow build] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH"
go_version="$(go env GOVERSION)"
key="training-operator-${VERSION}_${go_version}_r${BUILD_REV}"
dest="${CRUCIBLE_CACHE:-$HOME/.cache/crucible}/kubeflow/$key"
binary="$dest/bin/training-operator"

case "${1:-}" in
  --crds) want=crds ;;
  "") want=bin ;;
  *) die "unknown argument: $1" ;;
esac

print() { if [[ "$want" == crds ]]; then echo "$dest/crds"; else echo "$binary"; fi; }

if [[ -x "$binary" && -d "$dest/crds" ]]; then print; exit 0; fi

mkdir -p "$dest"
exec 9>"$dest/.lock"
flock -n 9 || { log "another build holds $dest/.lock; waiting"; flock 9; }
if [[ -x "$binary" && -d "$dest/crds" ]]; then print; exit 0; fi

retry() {  # retry DESCRIPTION CMD...: 3 attempts with backoff
  local desc="$1" attempt=1 delay=5; shift
  until "$@"; do
    (( attempt < 3 )) || { log "$desc failed after 3 attempts (GOPROXY=$(go env GOPROXY))"; return 1; }
    log "$desc failed (attempt $attempt/3); retrying in ${delay}s"
    sleep "$delay"; attempt=$((attempt + 1)); delay=$((delay * 3))
  done
}

log "downloading $MODULE@$VERSION from the module proxy"
dir="$(retry "go mod download $MODULE@$VERSION" \
  go mod download -json "$MODULE@$VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
[[ -n "$dir" && -d "$dir" ]] || die "go mod download printed no module directory"

src="$dest/src"
rm -rf "$src"
cp -r "$dir" "$src"
chmod -R u+w "$src"
log "downloading its dependencies"
(cd "$src" && retry "go mod download (dependencies)" env GOFLAGS=-mod=mod go mod download)
log "building cmd/training-operator.v1 (a few minutes on 2 cores)"
mkdir -p "$dest/bin"
(cd "$src" && GOFLAGS="-mod=mod -buildvcs=false" nice -n 10 \
  go build -trimpath -ldflags="-s -w" -o "$binary.tmp" ./cmd/training-operator.v1)
mv "$binary.tmp" "$binary"
rm -rf "$dest/crds"
cp -r "$src/manifests/base/crds" "$dest/crds"
rm -rf "$src"
log "built $binary"
print
