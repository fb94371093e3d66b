#!/usr/bin/env bash
# Builds the real components of the local test cluster from the Go module proxy into a cache
# outside the clone, keyed by component, version and the recipe that builds it, so that a warm
# rerun takes seconds and two clones share one build.
#
#   scripts/tools.sh [build] [COMPONENT...]  build (or reuse) components; default: all
#   scripts/tools.sh bin-dir                 build all, print a directory with every binary
#   scripts/tools.sh path COMPONENT          build one, print the directory with its binaries
#   scripts/tools.sh list                    print the components and their cache keys
#
# Components: etcd kubernetes kwok cert-manager helm3 helm4 codegen (controller-gen) oci (the
# image builder and the bed's registry, test/tools/oci, on go-containerregistry) cosign (sigstore's
# signer, for make sign; built only on demand: `path cosign`, not part of bin-dir).
# Cache: $TRUST_ROTATION_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/linkerd-trust-rotation).
# Builds of the same key are serialised with flock and land with an atomic rename, so concurrent
# runs never see a half-written tool.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${TRUST_ROTATION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/linkerd-trust-rotation}
tools="$root/test/tools"

ETCD_VERSION=v3.6.16
KUBERNETES_VERSION=v1.36.3
KWOK_VERSION=v0.8.0
CERT_MANAGER_VERSION=v1.21.2
HELM3_VERSION=v3.22.0
HELM4_VERSION=v4.3.1
CONTROLLER_GEN_VERSION=v0.23.0
COSIGN_VERSION=v3.1.3
# go-containerregistry, as test/tools/oci/go.mod requires it.
OCI_VERSION=$(awk '$1 == "github.com/google/go-containerregistry" { print $2 }
  $1 == "require" && $2 == "github.com/google/go-containerregistry" { print $3 }' "$tools/oci/go.mod")

components=(etcd kubernetes kwok cert-manager helm3 helm4 codegen oci)
# Built on demand only (scripts/tools.sh path NAME): make sign's cosign is a release tool, not
# part of the test bed every cluster needs, and a cold build of it takes minutes of its own.
on_demand=(cosign)

log() { printf 'tools: %s\n' "$*" >&2; }

version_of() {
  case $1 in
    etcd) echo "$ETCD_VERSION" ;;
    kubernetes) echo "$KUBERNETES_VERSION" ;;
    kwok) echo "$KWOK_VERSION" ;;
    cert-manager) echo "$CERT_MANAGER_VERSION" ;;
    helm3) echo "$HELM3_VERSION" ;;
    helm4) echo "$HELM4_VERSION" ;;
    codegen) echo "$CONTROLLER_GEN_VERSION" ;;
    oci) echo "$OCI_VERSION" ;;
    cosign) echo "$COSIGN_VERSION" ;;
    *) log "unknown component '$1' (known: ${components[*]} ${on_demand[*]})"; exit 2 ;;
  esac
}

# The recipe's inputs: a change to a tools module or to this script's build of a component gives
# a new key, so a stale build is never reused.
recipe_hash() {
  local name=$1 files=()
  [ -d "$tools/$name" ] && mapfile -t files < <(find "$tools/$name" -type f | LC_ALL=C sort)
  { go env GOVERSION; declare -f "build_$(echo "$name" | tr - _)"; cat "${files[@]}" /dev/null; } \
    | sha256sum | cut -c1-12
}

key_of() { echo "$1-$(version_of "$1")-$(recipe_hash "$1")"; }

ldflags_kubernetes() {
  local v=$KUBERNETES_VERSION minor
  minor=$(echo "$v" | cut -d. -f2)
  local f="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    f+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit=v$v -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$f"
}

build_etcd() {
  (cd "$tools/etcd" && go build -trimpath -ldflags "-s -w" -o "$1/etcd" go.etcd.io/etcd/server/v3)
}

build_kubernetes() {
  (cd "$tools/kubernetes" && go build -trimpath -ldflags "$(ldflags_kubernetes)" -o "$1/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler)
}

build_kwok() {
  GOBIN="$1" go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  # kwok refuses to start without Stage objects; ship the stock ones from the same module.
  local mod
  mod=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  mkdir -p "$1/kwok-stages"
  cp "$mod/kustomize/stage/node/fast/node-initialize.yaml" \
     "$mod/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
     "$mod"/kustomize/stage/pod/fast/*.yaml "$1/kwok-stages/" 2>/dev/null || true
  rm -f "$1/kwok-stages/kustomization.yaml"
  chmod u+w "$1"/kwok-stages/*
  # The PortForward CRD: kwok's kubelet server forwards a pod's port where one of these says,
  # so that the apiserver's port-forward reaches the mesh simulator's proxies.
  mkdir -p "$1/kwok-crds"
  cp "$mod/kustomize/crd/bases/kwok.x-k8s.io_portforwards.yaml" "$1/kwok-crds/"
  chmod u+w "$1"/kwok-crds/*
}

build_cert_manager() {
  (cd "$tools/cert-manager" && go build -trimpath -ldflags "-s -w" -o "$1/cert-manager-controller" .)
  local mod
  mod=$(cd "$tools/cert-manager" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
  mkdir -p "$1/cert-manager-crds"
  cp "$mod"/deploy/crds/*.yaml "$1/cert-manager-crds/"
  rm -f "$1/cert-manager-crds/README.md"
  chmod u+w "$1"/cert-manager-crds/*
}

build_helm3() {
  GOBIN="$1" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM3_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM3_VERSION"
  mv "$1/helm" "$1/helm3"
}

build_helm4() {
  GOBIN="$1" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM4_VERSION" \
    "helm.sh/helm/v4/cmd/helm@$HELM4_VERSION"
  mv "$1/helm" "$1/helm4"
}

build_codegen() {
  (cd "$tools/codegen" && go build -trimpath -ldflags "-s -w" -o "$1/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen)
}

build_oci() {
  (cd "$tools/oci" && go build -trimpath -ldflags "-s -w" -o "$1/oci" .)
}

# cosign as sigstore's release builds it (its Makefile's LDFLAGS), stamped with the version that
# `cosign version` prints; the module has no replace directives, so go install builds it as is.
build_cosign() {
  local v=sigs.k8s.io/release-utils/version
  GOBIN="$1" go install -trimpath \
    -ldflags "-s -w -buildid= -X $v.gitVersion=$COSIGN_VERSION -X $v.gitTreeState=clean" \
    "github.com/sigstore/cosign/v3/cmd/cosign@$COSIGN_VERSION"
}

# build NAME: prints the directory holding the component's binaries.
build() {
  local name=$1 key dir
  key=$(key_of "$name")
  dir="$cache/$key"
  if [ ! -e "$dir/.done" ]; then
    mkdir -p "$cache"
    exec 9>"$cache/$key.lock"
    flock 9
    if [ ! -e "$dir/.done" ]; then
      local tmp start
      tmp=$(mktemp -d "$cache/.$key.XXXXXX")
      start=$(date +%s)
      log "building $name $(version_of "$name") (cold build; this takes minutes on 2 cores)"
      "build_$(echo "$name" | tr - _)" "$tmp/bin"
      touch "$tmp/.done"
      rm -rf "$dir"
      mv "$tmp" "$dir"
      log "built $name in $(( $(date +%s) - start ))s"
    fi
    exec 9>&-
  fi
  echo "$dir/bin"
}

# bin_dir: one directory of links to every component's files, named by the combined key.
bin_dir() {
  local keys="" name
  for name in "${components[@]}"; do keys+="$(key_of "$name") "; done
  local set="$cache/sets/$(echo "$keys" | sha256sum | cut -c1-12)"
  if [ ! -e "$set/.done" ]; then
    local tmp
    mkdir -p "$cache/sets"
    tmp=$(mktemp -d "$cache/sets/.set.XXXXXX")
    for name in "${components[@]}"; do
      local d f
      d=$(build "$name")
      for f in "$d"/*; do ln -s "$f" "$tmp/$(basename "$f")"; done
    done
    touch "$tmp/.done"
    rm -rf "$set"
    mv -T "$tmp" "$set" 2>/dev/null || rm -rf "$tmp"
  fi
  echo "$set"
}

cmd=${1:-build}
case $cmd in
  build) shift || true
    [ $# -eq 0 ] && set -- "${components[@]}"
    for c in "$@"; do build "$c" >/dev/null; done ;;
  bin-dir) bin_dir ;;
  path) [ $# -eq 2 ] || { log "usage: $0 path COMPONENT"; exit 2; }; version_of "$2" >/dev/null; build "$2" ;;
  list) for c in "${components[@]}" "${on_demand[@]}"; do echo "$c $(version_of "$c") $cache/$(key_of "$c")"; done ;;
  -h|--help|help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) for c in "$@"; do build "$c" >/dev/null; done ;;
esac
