#!/usr/bin/env bash
# Puts a real kube-apiserver in bin/ for envtest: none can be downloaded here, so
# it is built from the Go module k8s.io/kubernetes (about 6 minutes on 2 cores).
# The binary is also kept in the user cache, so a fresh clone on the same
# machine does not build it again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=v1.34.1
out="$root/bin/kube-apiserver"
cache="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/haproxy-k8s-sync/kube-apiserver-$version"
[ -x "$out" ] && exit 0
mkdir -p "$root/bin" "$(dirname "$cache")"
if [ ! -x "$cache" ]; then
  echo "building kube-apiserver $version from k8s.io/kubernetes (once, about 6 minutes) ..." >&2
  (cd "$root/hack/kube-apiserver" &&
    CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$cache.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$cache.tmp" "$cache"
fi
cp "$cache" "$out"
