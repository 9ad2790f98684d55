#!/usr/bin/env bash
# Builds the sandpit executable with the small in-sandbox agent embedded:
# cmd/sandpit-agent is compiled to a temporary file first, then laid over
# internal/agentbin/bin/sandpit-agent with `go build -overlay`, so the one
# file to install carries it and nothing is written into the source tree.
# (`CGO_ENABLED=0 go build ./cmd/sandpit` works too; its sandboxes run the
# whole sandpit executable as agent. A build with cgo is dynamically linked
# and the daemon refuses to mount it into sandboxes.)
#
# usage: scripts/build.sh [--install] [-o OUTPUT] [go build flags, e.g. -tags x]
# OUTPUT defaults to bin/sandpit. CGO_ENABLED=0 unless set. --install then
# puts it on PATH as $SANDPIT_INSTALL_DIR/sandpit (default /usr/local/bin),
# by a rename, so a running daemon keeps the file it started from.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=bin/sandpit
install=
if [[ "${1:-}" == "--install" ]]; then
	install=1
	shift
fi
if [[ "${1:-}" == "-o" ]]; then
	out=$2
	shift 2
fi
export CGO_ENABLED="${CGO_ENABLED:-0}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# -s -w: the agent's symbol table and DWARF are never read in a sandbox
# (panics still print symbolised stacks from the pclntab it keeps).
go build -ldflags='-s -w' "$@" -o "$tmp/sandpit-agent" ./cmd/sandpit-agent
printf '{"Replace":{"%s":"%s"}}\n' "$PWD/internal/agentbin/bin/sandpit-agent" "$tmp/sandpit-agent" >"$tmp/overlay.json"
go build -overlay "$tmp/overlay.json" "$@" -o "$out" ./cmd/sandpit

if [[ -n "$install" ]]; then
	dir="${SANDPIT_INSTALL_DIR:-/usr/local/bin}"
	mkdir -p "$dir"
	cp "$out" "$dir/.sandpit.new"
	chmod 0755 "$dir/.sandpit.new"
	mv -f "$dir/.sandpit.new" "$dir/sandpit"
	printf 'build.sh: installed %s\n' "$dir/sandpit" >&2
	case ":$PATH:" in
	*":$dir:"*) ;;
	*) printf 'build.sh: %s is not on PATH; add it, or run %s\n' "$dir" "$dir/sandpit" >&2 ;;
	esac
fi
