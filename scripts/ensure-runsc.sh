#!/usr/bin/env bash
# Makes gVisor's runsc available to Docker as two OCI runtimes: installs
# Debian's runsc package when missing, registers the runtimes in
# /etc/docker/daemon.json with the arguments these machines need, and makes
# dockerd reload its runtimes (SIGHUP; no restart, so running containers are
# untouched). Idempotent; needs root.
#
# "runsc": --platform=ptrace (no KVM here) and --network=host: runsc uses
# the container's network namespace, which Docker still isolates, through
# the host's network stack.
#
# "runsc-netstack": --platform=ptrace only, so gVisor runs its own network
# stack in that namespace. Its sockets can be checkpointed (hostinet ones
# cannot), which is what a memory pause that frees memory needs. It runs
# through the wrapper scripts/runsc-netstack, installed as
# /usr/local/libexec/sandpit/runsc-netstack: see that file for why.
set -euo pipefail

CONF="${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}"
NAME="${RUNSC_RUNTIME_NAME:-runsc}"
NETSTACK_NAME="${RUNSC_NETSTACK_RUNTIME_NAME:-runsc-netstack}"
WRAPPER=/usr/local/libexec/sandpit/runsc-netstack

log() { printf 'ensure-runsc: %s\n' "$*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
	log "needs root"
	exit 1
fi

if ! command -v runsc >/dev/null 2>&1; then
	log "installing runsc"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq --no-install-recommends runsc >/dev/null
fi
RUNSC="$(command -v runsc)"

if ! command -v jq >/dev/null 2>&1; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq --no-install-recommends jq >/dev/null
fi

# The wrapper runs the runsc found here, whatever path the package put it at.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$(dirname "$WRAPPER")"
tmpw=$(mktemp "$WRAPPER.XXXXXX")
sed "s|^RUNSC=.*|RUNSC=$RUNSC|" "$here/runsc-netstack" >"$tmpw"
chmod 0755 "$tmpw"
mv "$tmpw" "$WRAPPER"

mkdir -p "$(dirname "$CONF")"
[[ -s "$CONF" ]] || echo '{}' >"$CONF"
changed=()
register() { # name runtime-json
	local have
	have=$(jq -c --arg n "$1" '.runtimes[$n] // empty' "$CONF")
	if [[ "$have" != "$2" ]]; then
		log "registering runtime $1 in $CONF"
		tmp=$(mktemp "$CONF.XXXXXX")
		jq --arg n "$1" --argjson r "$2" '.runtimes[$n] = $r' "$CONF" >"$tmp"
		chmod 0644 "$tmp"
		mv "$tmp" "$CONF"
		changed+=("$1")
	fi
}
register "$NAME" "$(jq -nc --arg p "$RUNSC" '{path: $p, runtimeArgs: ["--platform=ptrace", "--network=host"]}')"
register "$NETSTACK_NAME" "$(jq -nc --arg p "$WRAPPER" '{path: $p, runtimeArgs: ["--platform=ptrace"]}')"

# The engine's view must match the file: a runtime re-registered with other
# arguments is reloaded too, not only a missing one.
registered() {
	docker info --format '{{json .Runtimes}}' 2>/dev/null | jq -e --arg n "$NAME" --arg m "$NETSTACK_NAME" --arg w "$WRAPPER" \
		'has($n) and has($m) and .[$m].path == $w' >/dev/null
}
if ((${#changed[@]} > 0)) || ! registered; then
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
	log "dockerd did not pick up runtimes $NAME and $NETSTACK_NAME after SIGHUP"
	exit 1
fi
log "runtimes $NAME ($RUNSC) and $NETSTACK_NAME ($WRAPPER) registered"
