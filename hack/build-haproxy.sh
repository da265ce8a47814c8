#!/usr/bin/env bash
# Builds HAProxy 3.0 LTS from Debian trixie's source package (bookworm ships
# only 2.6) into bin/haproxy-3.0, for the version matrix of the end-to-end
# tests. The binary is kept in the user cache keyed by version, so a rerun
# on the same machine does not build it again (about 5 minutes on 2 cores).
#
# With a source tree given (hack/build-haproxy.sh /path/to/haproxy [OUT]),
# it builds that tree instead, e.g. a checkout of the public repository at
# v3.2.0 or v3.4.0, into OUT (default bin/haproxy-<its version>), for
# `make matrix HAPROXY=...` by hand. Neither source nor binary is committed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -ge 1 ]; then
  tree="$(cd "$1" && pwd)"
  ver="$(cat "$tree/VERSION" 2>/dev/null || git -C "$tree" describe --tags 2>/dev/null || echo custom)"
  out="${2:-$root/bin/haproxy-${ver#v}}"
  mkdir -p "$(dirname "$out")"
  make -s -C "$tree" -j"$(nproc)" TARGET=linux-glibc USE_OPENSSL=1 USE_PCRE2=1 \
    USE_LUA=1 LUA_INC=/usr/include/lua5.4 LUA_LIB_NAME=lua5.4 >/dev/null
  cp "$tree/haproxy" "$out"
  echo "$out: $("$out" -v | head -1)"
  exit 0
fi
version=3.0.11
cache="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/haproxy-k8s-sync"
out="$root/bin/haproxy-3.0" cached="$cache/haproxy-$version"
mkdir -p "$root/bin" "$cache"
if [ -x "$out" ] && "$out" -v | awk 'NR==1{print $3}' | grep -q "^$version-\?"; then exit 0; fi
if [ ! -x "$cached" ]; then
  echo "building haproxy $version from Debian trixie's source package (once) ..." >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  src=/etc/apt/sources.list.d/haproxy-k8s-sync-trixie-src.sources
  if [ ! -f "$src" ]; then
    # Same archive as the machine's Debian entry; source packages only.
    uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "${uri:-http://deb.debian.org/debian}" | $sudo tee "$src" >/dev/null
    $sudo apt-get update -qq
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    dpkg-dev build-essential curl libpcre2-dev libssl-dev liblua5.4-dev >/dev/null
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # Only the upstream tarball is needed (the Debian patches are not applied);
  # the archive may already have dropped the revision the index names, but
  # the .orig tarball is shared by every revision. Its checksum comes from
  # the signed index.
  read -r uri name sha < <(apt-get source --print-uris -qq haproxy/trixie \
    | awk -v f="haproxy_$version.orig.tar.gz" '$2 == f {gsub("\047", "", $1); sub("SHA256:", "", $4); print $1, $2, $4}')
  [ -n "${uri:-}" ] || { echo "haproxy_$version.orig.tar.gz is not in trixie's source index" >&2; exit 1; }
  curl -fsSL -o "$work/$name" "$uri"
  echo "$sha  $work/$name" | sha256sum -c --quiet
  tar -C "$work" -xzf "$work/$name"
  make -s -C "$work/haproxy-$version" -j"$(nproc)" TARGET=linux-glibc USE_OPENSSL=1 USE_PCRE2=1 \
    USE_LUA=1 LUA_INC=/usr/include/lua5.4 LUA_LIB_NAME=lua5.4 >/dev/null
  cp "$work/haproxy-$version/haproxy" "$cached.tmp"
  mv "$cached.tmp" "$cached"
fi
cp "$cached" "$out"
