#!/usr/bin/env bash
# Puts Debian trixie's etcd (etcd-server 3.5.x) into bin/etcd for the tests'
# kube-apiserver. Bookworm's etcd 3.4.23 is older than Kubernetes 1.34
# supports: with it the API server cannot serve consistent lists from its
# watch cache and reads them from etcd instead, which is not what a real
# cluster measures. The .deb is found through trixie's signed index
# (InRelease checked with gpgv against Debian's keyring, then Packages.xz,
# then the package by their SHA-256) and kept in the user cache. Run by
# install-deps.sh, which installs gpgv, xz and curl first.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/haproxy-k8s-sync"
out="$root/bin/etcd"
mkdir -p "$root/bin" "$cache"
if [ -x "$out" ] && "$out" --version | grep -q '^etcd Version: 3\.5\.'; then exit 0; fi
cached=$(ls -1 "$cache"/etcd-3.5.* 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$cached" ]; then
  echo "fetching etcd-server from Debian trixie (once) ..." >&2
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror="${mirror:-http://deb.debian.org/debian}"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  curl -fsSL -o "$work/InRelease" "$mirror/dists/trixie/InRelease"
  gpgv --keyring /usr/share/keyrings/debian-archive-keyring.gpg --output "$work/Release" "$work/InRelease" 2>/dev/null
  sha=$(awk '$3 == "main/binary-amd64/Packages.xz" {print $1}' "$work/Release" | tail -n 1)
  curl -fsSL -o "$work/Packages.xz" "$mirror/dists/trixie/main/binary-amd64/Packages.xz"
  echo "$sha  $work/Packages.xz" | sha256sum -c --quiet
  read -r version file sha < <(xz -dc "$work/Packages.xz" | awk '
    /^Package: /{p = ($2 == "etcd-server")}
    p && /^Version: /{v = $2} p && /^Filename: /{f = $2} p && /^SHA256: /{s = $2}
    /^$/ && p {print v, f, s; exit}')
  case "$version" in 3.5.*) ;; *) echo "trixie's etcd-server is $version, not 3.5.x" >&2; exit 1 ;; esac
  curl -fsSL -o "$work/etcd.deb" "$mirror/$file"
  echo "$sha  $work/etcd.deb" | sha256sum -c --quiet
  dpkg-deb -x "$work/etcd.deb" "$work/x"
  cached="$cache/etcd-${version%%-*}"
  cp "$work/x/usr/bin/etcd" "$cached.tmp"
  mv "$cached.tmp" "$cached"
fi
cp "$cached" "$out"
