#!/usr/bin/env bash
# Builds the desktop template's image (sandpit/desktop:latest) from
# images/desktop on top of the base image, which it builds first when
# missing (scripts/build-base-image.sh): Xvfb, Xfce, xdotool, scrot, a VNC
# server with noVNC, Chromium and a terminal, all from Debian's mirror
# through apt inside the build.
#
# Cached by a hash of the recipe (this script, images/desktop/* and the base
# image's recipe hash): when sandpit/desktop:<hash> exists nothing is built,
# only :latest is pointed at it. A daemon registers the image as the
# template `desktop` (E2B's template and Daytona's snapshot of that name)
# as soon as it exists. Concurrent runs are serialised with flock.
#
# Environment:
#   SANDPIT_DESKTOP_IMAGE  repository to tag (default sandpit/desktop)
#   SANDPIT_BASE_IMAGE     the base image's repository (default sandpit/base)
#   SANDPIT_CACHE_DIR      where the lock lives (as for the base image)
#   FORCE=1                rebuild even when the hash matches
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RECIPE="$ROOT/images/desktop"
REPO="${SANDPIT_DESKTOP_IMAGE:-sandpit/desktop}"
BASE_REPO="${SANDPIT_BASE_IMAGE:-sandpit/base}"
HASH_LABEL="sandpit.desktop-image.hash"

log() { printf 'build-desktop-image: %s\n' "$*" >&2; }
command -v docker >/dev/null 2>&1 || { log "error: docker CLI not found"; exit 1; }

. "$ROOT/scripts/lib/image-build.sh"
default_cache_dir
BASE_HASH="$(base_image_hash "$ROOT" "$BASE_REPO")"
HASH="$( (recipe_script "${BASH_SOURCE[0]}"; find "$RECIPE" -type f | sort | xargs cat; echo "base $BASE_HASH") | sha256sum | cut -c1-16)"
TAG="$REPO:$HASH"

have_tag() { docker image inspect "$TAG" >/dev/null 2>&1; }

if [[ "${FORCE:-}" != 1 ]] && have_tag; then
	point_latest "$REPO" "$TAG"
	exit 0
fi
LOCK="$SANDPIT_CACHE_DIR/build-desktop-image.lock"
exec 9>"$LOCK"
lock_or_say 9 "$LOCK" "$REPO"
if [[ "${FORCE:-}" != 1 ]] && have_tag; then
	point_latest "$REPO" "$TAG"
	exit 0
fi

# The build records its steps where a daemon whose create waits for this
# image reads them (its status and log, the waiting create).
record_build_progress "$REPO"
log "building $TAG on $BASE_REPO:$BASE_HASH (apt inside the build; several minutes the first time)"
# The build's apt reaches the mirror through the host's network: the
# engine's default bridge may have no route out on a locked-down machine.
docker build --network=host --pull=false -q \
	--build-arg "BASE=$BASE_REPO:$BASE_HASH" \
	--label "$HASH_LABEL=$HASH" \
	-t "$TAG" "$RECIPE" >/dev/null
point_latest "$REPO" "$TAG"
