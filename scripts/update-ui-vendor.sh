#!/usr/bin/env bash
# Reproduces the dashboard's vendored terminal, internal/ui/static/vendor/xterm/,
# from the versions pinned in internal/ui/xterm/package-lock.json: npm ci in a
# temporary directory, then the packages' distributed files are copied (the
# UMD builds, the stylesheet and each package's licence). The daemon embeds
# the copies, so `go build` needs neither npm nor the network.
#
# usage: scripts/update-ui-vendor.sh [--check]
# --check copies nothing and fails when the vendored files differ from what
# the lockfile gives (for CI).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
pin=internal/ui/xterm
dest=internal/ui/static/vendor/xterm
check=false
[[ "${1:-}" == "--check" ]] && check=true

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$pin/package.json" "$pin/package-lock.json" "$work/"
(cd "$work" && npm ci --ignore-scripts --prefer-offline --no-audit --no-fund --loglevel=error >/dev/null)

mods=$work/node_modules/@xterm
out=$work/out
mkdir -p "$out"
cp "$mods/xterm/lib/xterm.js" "$mods/xterm/css/xterm.css" "$out/"
cp "$mods/xterm/LICENSE" "$out/LICENSE"
cp "$mods/addon-fit/lib/addon-fit.js" "$out/"
cp "$mods/addon-fit/LICENSE" "$out/LICENSE.addon-fit"
# The builds end with a sourceMappingURL comment naming a map that is not
# vendored; the browser would ask for it and log a 404.
sed -i '/^\/\/# sourceMappingURL=/d' "$out/xterm.js" "$out/addon-fit.js"
xv=$(node -p "require('$mods/xterm/package.json').version")
fv=$(node -p "require('$mods/addon-fit/package.json').version")
cat >"$out/README.md" <<EOT
The terminal of the /ui dashboard, vendored unmodified but for the source-map
comment: \`xterm.js\` and \`xterm.css\` from the npm package @xterm/xterm $xv,
\`addon-fit.js\` from @xterm/addon-fit $fv, under the MIT licences beside
them (LICENSE, LICENSE.addon-fit). Pinned in internal/ui/xterm/package-lock.json;
scripts/update-ui-vendor.sh reproduces these files.
EOT

if $check; then
	if ! diff -r "$out" "$dest" >/dev/null; then
		echo "update-ui-vendor: $dest differs from $pin/package-lock.json; run scripts/update-ui-vendor.sh" >&2
		diff -r "$out" "$dest" | head -20 >&2 || true
		exit 1
	fi
	echo "update-ui-vendor: $dest matches the lockfile"
	exit 0
fi
rm -rf "$dest"
mkdir -p "$dest"
cp "$out"/* "$dest/"
echo "update-ui-vendor: wrote $dest (@xterm/xterm $xv, @xterm/addon-fit $fv)"
