#!/usr/bin/env bash
# Installs what the tests run for real: HAProxy 2.6 from Debian, etcd 3.5 from
# Debian trixie (fetch-etcd.sh), iproute2 for the test network namespace, socat
# for the documented server-state drop-in, and
# kube-apiserver, kubectl and helm built from source.
set -euo pipefail
need=()
command -v haproxy >/dev/null || need+=(haproxy)
command -v gpgv >/dev/null || need+=(gpgv)
command -v xz >/dev/null || need+=(xz-utils)
command -v curl >/dev/null || need+=(curl ca-certificates)
command -v ip >/dev/null || need+=(iproute2)
command -v socat >/dev/null || need+=(socat) # the server-state drop-in of docs/haproxy.md (TestDocumentedSlots)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
"$(dirname "$0")/fetch-etcd.sh"
"$(dirname "$0")/build-kube-tools.sh"
