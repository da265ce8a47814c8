#!/usr/bin/env bash
# demo-cluster.sh SRC DST: give `make demo` its cluster to edit. DST is
# written from SRC unless it exists and differs from SRC: then it holds the
# user's edits, which a rerun keeps (and says so in one line).
set -euo pipefail
src="$1" dst="$2"
if [ -f "$dst" ] && ! cmp -s "$src" "$dst"; then
  echo "== keeping your edited $dst (remove it to start again from $src)"
  exit 0
fi
cp "$src" "$dst"
