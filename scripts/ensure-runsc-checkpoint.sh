#!/usr/bin/env bash
# Makes a runsc that can checkpoint Sandpit's sandboxes available to Docker as
# the OCI runtime "runsc-ckpt", beside the "runsc" runtime of
# scripts/ensure-runsc.sh, which stays as it is. Idempotent; needs root.
#
# Debian's runsc (2022-12) refuses to save a TCP endpoint an epoll instance
# waits on, which every Go server (the sandbox agent included) has, and ends
# the sandbox on the failed save (docs/lifecycle.md, "Checkpoints"). A newer
# runsc saves them. gVisor is a Go module, so it is built here from the Go
# module proxy at a pinned version, static (CGO_ENABLED=0), once per version:
# the binary is cached outside the checkout, under a name that carries the
# version (SANDPIT_CACHE_DIR moves the cache; default /var/cache/sandpit when
# writable, else ~/.cache/sandpit).
#
# The runtime is registered with --platform=ptrace (no KVM here) and without
# --network=host, so gVisor runs its own network stack inside the namespace
# Docker makes: runsc cannot checkpoint host-network sockets. --overlay2=none:
# this runsc's default (root:self) keeps what a sandbox writes to its root
# filesystem in a file of its own that a new sandbox does not read, so a stop
# and start (a filesystem pause, a restart) would lose every file, and a
# snapshot (docker commit) would not see them; with none the writes go to the
# container's overlayfs layer on the host, as under runc. It runs through the wrapper
# scripts/runsc-ckpt, installed as /usr/local/libexec/sandpit/runsc-ckpt,
# which turns the engine's start into a restore when the daemon has left a
# marker: see that file.
set -euo pipefail

VERSION="${RUNSC_CKPT_VERSION:-v0.0.0-20260905035102-160fafc42237}"
CONF="${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}"
NAME="${RUNSC_CKPT_RUNTIME_NAME:-runsc-ckpt}"
WRAPPER=/usr/local/libexec/sandpit/runsc-ckpt

log() { printf 'ensure-runsc-checkpoint: %s\n' "$*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
	log "needs root"
	exit 1
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

cache="${SANDPIT_CACHE_DIR:-}"
if [[ -z "$cache" ]]; then
	if mkdir -p /var/cache/sandpit 2>/dev/null && [[ -w /var/cache/sandpit ]]; then
		cache=/var/cache/sandpit
	else
		cache="${XDG_CACHE_HOME:-$HOME/.cache}/sandpit"
	fi
fi
dir="$cache/runsc-$VERSION"
RUNSC="$dir/runsc"
if [[ ! -x "$RUNSC" ]]; then
	log "building runsc $VERSION into $dir (once per version; takes minutes)"
	tmp="$dir.tmp.$$"
	mkdir -p "$tmp"
	start=$(date +%s)
	# nice: the machine's cores are shared with the tests that follow.
	(cd "$tmp" && GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 go install "gvisor.dev/gvisor/runsc@$VERSION")
	rm -rf "$dir"
	mv "$tmp" "$dir"
	log "built runsc $VERSION in $(($(date +%s) - start)) s"
fi

if ! command -v jq >/dev/null 2>&1; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq --no-install-recommends jq >/dev/null
fi

# The wrapper runs the runsc built above; it goes in whole (a rename), so
# the engine never runs half a script.
mkdir -p "$(dirname "$WRAPPER")"
tmpw=$(mktemp "$WRAPPER.XXXXXX")
sed "s|^RUNSC=.*|RUNSC=$RUNSC|" "$here/runsc-ckpt" >"$tmpw"
chmod 0755 "$tmpw"
mv "$tmpw" "$WRAPPER"

want=$(jq -nc --arg p "$WRAPPER" '{path: $p, runtimeArgs: ["--platform=ptrace", "--overlay2=none"]}')
mkdir -p "$(dirname "$CONF")"
[[ -s "$CONF" ]] || echo '{}' >"$CONF"
have=$(jq -c --arg n "$NAME" '.runtimes[$n] // empty' "$CONF")
changed=0
if [[ "$have" != "$want" ]]; then
	log "registering runtime $NAME in $CONF"
	tmp=$(mktemp "$CONF.XXXXXX")
	jq --arg n "$NAME" --argjson r "$want" '.runtimes[$n] = $r' "$CONF" >"$tmp"
	chmod 0644 "$tmp"
	mv "$tmp" "$CONF"
	changed=1
fi

# The engine's view must match the file: a runtime re-registered with
# another path or other arguments is reloaded too, not only a missing one.
registered() {
	docker info --format '{{json .Runtimes}}' 2>/dev/null |
		jq -e --arg n "$NAME" --argjson r "$want" 'has($n) and .[$n].path == $r.path and .[$n].runtimeArgs == $r.runtimeArgs' >/dev/null
}
if ((changed)) || ! registered; then
	pid=$(pidof dockerd || true)
	if [[ -z "$pid" ]]; then
		log "dockerd is not running"
		exit 1
	fi
	log "reloading dockerd (SIGHUP to pid $pid)"
	kill -HUP "$pid"
	for ((i = 0; i < 30; i++)); do
		registered && break
		sleep 1
	done
fi
if ! registered; then
	log "dockerd did not pick up runtime $NAME after SIGHUP"
	exit 1
fi
log "runtime $NAME registered ($WRAPPER running $RUNSC)"
