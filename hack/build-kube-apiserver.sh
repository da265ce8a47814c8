#!/usr/bin/env bash
# Builds bin/kube-apiserver from the Go module k8s.io/kubernetes (about 5 minutes on
# 2 cores), once: envtest needs a real API server and none can be downloaded here.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/bin/kube-apiserver"
if [ -x "$out" ]; then exit 0; fi
mkdir -p "$root/bin"
echo "building kube-apiserver (k8s.io/kubernetes v1.34.1) into bin/ ..." >&2
cd "$root/hack/kube-apiserver"
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out.tmp" k8s.io/kubernetes/cmd/kube-apiserver
mv "$out.tmp" "$out"
