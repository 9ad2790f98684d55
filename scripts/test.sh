#!/usr/bin/env bash
# The whole test suite: test image, vet, static build, Go tests (race
# detector, real Docker), then the SDK compatibility tests under test/ when
# they exist. Needs a running Docker engine (scripts/ensure-docker.sh).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*"; }

step "repository hygiene"
scripts/check-repo.sh

step "test image"
scripts/build-test-image.sh

step "go vet ./..."
go vet ./...

step "CGO_ENABLED=0 go build ./..."
CGO_ENABLED=0 go build ./...

step "go test -race -count=1 -timeout ${GO_TEST_TIMEOUT:-20m} ./..."
go test -race -count=1 -timeout "${GO_TEST_TIMEOUT:-20m}" ./...

# Every Go native fuzz target runs for a short fixed time beyond its seed
# corpus (testdata/fuzz, which the plain test run above replays). A failure
# leaves the crashing input in testdata/fuzz/<target>/ to commit as a seed.
fuzz_time="${FUZZ_TIME:-5s}"
while read -r pkg target; do
	step "fuzz $target ($pkg, $fuzz_time)"
	go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzz_time" "$pkg"
done < <(grep -rlE --include='*_test.go' '^func Fuzz' internal cmd test 2>/dev/null |
	while read -r f; do
		for t in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$f" | cut -d' ' -f2); do
			echo "./$(dirname "$f") $t"
		done
	done | sort)

for dir in test/e2b test/daytona; do
	[[ -f "$dir/package.json" ]] || continue
	step "node tests in $dir"
	(
		cd "$dir"
		# A checkout has no node_modules (ignored by git): install then. An
		# existing one is used as is, so this works without a registry.
		if [[ ! -d node_modules ]]; then
			if [[ -f package-lock.json ]]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi
		fi
		# The package's own test script when it has one, else node's runner.
		if node -e 'process.exit(require("./package.json").scripts?.test ? 0 : 1)'; then
			npm test
		else
			node --test
		fi
	)
done

step "all tests passed"
