#!/usr/bin/env bash
# Builds the realistic sandbox image (sandpit/base:latest) from Debian
# packages with debootstrap: bookworm minbase plus the packages listed in
# images/base/packages, configured by images/base/setup.sh (a `user` account,
# uid 1000, passwordless sudo), then `docker import`. No registry is needed,
# only a Debian mirror.
#
# Cached by a hash of the recipe (this script and images/base/*):
#   - the image is tagged sandpit/base:<hash>; when that tag exists nothing is
#     built or imported, only sandpit/base:latest is pointed at it;
#   - the rootfs tarball is kept in $SANDPIT_CACHE_DIR (default
#     /var/cache/sandpit as root), so a pruned image is re-imported without
#     running debootstrap again.
# Concurrent runs are serialised with flock.
#
# Environment:
#   SANDPIT_BASE_IMAGE   repository to tag (default sandpit/base)
#   SANDPIT_CACHE_DIR    where rootfs tarballs are cached
#   DEBIAN_MIRROR        mirror for debootstrap (default: the one apt uses)
#   FORCE=1              rebuild even when the hash matches
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RECIPE="$ROOT/images/base"
REPO="${SANDPIT_BASE_IMAGE:-sandpit/base}"
SUITE=bookworm
HASH_LABEL="sandpit.base-image.hash"

log() { printf 'build-base-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -z "${SANDPIT_CACHE_DIR:-}" ]]; then
	if [[ $(id -u) -eq 0 ]]; then SANDPIT_CACHE_DIR=/var/cache/sandpit; else SANDPIT_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/sandpit"; fi
fi
mkdir -p "$SANDPIT_CACHE_DIR"
command -v docker >/dev/null 2>&1 || die "docker CLI not found"

ARCH="$(dpkg --print-architecture 2>/dev/null || uname -m)"
# The recipe: this script, the package list and the set-up script, plus the
# architecture. The mirror is not part of it: any mirror yields the same
# packages for the same suite.
HASH="$( (cat "${BASH_SOURCE[0]}" "$RECIPE/packages" "$RECIPE/setup.sh"; echo "$SUITE $ARCH") | sha256sum | cut -c1-16)"
# >>> not in the recipe hash
# The recipe hash covers what decides the image's content, not how runs
# are serialised or report progress: it is computed over this script without
# its "not in the recipe hash" blocks (scripts/lib/image-build.sh). The line
# above stays as it was, so that without these blocks this file is byte for
# byte the script the cached images were hashed with.
. "$ROOT/scripts/lib/image-build.sh"
HASH="$( (recipe_script "${BASH_SOURCE[0]}"; cat "$RECIPE/packages" "$RECIPE/setup.sh"; echo "$SUITE $ARCH") | sha256sum | cut -c1-16)"
# <<< not in the recipe hash
TAG="$REPO:$HASH"
TARBALL="$SANDPIT_CACHE_DIR/base-$SUITE-$ARCH-$HASH.tar"

have_tag() { docker image inspect "$TAG" >/dev/null 2>&1; }
# point_latest moves $REPO:latest to this recipe's image and drops the image
# of an older recipe it pointed at (unless a container still uses it), so
# recipe changes do not pile up images; other recipes' tarballs go too.
point_latest() {
	local old
	old="$(docker image inspect -f '{{.Id}}' "$REPO:latest" 2>/dev/null || true)"
	docker tag "$TAG" "$REPO:latest"
	log "$REPO:latest is $TAG"
	if [[ -n "$old" && "$old" != "$(docker image inspect -f '{{.Id}}' "$TAG")" ]]; then
		docker image inspect -f '{{range .RepoTags}}{{println .}}{{end}}' "$old" 2>/dev/null |
			grep -E "^$REPO:[0-9a-f]{16}\$" | xargs -r docker image rm >/dev/null 2>&1 || true
	fi
	find "$SANDPIT_CACHE_DIR" -maxdepth 1 -name "base-$SUITE-$ARCH-*.tar" ! -name "$(basename "$TARBALL")" -delete 2>/dev/null || true
}

if [[ "${FORCE:-}" != 1 ]] && have_tag; then
	point_latest
	exit 0
fi

exec 9>"$SANDPIT_CACHE_DIR/build-base-image.lock"
# >>> not in the recipe hash
# Say what a wait is for (the flock below then returns at once).
lock_or_say 9 "$SANDPIT_CACHE_DIR/build-base-image.lock" "$REPO"
# <<< not in the recipe hash
flock 9
if [[ "${FORCE:-}" != 1 ]] && have_tag; then
	point_latest
	exit 0
fi

# debootstrap's mirror: the one apt already uses on this machine (deb822 or
# one-line sources), so a machine that only reaches its own mirror works.
apt_mirror() {
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -f "$f" ]] || continue
		awk -v s="$SUITE" '
			/^URIs:/ { u = $2 } /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s) ok = 1 }
			/^$/ { if (ok && u != "") { print u; exit } ok = 0; u = "" }
			END { if (ok && u != "") print u }' "$f" | head -n1
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -f "$f" ]] || continue
		awk -v s="$SUITE" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i+1) == s) print $i }' "$f"
	done
}
MIRROR="${DEBIAN_MIRROR:-$(apt_mirror | grep -v -- '-security' | head -n1)}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"

if [[ "${FORCE:-}" == 1 || ! -s "$TARBALL" ]]; then
	[[ $(id -u) -eq 0 ]] || die "debootstrap needs root"
	if ! command -v debootstrap >/dev/null 2>&1; then
		log "installing debootstrap"
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y -qq debootstrap >/dev/null ||
			{ apt-get update -qq >/dev/null && apt-get install -y -qq debootstrap >/dev/null; }
	fi
	WORK="$(mktemp -d "$SANDPIT_CACHE_DIR/build.XXXXXX")"
	cleanup() {
		# A failed chroot step may leave /proc mounted; never rm through it.
		umount "$WORK/rootfs/proc" 2>/dev/null || true
		rm -rf --one-file-system "$WORK"
	}
	trap cleanup EXIT
	R="$WORK/rootfs"
	PKGS="$(grep -v -e '^#' -e '^[[:space:]]*$' "$RECIPE/packages" | paste -sd' ' -)"
	# debootstrap lays down minbase only: its own dependency resolver cannot
	# configure npm's web of node-* packages, so apt inside the chroot
	# installs the rest.
	log "debootstrap $SUITE minbase from $MIRROR"
	debootstrap --variant=minbase --arch="$ARCH" "$SUITE" "$R" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
		{ tail -n 30 "$WORK/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
	mount -t proc proc "$R/proc"
	cp /etc/resolv.conf "$R/etc/resolv.conf"
	# No service may start inside the chroot while packages are configured.
	printf '#!/bin/sh\nexit 101\n' >"$R/usr/sbin/policy-rc.d"
	chmod 0755 "$R/usr/sbin/policy-rc.d"
	log "apt-get install $PKGS"
	chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
		sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends $PKGS" >"$WORK/apt.log" 2>&1 ||
		{ tail -n 30 "$WORK/apt.log" >&2; die "apt-get install failed (log above)"; }
	rm -f "$R/usr/sbin/policy-rc.d"
	: >"$R/etc/resolv.conf"
	install -m 0755 "$RECIPE/setup.sh" "$R/tmp/setup.sh"
	chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin /bin/sh /tmp/setup.sh
	umount "$R/proc"
	rm -f "$R/tmp/setup.sh"
	rm -rf "$R"/var/log/* "$R"/var/cache/apt/archives/*.deb "$R"/dev/*
	tar -C "$R" --numeric-owner --xattrs --sort=name -cf "$TARBALL.part" .
	mv "$TARBALL.part" "$TARBALL"
	log "rootfs cached at $TARBALL ($(du -h "$TARBALL" | cut -f1))"
fi

log "importing $TAG"
docker import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'ENV LANG=C.UTF-8' \
	--change 'WORKDIR /' \
	--change "LABEL $HASH_LABEL=$HASH" \
	--change 'CMD ["/bin/bash"]' \
	--message "sandpit base image $HASH (debootstrap $SUITE)" \
	"$TARBALL" "$TAG" >/dev/null
point_latest
