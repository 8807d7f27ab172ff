#!/usr/bin/env bash
# Builds (once) the local Kubernetes toolchain from Go modules and prints its bin dir.
#
#   scripts/cluster.d/build.sh            # build what is missing, print the bin dir
#   scripts/cluster.d/build.sh --key      # print the cache key only
#   scripts/cluster.d/build.sh --bin-dir  # print the bin dir only (builds nothing)
#   scripts/cluster.d/build.sh --pause-source  # path of the release's pause.c (the pod
#                                              # sandbox scripts/images compiles)
#
# Binaries go to ${CRUCIBLE_CACHE:-$HOME/.cache/crucible}/k8s/<key>/bin and are rebuilt
# only when missing. All progress goes to stderr; stdout is only the bin dir.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

# Bump when the build flags change so that cached binaries are rebuilt.
BUILD_REV=2

export GOTOOLCHAIN=local   # never download a Go toolchain
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

log() { printf '[cluster build] %s\n' "$*" >&2; }
die() { printf '[cluster build] ERROR: %s\n' "$*" >&2; exit 1; }

# shellcheck source=../lib/prereqs.sh
source "$here/../lib/prereqs.sh"
require check_go
go_version="$(go env GOVERSION)"

key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}_coredns-${COREDNS_VERSION}_${go_version}_r${BUILD_REV}"
# A binary added later is built into the same folder when missing, so adding one does
# not rebuild the rest.
cache_root="${CRUCIBLE_CACHE:-$HOME/.cache/crucible}"
dest="$cache_root/k8s/$key"
bin="$dest/bin"

case "${1:-}" in
  --key) echo "$key"; exit 0 ;;
  --bin-dir) echo "$bin"; exit 0 ;;
  --pause-source)
    dir="$(cd "$here/toolchain" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" \
      | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
    [[ -f "$dir/build/pause/linux/pause.c" ]] || die "no build/pause/linux/pause.c in k8s.io/kubernetes@${K8S_VERSION}"
    echo "$dir/build/pause/linux/pause.c"; exit 0 ;;
  "") ;;
  *) die "unknown argument: $1" ;;
esac

tool_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy etcd kwok helm coredns)
all_bins=("${tool_bins[@]}" weed crucible-seccomp-profile)

missing() { local b; for b in "$@"; do [[ -x "$bin/$b" ]] || echo "$b"; done; }

if [[ -z "$(missing "${all_bins[@]}")" ]]; then
  echo "$bin"; exit 0
fi

mkdir -p "$bin" "$dest/tmp"
exec 9>"$dest/.lock"
if ! flock -n 9; then
  log "another build holds $dest/.lock; waiting for it"
  flock 9
fi

# retry DESCRIPTION CMD...: 3 attempts with backoff, for transient network errors.
retry() {
  local desc="$1"; shift
  local attempt=1 delay=5
  while true; do
    if "$@"; then return 0; fi
    if (( attempt >= 3 )); then
      log "ERROR: $desc failed after 3 attempts."
      log "  GOPROXY=$(go env GOPROXY) GOMODCACHE=$(go env GOMODCACHE)"
      log "  Check network access to the Go module proxy and free disk space, then rerun."
      return 1
    fi
    log "$desc failed (attempt $attempt/3); retrying in ${delay}s"
    sleep "$delay"
    attempt=$((attempt + 1)); delay=$((delay * 3))
  done
}

gobuild() { nice -n 10 go "$@"; }

build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
tmp="$dest/tmp"
started=$SECONDS

# --- Kubernetes, etcd, kwok, helm and CoreDNS: one module, one `go build` ----------------
# One build of the whole graph, so that every package the tools share (client-go, gRPC,
# protobuf, OpenTelemetry, ...) is compiled once; scripts/cluster.d/gen-wrapper.sh says why.
# package_of BINARY: the main package that builds it.
package_of() {
  case "$1" in
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    kwok) echo sigs.k8s.io/kwok/cmd/kwok ;;
    helm) echo helm.sh/helm/v3/cmd/helm ;;
    coredns) echo crucible.dev/cluster/toolchain/coredns ;;
    *) echo "k8s.io/kubernetes/cmd/$1" ;;
  esac
}
# built_as BINARY: the name `go build -o DIR/` gives it (the last import path element, or
# the one before a major-version suffix).
built_as() { case "$1" in etcd) echo server ;; *) echo "$1" ;; esac; }

# The linker stamps: `kubectl version`, `helm version`, `kwok --version`, CoreDNS's banner.
# A -X for a package a binary does not link is ignored, so one set serves every binary.
stamps() {
  local ver="${K8S_VERSION#v}" major minor rest pkg ld="-s -w"
  major="${ver%%.*}"; rest="${ver#*.}"; minor="${rest%%.*}"
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ld+=" -X '$pkg.gitVersion=${K8S_VERSION}' -X '$pkg.gitMajor=${major}' -X '$pkg.gitMinor=${minor}'"
    ld+=" -X '$pkg.gitCommit=${K8S_GIT_COMMIT}' -X '$pkg.gitTreeState=clean' -X '$pkg.buildDate=${build_date}'"
  done
  ld+=" -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
  ld+=" -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION#v}"
  ld+=" -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  ld+=" -X helm.sh/helm/v3/internal/version.gitCommit=${HELM_GIT_COMMIT}"
  ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  # Helm's Makefile stamps the Kubernetes version of the client-go it is built with: here
  # the toolchain's.
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld+=" -X $pkg.k8sVersionMajor=${major} -X $pkg.k8sVersionMinor=${minor}"
  done
  ld+=" -X github.com/coredns/coredns/coremain.GitCommit=${COREDNS_VERSION}"
  echo "$ld"
}

mapfile -t need < <(missing "${tool_bins[@]}")
if (( ${#need[@]} )); then
  pkgs=(); for b in "${need[@]}"; do pkgs+=("$(package_of "$b")"); done
  log "downloading modules (Kubernetes ${K8S_VERSION}, etcd ${ETCD_VERSION}, kwok ${KWOK_VERSION}, helm ${HELM_VERSION}, CoreDNS ${COREDNS_VERSION})"
  (cd "$here/toolchain" && retry "go mod download (toolchain)" nice -n 10 go mod download) \
    || die "could not download the toolchain's modules"
  log "building ${need[*]} (this takes a while on a cold cache; see docs/cluster.md)"
  (cd "$here/toolchain" && retry "go build (toolchain)" gobuild build -trimpath -tags selinux,notest,grpcnotrace \
      -ldflags "$(stamps)" -o "$tmp/" "${pkgs[@]}") || die "building the toolchain failed"
  for b in "${need[@]}"; do mv -f "$tmp/$(built_as "$b")" "$bin/$b"; done
fi

# --- seaweedfs (weed: the test stack's S3 server, scripts/objectstore) -----------------------
if [[ -n "$(missing weed)" ]]; then
  log "building seaweedfs ${SEAWEEDFS_VERSION} (weed)"
  (cd "$here/seaweedfs" && retry "go mod download (seaweedfs)" nice -n 10 go mod download) \
    || die "could not download the SeaweedFS modules"
  (cd "$here/seaweedfs" && retry "go build (seaweedfs)" gobuild build -trimpath -ldflags "-s -w" \
      -o "$tmp/weed" github.com/seaweedfs/seaweedfs/weed) || die "building seaweedfs failed"
  mv -f "$tmp/weed" "$bin/weed"
fi

# --- the seccomp profile of pods that run agent tools (scripts/cluster.d/seccomp) ----------
if [[ -n "$(missing crucible-seccomp-profile)" ]]; then
  log "building crucible-seccomp-profile"
  (cd "$here/seccomp" && retry "go mod download (seccomp)" nice -n 10 go mod download) \
    || die "could not download the seccomp profile's modules"
  (cd "$here/seccomp" && gobuild build -trimpath -ldflags "-s -w" \
      -o "$tmp/crucible-seccomp-profile" .) || die "building crucible-seccomp-profile failed"
  mv -f "$tmp/crucible-seccomp-profile" "$bin/crucible-seccomp-profile"
fi

rmdir "$tmp" 2>/dev/null || true
log "toolchain ready in $bin ($((SECONDS - started))s)"
echo "$bin"
