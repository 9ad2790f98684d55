#!/usr/bin/env bash
# Builds the code-interpreter template's image (sandpit/code-interpreter:latest)
# from images/code-interpreter on top of the base image, which it builds
# first when missing (scripts/build-base-image.sh). Only Debian's mirror is
# needed: the packages come from apt inside the build.
#
# Cached by a hash of the recipe (this script, images/code-interpreter/* and
# the base image's own recipe hash): when sandpit/code-interpreter:<hash>
# exists nothing is built, only :latest is pointed at it. A daemon started
# while the image exists registers it as the code-interpreter-v1 template.
# Concurrent runs are serialised with flock.
#
# Environment:
#   SANDPIT_INTERPRETER_IMAGE  repository to tag (default sandpit/code-interpreter)
#   SANDPIT_BASE_IMAGE         the base image's repository (default sandpit/base)
#   SANDPIT_CACHE_DIR          where the lock lives (as for the base image)
#   FORCE=1                    rebuild even when the hash matches
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RECIPE="$ROOT/images/code-interpreter"
REPO="${SANDPIT_INTERPRETER_IMAGE:-sandpit/code-interpreter}"
BASE_REPO="${SANDPIT_BASE_IMAGE:-sandpit/base}"
HASH_LABEL="sandpit.interpreter-image.hash"

log() { printf 'build-code-interpreter-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -z "${SANDPIT_CACHE_DIR:-}" ]]; then
	if [[ $(id -u) -eq 0 ]]; then SANDPIT_CACHE_DIR=/var/cache/sandpit; else SANDPIT_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/sandpit"; fi
fi
mkdir -p "$SANDPIT_CACHE_DIR"
command -v docker >/dev/null 2>&1 || die "docker CLI not found"

"$ROOT/scripts/build-base-image.sh"
BASE_HASH="$(docker image inspect -f '{{index .Config.Labels "sandpit.base-image.hash"}}' "$BASE_REPO:latest")"
[[ -n "$BASE_HASH" ]] || die "$BASE_REPO:latest carries no recipe hash"

HASH="$( (cat "${BASH_SOURCE[0]}"; find "$RECIPE" -type f | sort | xargs cat; echo "base $BASE_HASH") | sha256sum | cut -c1-16)"
# >>> not in the recipe hash
# The recipe hash covers what decides the image's content, not how runs
# are serialised or report progress: it is computed over this script without
# its "not in the recipe hash" blocks (scripts/lib/image-build.sh). The line
# above stays as it was, so that without these blocks this file is byte for
# byte the script the cached images were hashed with.
. "$ROOT/scripts/lib/image-build.sh"
HASH="$( (recipe_script "${BASH_SOURCE[0]}"; find "$RECIPE" -type f | sort | xargs cat; echo "base $BASE_HASH") | sha256sum | cut -c1-16)"
# <<< not in the recipe hash
TAG="$REPO:$HASH"

have_tag() { docker image inspect "$TAG" >/dev/null 2>&1; }
# point_latest moves :latest to this recipe's image and drops the image of
# an older recipe it pointed at, so recipe changes do not pile up images.
point_latest() {
	local old
	old="$(docker image inspect -f '{{.Id}}' "$REPO:latest" 2>/dev/null || true)"
	docker tag "$TAG" "$REPO:latest"
	log "$REPO:latest is $TAG"
	if [[ -n "$old" && "$old" != "$(docker image inspect -f '{{.Id}}' "$TAG")" ]]; then
		docker image inspect -f '{{range .RepoTags}}{{println .}}{{end}}' "$old" 2>/dev/null |
			grep -E "^$REPO:[0-9a-f]{16}\$" | xargs -r docker image rm >/dev/null 2>&1 || true
	fi
}

if [[ "${FORCE:-}" != 1 ]] && have_tag; then
	point_latest
	exit 0
fi
exec 9>"$SANDPIT_CACHE_DIR/build-code-interpreter-image.lock"
# >>> not in the recipe hash
# Say what a wait is for (the flock below then returns at once).
lock_or_say 9 "$SANDPIT_CACHE_DIR/build-code-interpreter-image.lock" "$REPO"
# <<< not in the recipe hash
flock 9
if [[ "${FORCE:-}" != 1 ]] && have_tag; then
	point_latest
	exit 0
fi

# >>> not in the recipe hash
# The build below records its steps where a daemon whose create waits
# for this image reads them (its status and log, the waiting create).
record_build_progress "$REPO"
# <<< not in the recipe hash
log "building $TAG on $BASE_REPO:$BASE_HASH (apt inside the build; several minutes the first time)"
# The build's apt reaches the mirror through the host's network: the
# engine's default bridge may have no route out on a locked-down machine.
docker build --network=host --pull=false -q \
	--build-arg "BASE=$BASE_REPO:$BASE_HASH" \
	--label "$HASH_LABEL=$HASH" \
	-t "$TAG" "$RECIPE" >/dev/null
point_latest
