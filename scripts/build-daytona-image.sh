#!/usr/bin/env bash
# Builds the Daytona facade's default image (sandpit/daytona:latest) from
# images/daytona on top of the base image, which it builds first when
# missing (scripts/build-base-image.sh): the `daytona` account, `python`,
# and the TypeScript language server. The language server comes from the
# npm registry through the host's npm (images/daytona/package-lock.json
# pins it); the build itself needs no network.
#
# Cached by a hash of the recipe (this script, images/daytona/* and the base
# image's recipe hash): when sandpit/daytona:<hash> exists nothing is built,
# only :latest is pointed at it. A daemon started while the image exists
# registers it as the template "daytona". Concurrent runs are serialised
# with flock.
#
# Environment:
#   SANDPIT_DAYTONA_IMAGE  repository to tag (default sandpit/daytona)
#   SANDPIT_BASE_IMAGE     the base image's repository (default sandpit/base)
#   SANDPIT_CACHE_DIR      where the lock lives (as for the base image)
#   FORCE=1                rebuild even when the hash matches
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RECIPE="$ROOT/images/daytona"
REPO="${SANDPIT_DAYTONA_IMAGE:-sandpit/daytona}"
BASE_REPO="${SANDPIT_BASE_IMAGE:-sandpit/base}"
HASH_LABEL="sandpit.daytona-image.hash"

log() { printf 'build-daytona-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -z "${SANDPIT_CACHE_DIR:-}" ]]; then
	if [[ $(id -u) -eq 0 ]]; then SANDPIT_CACHE_DIR=/var/cache/sandpit; else SANDPIT_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/sandpit"; fi
fi
mkdir -p "$SANDPIT_CACHE_DIR"
command -v docker >/dev/null 2>&1 || die "docker CLI not found"
# Without npm there is no language server to install: the daemon then runs
# Daytona creates on the default image, so this is not an error.
if ! command -v npm >/dev/null 2>&1; then
	log "npm not found: not building $REPO (apt-get install npm); Daytona creates will use the default image"
	exit 0
fi

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

# point_latest moves :latest to this recipe's image and drops the one it
# pointed at before, unless a container still uses it.
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

exec 9>"$SANDPIT_CACHE_DIR/build-daytona-image.lock"
# >>> not in the recipe hash
# Say what a wait is for (the flock below then returns at once).
lock_or_say 9 "$SANDPIT_CACHE_DIR/build-daytona-image.lock" "$REPO"
# <<< not in the recipe hash
flock 9
if [[ "${FORCE:-}" != 1 ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
	point_latest
	exit 0
fi

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp "$RECIPE/Dockerfile" "$ctx/"
mkdir "$ctx/lsp"
cp "$RECIPE/package.json" "$RECIPE/package-lock.json" "$ctx/lsp/"
log "installing the TypeScript language server (npm ci)"
(cd "$ctx/lsp" && npm ci --omit=dev --no-audit --no-fund --ignore-scripts >/dev/null)
log "building $TAG on $BASE_REPO:$BASE_HASH"
docker build --network=none --pull=false -q \
	--build-arg "BASE=$BASE_REPO:$BASE_HASH" \
	--label "$HASH_LABEL=$HASH" \
	-t "$TAG" "$ctx" >/dev/null
point_latest
