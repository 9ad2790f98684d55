#!/usr/bin/env bash
# Builds Caddy with the caddy-l4 app from tools/caddy-l4 (its own module,
# pinned by its go.mod and go.sum) and prints the binary's path. The binary is
# cached outside the checkout under a name that carries the hash of go.sum and
# main.go, so it is built once per set of versions on a machine and a bump of
# either builds anew. SANDPIT_CACHE_DIR moves the cache (default
# /var/cache/sandpit when writable, else ~/.cache/sandpit).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/tools/caddy-l4"
cache="${SANDPIT_CACHE_DIR:-}"
if [[ -z "$cache" ]]; then
	if mkdir -p /var/cache/sandpit 2>/dev/null && [[ -w /var/cache/sandpit ]]; then
		cache=/var/cache/sandpit
	else
		cache="${XDG_CACHE_HOME:-$HOME/.cache}/sandpit"
	fi
fi
mkdir -p "$cache"
hash="$(cat "$src/go.sum" "$src/go.mod" "$src/main.go" | sha256sum | cut -c1-16)"
bin="$cache/caddy-l4-$hash"
if [[ ! -x "$bin" ]]; then
	echo "building Caddy with caddy-l4 into $bin" >&2
	tmp="$bin.tmp.$$"
	# -trimpath and no VCS stamp: the same sources give the same binary.
	(cd "$src" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$tmp" .)
	mv -f "$tmp" "$bin"
fi
echo "$bin"
