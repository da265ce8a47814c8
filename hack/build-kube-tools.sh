#!/usr/bin/env bash
# Puts the Kubernetes tools the tests run into bin/, none of which can be
# downloaded here:
#   kube-apiserver (for envtest) and kubectl, built from the Go module
#     k8s.io/kubernetes through hack/kubernetes (about 6 minutes on 2 cores);
#   helm, built from helm.sh/helm/v3 (about 2 minutes).
# Built binaries are kept in the user cache, so a fresh clone on the same
# machine does not build them again. Arguments name the tools to build
# (make release needs helm alone); none: all three.
set -euo pipefail
only=" ${*:-kube-apiserver kubectl helm} "
root="$(cd "$(dirname "$0")/.." && pwd)"
k8s=v1.34.1
helm=v3.19.0
cache="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/haproxy-k8s-sync"
mkdir -p "$root/bin" "$cache"

# tool NAME VERSION BUILD-COMMAND...: build once into the cache, copy to bin/.
tool() {
  local name=$1 version=$2; shift 2
  [[ "$only" == *" $name "* ]] || return 0
  local out="$root/bin/$name" cached="$cache/$name-$version"
  [ -x "$out" ] && [ -f "$out.version" ] && [ "$(cat "$out.version")" = "$version" ] && return 0
  if [ ! -x "$cached" ]; then
    echo "building $name $version (once) ..." >&2
    "$@" "$cached.tmp"
    mv "$cached.tmp" "$cached"
  fi
  cp "$cached" "$out"
  echo "$version" > "$out.version"
}

from_kubernetes() { # PACKAGE OUTPUT
  (cd "$root/hack/kubernetes" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$2" "$1")
}
build_helm() { # OUTPUT
  local gobin; gobin="$(mktemp -d)"
  GOBIN="$gobin" CGO_ENABLED=0 go install -trimpath -ldflags '-s -w' "helm.sh/helm/v3/cmd/helm@$helm"
  mv "$gobin/helm" "$1"; rmdir "$gobin"
}

tool kube-apiserver "$k8s" from_kubernetes k8s.io/kubernetes/cmd/kube-apiserver
tool kubectl "$k8s" from_kubernetes k8s.io/kubernetes/cmd/kubectl
tool helm "$helm" build_helm
