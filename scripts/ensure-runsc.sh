#!/usr/bin/env bash
# Makes gVisor's runsc available to Docker as the OCI runtime "runsc":
# installs Debian's runsc package when missing, registers it in
# /etc/docker/daemon.json with the runtime arguments these machines need, and
# makes dockerd reload its runtimes (SIGHUP; no restart, so running
# containers are untouched). Idempotent; needs root.
#
# --platform=ptrace: no KVM here. --network=host: gVisor's own network stack
# refuses to start in the root network namespace; with host networking runsc
# uses the container's network namespace, which Docker still isolates.
set -euo pipefail

CONF="${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}"
NAME="${RUNSC_RUNTIME_NAME:-runsc}"

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

want=$(jq -nc --arg p "$RUNSC" '{path: $p, runtimeArgs: ["--platform=ptrace", "--network=host"]}')
mkdir -p "$(dirname "$CONF")"
[[ -s "$CONF" ]] || echo '{}' >"$CONF"
have=$(jq -c --arg n "$NAME" '.runtimes[$n] // empty' "$CONF")
if [[ "$have" != "$want" ]]; then
	log "registering runtime $NAME in $CONF"
	tmp=$(mktemp "$CONF.XXXXXX")
	jq --arg n "$NAME" --argjson r "$want" '.runtimes[$n] = $r' "$CONF" >"$tmp"
	chmod 0644 "$tmp"
	mv "$tmp" "$CONF"
fi

registered() { docker info --format '{{json .Runtimes}}' 2>/dev/null | jq -e --arg n "$NAME" 'has($n)' >/dev/null; }
if ! registered; then
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
log "runtime $NAME registered ($RUNSC)"
