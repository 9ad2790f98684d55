#!/usr/bin/env bash
# Makes sure a Docker engine answers: if `docker info` fails, installs
# docker.io when dockerd is missing (Debian/Ubuntu, as root), starts dockerd
# in the background and waits up to DOCKER_WAIT seconds (default 60).
#
#   sudo scripts/ensure-docker.sh && scripts/test.sh
set -euo pipefail

WAIT="${DOCKER_WAIT:-60}"
LOG="${DOCKERD_LOG:-/var/log/sandpit-dockerd.log}"

log() { printf 'ensure-docker: %s\n' "$*" >&2; }

if docker info >/dev/null 2>&1; then
	log "docker engine is up"
	exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
	log "no docker engine answers and starting one needs root (try: sudo $0)"
	exit 1
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
	log "installing docker.io"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq docker.io >/dev/null
fi

if [[ -S /var/run/docker.sock ]] && pgrep -x dockerd >/dev/null 2>&1; then
	log "dockerd is running but not answering yet; waiting"
else
	log "starting dockerd (log: $LOG)"
	mkdir -p "$(dirname "$LOG")"
	# setsid + nohup: dockerd outlives this script and its terminal.
	setsid nohup dockerd >>"$LOG" 2>&1 </dev/null &
fi

for ((i = 0; i < WAIT; i++)); do
	if docker info >/dev/null 2>&1; then
		log "docker engine is up after ${i}s"
		exit 0
	fi
	sleep 1
done
log "docker engine did not answer within ${WAIT}s; last lines of $LOG:"
tail -n 30 "$LOG" >&2 || true
exit 1
