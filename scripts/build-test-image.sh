#!/usr/bin/env bash
# Builds the local test image (default sandpit/base:test) with `docker import`
# from a tiny rootfs made of Debian's busybox-static and bash-static. No
# registry is needed.
#
# Idempotent: the image carries a label with a hash of its inputs (this script
# and the two binaries); when the existing image has the same hash, nothing is
# rebuilt. Concurrent runs are serialised with flock.
#
# Environment:
#   SANDPIT_TEST_IMAGE   image reference to build (default sandpit/base:test)
#   BUSYBOX              static busybox to use (default: from busybox-static)
#   BASH_STATIC          static bash to use (default: from bash-static)
#   FORCE=1              rebuild even when the hash matches
set -euo pipefail

IMAGE="${SANDPIT_TEST_IMAGE:-sandpit/base:test}"
HASH_LABEL="sandpit.test-image.hash"
SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"

log() { printf 'build-test-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# pkg_file PACKAGE SUFFIX: the path dpkg lists for PACKAGE that ends in SUFFIX.
pkg_file() {
	command -v dpkg >/dev/null 2>&1 || return 0
	dpkg -L "$1" 2>/dev/null | grep -E "$2\$" | head -n1 || true
}

find_binaries() {
	BUSYBOX="${BUSYBOX:-$(pkg_file busybox-static /bin/busybox)}"
	BASH_STATIC="${BASH_STATIC:-$(pkg_file bash-static /bin/bash-static)}"
}

find_binaries
if [[ -z "$BUSYBOX" || ! -x "$BUSYBOX" || -z "$BASH_STATIC" || ! -x "$BASH_STATIC" ]]; then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		log "installing busybox-static and bash-static"
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y -qq busybox-static bash-static >/dev/null ||
			{ apt-get update -qq >/dev/null && apt-get install -y -qq busybox-static bash-static >/dev/null; }
		find_binaries
	fi
fi
[[ -n "$BUSYBOX" && -x "$BUSYBOX" ]] || die "static busybox not found (apt-get install busybox-static, or set BUSYBOX)"
[[ -n "$BASH_STATIC" && -x "$BASH_STATIC" ]] || die "static bash not found (apt-get install bash-static, or set BASH_STATIC)"
command -v docker >/dev/null 2>&1 || die "docker CLI not found"

HASH="$(cat "$SELF" "$BUSYBOX" "$BASH_STATIC" | sha256sum | cut -c1-32)"
# >>> not in the recipe hash
# The recipe hash covers what decides the image's content, not how runs
# are serialised or report progress: it is computed over this script without
# its "not in the recipe hash" blocks (scripts/lib/image-build.sh). The line
# above stays as it was, so that without these blocks this file is byte for
# byte the script the cached images were hashed with.
. "$(dirname "$SELF")/lib/image-build.sh"
HASH="$( (recipe_script "$SELF"; cat "$BUSYBOX" "$BASH_STATIC") | sha256sum | cut -c1-32)"
# <<< not in the recipe hash

current_hash() {
	docker image inspect -f "{{index .Config.Labels \"$HASH_LABEL\"}}" "$IMAGE" 2>/dev/null || true
}

if [[ "${FORCE:-}" != 1 && "$(current_hash)" == "$HASH" ]]; then
	log "$IMAGE is up to date ($HASH)"
	exit 0
fi

# Serialise concurrent builds (several test packages may ask at once); the
# loser re-checks the hash after getting the lock.
LOCK="${TMPDIR:-/tmp}/sandpit-build-test-image.lock"
exec 9>"$LOCK"
if command -v flock >/dev/null 2>&1; then
	# >>> not in the recipe hash
	# Say what a wait is for (the flock below then returns at once).
	lock_or_say 9 "$LOCK" "$IMAGE"
	# <<< not in the recipe hash
	flock 9
	if [[ "${FORCE:-}" != 1 && "$(current_hash)" == "$HASH" ]]; then
		log "$IMAGE is up to date ($HASH)"
		exit 0
	fi
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
R="$WORK/rootfs"

# Merged-/usr layout, like Debian 12: /bin and /sbin are links into /usr, so
# /bin/sh, /bin/bash and /usr/bin/env all resolve.
mkdir -p "$R"/{usr/bin,usr/sbin,usr/local/bin,usr/local/sbin,etc,root,home/user,tmp,var/tmp,run,opt,mnt,proc,sys,dev}
ln -s usr/bin "$R/bin"
ln -s usr/sbin "$R/sbin"
chmod 1777 "$R/tmp" "$R/var/tmp"
chmod 0700 "$R/root"
chmod 0755 "$R/home/user"

install -m 0755 "$BUSYBOX" "$R/usr/bin/busybox"
# Every applet: in usr/bin, or usr/sbin for the ones busybox files under sbin.
while read -r applet; do
	name="${applet##*/}"
	[[ "$name" == busybox ]] && continue
	case "$applet" in
	sbin/* | usr/sbin/*) ln -sf ../bin/busybox "$R/usr/sbin/$name" ;;
	*) ln -sf busybox "$R/usr/bin/$name" ;;
	esac
done < <("$R/usr/bin/busybox" --list-full)
# Make sure the common ones are reachable from usr/bin too.
for name in $("$R/usr/bin/busybox" --list); do
	[[ -e "$R/usr/bin/$name" || -L "$R/usr/bin/$name" ]] || ln -s busybox "$R/usr/bin/$name"
done
ln -sf busybox "$R/usr/bin/sh"
rm -f "$R/usr/bin/bash"
install -m 0755 "$BASH_STATIC" "$R/usr/bin/bash"

cat >"$R/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/bash
user:x:1000:1000:user:/home/user:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$R/etc/group" <<'EOF'
root:x:0:
user:x:1000:
nogroup:x:65534:
EOF
cat >"$R/etc/shadow" <<'EOF'
root:*:19000:0:99999:7:::
user:*:19000:0:99999:7:::
nobody:*:19000:0:99999:7:::
EOF
chmod 0640 "$R/etc/shadow"
cat >"$R/etc/profile" <<'EOF'
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
EOF
printf 'sandpit test image (busybox-static + bash-static)\n' >"$R/etc/issue"

# Owners are set in the archive, not on disk, so this works without root:
# everything is root's except /home/user.
TAR_OPTS=(--numeric-owner --sort=name --mtime=@0 --format=gnu)
tar -C "$R" "${TAR_OPTS[@]}" --owner=0 --group=0 --exclude=./home/user -cf "$WORK/rootfs.tar" .
tar -C "$R" "${TAR_OPTS[@]}" --owner=1000 --group=1000 -rf "$WORK/rootfs.tar" ./home/user

OLD_ID="$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
log "importing $IMAGE ($HASH)"
docker import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'WORKDIR /' \
	--change "LABEL $HASH_LABEL=$HASH" \
	--change 'CMD ["/bin/sh"]' \
	--message "sandpit test image $HASH" \
	"$WORK/rootfs.tar" "$IMAGE" >/dev/null
# Drop the previous build, now untagged, unless a container still uses it.
if [[ -n "$OLD_ID" && "$OLD_ID" != "$(docker image inspect -f '{{.Id}}' "$IMAGE")" ]]; then
	docker image rm "$OLD_ID" >/dev/null 2>&1 || true
fi
log "built $IMAGE"
