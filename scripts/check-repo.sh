#!/usr/bin/env bash
# Fails when a tracked file is over 1 MiB or is a compiled executable (ELF,
# Mach-O or PE): build artefacts belong in bin/ or a cache, never in git.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

limit=$((1024 * 1024))
bad=0
while IFS= read -r -d '' f; do
	[[ -f "$f" ]] || continue
	size=$(stat -c %s "$f")
	if ((size > limit)); then
		echo "check-repo: $f is $size bytes (limit $limit)" >&2
		bad=1
	fi
	magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
	case "$magic" in
	7f454c46 | feedface | feedfacf | cefaedfe | cffaedfe | 4d5a*)
		echo "check-repo: $f is an executable binary" >&2
		bad=1
		;;
	esac
done < <(git ls-files -z)
exit "$bad"
