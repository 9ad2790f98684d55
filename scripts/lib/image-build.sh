# shellcheck shell=bash
# What the image build scripts (scripts/build-*-image.sh) share about how a
# build runs, as opposed to what it builds: the lock that serialises
# concurrent runs, the line saying what a run waits for, and the progress
# file a daemon reads while a create waits for the image.
#
# Each script's recipe hash covers the script itself, so that a change to
# what it builds rebuilds its image. This file is not part of any hash: a
# change here rebuilds nothing. The scripts source it from blocks marked
#   # >>> not in the recipe hash
#   # <<< not in the recipe hash
# which recipe_script leaves out of the hash.

# recipe_script FILE prints FILE without its "not in the recipe hash"
# blocks: the part of a build script that decides the image's content.
recipe_script() {
	sed '/^[[:space:]]*# >>> not in the recipe hash$/,/^[[:space:]]*# <<< not in the recipe hash$/d' "$1"
}

# lock_holder FILE prints the pid holding a lock on FILE (from /proc/locks),
# or nothing when no process does or it cannot be told.
lock_holder() {
	local ino
	ino="$(stat -L -c %i "$1" 2>/dev/null)" || return 0
	[[ -r /proc/locks ]] || return 0
	# Fields: "N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END"; a
	# waiter's line carries "->" and is not the holder.
	awk -v ino="$ino" '$2 != "->" { n = split($6, f, ":"); if (n == 3 && f[3] == ino) { print $5; exit } }' /proc/locks
}

# lock_or_say FD FILE WHAT takes the lock FD holds open on FILE. When
# another run holds it, it first says so on stderr, naming WHAT it waits for,
# the lock file and the holder's pid: that run's build can take minutes, and
# a silent wait looks like a hang.
lock_or_say() {
	local fd="$1" file="$2" what="$3" pid held
	flock -n "$fd" && return 0
	pid="$(lock_holder "$file")"
	held=""
	[[ -n "$pid" ]] && held=", held by pid $pid"
	printf '%s: waiting for another build of %s (lock %s%s)\n' "$(basename "$0" .sh)" "$what" "$file" "$held" >&2
	flock "$fd"
	printf '%s: the other build of %s finished; going on\n' "$(basename "$0" .sh)" "$what" >&2
}

# progress_file REPO is where a build of REPO records its progress, in
# $SANDPIT_CACHE_DIR; `sandpit serve` looks there (its --image-cache-dir)
# for the images of the templates it awaits. One line: the pid of the build
# script, a tab, and where the build is ("step 3/7: RUN apt-get ...").
progress_file() {
	printf '%s/%s.progress\n' "$SANDPIT_CACHE_DIR" "$(printf '%s' "$1" | tr '/:' '__')"
}

# progress_write REPO TEXT records TEXT as the progress of this run's
# build of REPO.
progress_write() {
	local f
	f="$(progress_file "$1")"
	printf '%s\t%s\n' "$$" "$2" >"$f.part" && mv "$f.part" "$f"
}

# progress_clear REPO removes the progress file of this run's build of
# REPO (not another run's: a waiter that gave up leaves the builder's).
progress_clear() {
	local f
	f="$(progress_file "$1")"
	[[ "$(cut -f1 "$f" 2>/dev/null)" == "$$" ]] && rm -f "$f"
	return 0
}

# progress_build REPO docker build ARGS... runs the build with its steps
# recorded (progress_write) and logged on stderr: "-q" is dropped so that
# the engine reports its steps, and its output is read instead of printed.
# A failed build's last lines go to stderr, as a quiet build's error would.
progress_build() {
	local repo="$1" line step a rc=0 out
	# The engine's status, not the reader's, is the build's: pipefail for
	# this function only.
	local -
	set -o pipefail
	shift
	local args=()
	for a in "$@"; do [[ "$a" == -q ]] || args+=("$a"); done
	out="$(progress_file "$repo").log"
	progress_write "$repo" "starting the build"
	# The classic builder prints "Step 3/7 : RUN ..."; BuildKit (plain
	# progress) "#7 [3/7] RUN ...".
	"${args[@]}" 2>&1 | tee "$out" | while IFS= read -r line; do
		step=""
		if [[ "$line" =~ ^Step\ ([0-9]+/[0-9]+)\ :\ (.*)$ ]]; then
			step="step ${BASH_REMATCH[1]}: ${BASH_REMATCH[2]}"
		elif [[ "$line" =~ ^#[0-9]+\ \[([0-9]+/[0-9]+)\]\ (.*)$ ]]; then
			step="step ${BASH_REMATCH[1]}: ${BASH_REMATCH[2]}"
		fi
		if [[ -n "$step" ]]; then
			step="${step:0:200}"
			progress_write "$repo" "$step"
			printf '%s: %s\n' "$(basename "$0" .sh)" "$step" >&2
		fi
	done || rc=$?
	[[ $rc -eq 0 ]] || tail -n 30 "$out" >&2
	rm -f "$out"
	# The file stays until the script exits (record_build_progress): the
	# image is tagged as the daemon awaits it only after the build.
	progress_write "$repo" "$([[ $rc -eq 0 ]] && echo "built; tagging the image" || echo "failed")"
	return "$rc"
}

# record_build_progress REPO makes every later `docker build` of the script
# run through progress_build for REPO, so that the script's own build line,
# part of its recipe hash, stays as it is.
# The progress file goes when the script exits, however it does: that
# trap is the script's EXIT trap.
record_build_progress() {
	_progress_repo="$1"
	trap 'progress_clear "$_progress_repo"' EXIT
	docker() {
		if [[ "${1:-}" == build ]]; then
			progress_build "$_progress_repo" command docker "$@"
		else
			command docker "$@"
		fi
	}
}

# What a template image built on the base image does besides its own build
# (scripts/build-desktop-image.sh uses these; the older scripts carry their
# own copies, which stay as they are because their text is in their images'
# recipe hashes).

# default_cache_dir sets SANDPIT_CACHE_DIR, when unset, to where the base
# image's script keeps its cache (/var/cache/sandpit as root, else the
# user's cache directory), and makes it.
default_cache_dir() {
	if [[ -z "${SANDPIT_CACHE_DIR:-}" ]]; then
		if [[ $(id -u) -eq 0 ]]; then SANDPIT_CACHE_DIR=/var/cache/sandpit; else SANDPIT_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/sandpit"; fi
	fi
	export SANDPIT_CACHE_DIR
	mkdir -p "$SANDPIT_CACHE_DIR"
}

# base_image_hash ROOT BASE_REPO builds the base image when missing
# (ROOT/scripts/build-base-image.sh) and prints its recipe hash, which a
# template image's own hash includes so that a new base rebuilds it.
base_image_hash() {
	local root="$1" repo="$2" hash
	"$root/scripts/build-base-image.sh"
	hash="$(docker image inspect -f '{{index .Config.Labels "sandpit.base-image.hash"}}' "$repo:latest")"
	if [[ -z "$hash" ]]; then
		printf '%s: %s:latest carries no recipe hash\n' "$(basename "$0" .sh)" "$repo" >&2
		return 1
	fi
	printf '%s\n' "$hash"
}

# point_latest REPO TAG moves REPO:latest to TAG and drops the image of an
# older recipe it pointed at (tagged REPO:<16 hex digits>), so recipe
# changes do not pile up images.
point_latest() {
	local repo="$1" tag="$2" old
	old="$(docker image inspect -f '{{.Id}}' "$repo:latest" 2>/dev/null || true)"
	docker tag "$tag" "$repo:latest"
	printf '%s: %s:latest is %s\n' "$(basename "$0" .sh)" "$repo" "$tag" >&2
	if [[ -n "$old" && "$old" != "$(docker image inspect -f '{{.Id}}' "$tag")" ]]; then
		docker image inspect -f '{{range .RepoTags}}{{println .}}{{end}}' "$old" 2>/dev/null |
			grep -E "^$repo:[0-9a-f]{16}\$" | xargs -r docker image rm >/dev/null 2>&1 || true
	fi
}
