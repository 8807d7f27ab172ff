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
BUILD_REV=1

export GOTOOLCHAIN=local   # never download a Go toolchain
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

log() { printf '[cluster build] %s\n' "$*" >&2; }
die() { printf '[cluster build] ERROR: %s\n' "$*" >&2; exit 1; }

# shellcheck source=../lib/prereqs.sh
source "$here/../lib/prereqs.sh"
require check_go
go_version="$(go env GOVERSION)"

key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}_${go_version}_r${BUILD_REV}"
# Binaries added later (kubelet, coredns) are built into the same folder when
# missing, so adding one does not rebuild the rest.
cache_root="${CRUCIBLE_CACHE:-$HOME/.cache/crucible}"
dest="$cache_root/k8s/$key"
bin="$dest/bin"

case "${1:-}" in
  --key) echo "$key"; exit 0 ;;
  --bin-dir) echo "$bin"; exit 0 ;;
  --pause-source)
    dir="$(cd "$here/k8s" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" \
      | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
    [[ -f "$dir/build/pause/linux/pause.c" ]] || die "no build/pause/linux/pause.c in k8s.io/kubernetes@${K8S_VERSION}"
    echo "$dir/build/pause/linux/pause.c"; exit 0 ;;
  "") ;;
  *) die "unknown argument: $1" ;;
esac

k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
all_bins=("${k8s_bins[@]}" etcd kwok helm coredns weed)

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

# --- kube-apiserver, kube-controller-manager, kube-scheduler, kubectl -------------------
mapfile -t need < <(missing "${k8s_bins[@]}")
if (( ${#need[@]} )); then
  ver="${K8S_VERSION#v}"; major="${ver%%.*}"; rest="${ver#*.}"; minor="${rest%%.*}"
  ld="-s -w"
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ld+=" -X '$pkg.gitVersion=${K8S_VERSION}' -X '$pkg.gitMajor=${major}' -X '$pkg.gitMinor=${minor}'"
    ld+=" -X '$pkg.gitCommit=${K8S_GIT_COMMIT}' -X '$pkg.gitTreeState=clean' -X '$pkg.buildDate=${build_date}'"
  done
  pkgs=(); for b in "${need[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  log "downloading modules for k8s.io/kubernetes ${K8S_VERSION}"
  (cd "$here/k8s" && retry "go mod download (kubernetes)" nice -n 10 go mod download) || die "could not download the Kubernetes modules"
  log "building ${need[*]} (this takes a while on a cold cache; see docs/cluster.md)"
  (cd "$here/k8s" && retry "go build (kubernetes)" gobuild build -trimpath -tags selinux,notest,grpcnotrace \
      -ldflags "$ld" -o "$tmp/" "${pkgs[@]}") || die "building Kubernetes ${K8S_VERSION} failed"
  for b in "${need[@]}"; do mv -f "$tmp/$b" "$bin/$b"; done
fi

# --- etcd ----------------------------------------------------------------------------------
if [[ -n "$(missing etcd)" ]]; then
  log "building etcd ${ETCD_VERSION}"
  (cd "$here/etcd" && retry "go mod download (etcd)" nice -n 10 go mod download) || die "could not download the etcd modules"
  (cd "$here/etcd" && retry "go build (etcd)" gobuild build -trimpath -ldflags "-s -w" \
      -o "$tmp/etcd" go.etcd.io/etcd/server/v3) || die "building etcd ${ETCD_VERSION} failed"
  mv -f "$tmp/etcd" "$bin/etcd"
fi

# --- kwok ------------------------------------------------------------------------------------
if [[ -n "$(missing kwok)" ]]; then
  log "building kwok ${KWOK_VERSION}"
  ld="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
  ld+=" -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION#v}"
  retry "go install (kwok)" env GOBIN="$tmp" nice -n 10 go install -trimpath -ldflags "$ld" \
      "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" || die "building kwok ${KWOK_VERSION} failed"
  mv -f "$tmp/kwok" "$bin/kwok"
fi

# --- helm ------------------------------------------------------------------------------------
if [[ -n "$(missing helm)" ]]; then
  log "building helm ${HELM_VERSION}"
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  ld+=" -X helm.sh/helm/v3/internal/version.gitCommit=${HELM_GIT_COMMIT}"
  ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  # Helm's Makefile also stamps the Kubernetes version of its client-go (from its go.mod).
  helm_mod="$(retry "go mod download (helm go.mod)" go mod download -json "helm.sh/helm/v3@${HELM_VERSION}" \
      | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')" || die "could not download helm ${HELM_VERSION}"
  cg="$(awk '$1=="k8s.io/client-go"{print $2; exit}' "$helm_mod" 2>/dev/null || true)"
  if [[ "$cg" =~ ^v0\.([0-9]+)\. ]]; then
    for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
      ld+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=${BASH_REMATCH[1]}"
    done
  fi
  retry "go install (helm)" env GOBIN="$tmp" nice -n 10 go install -trimpath -ldflags "$ld" \
      "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" || die "building helm ${HELM_VERSION} failed"
  mv -f "$tmp/helm" "$bin/helm"
fi

# --- coredns ---------------------------------------------------------------------------------
if [[ -n "$(missing coredns)" ]]; then
  log "building coredns ${COREDNS_VERSION}"
  ld="-s -w -X github.com/coredns/coredns/coremain.GitCommit=${COREDNS_VERSION}"
  retry "go install (coredns)" env GOBIN="$tmp" nice -n 10 go install -trimpath -ldflags "$ld" \
      "github.com/coredns/coredns@${COREDNS_VERSION}" || die "building coredns ${COREDNS_VERSION} failed"
  mv -f "$tmp/coredns" "$bin/coredns"
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

rmdir "$tmp" 2>/dev/null || true
log "toolchain ready in $bin ($((SECONDS - started))s)"
echo "$bin"
