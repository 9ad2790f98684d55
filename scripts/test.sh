#!/usr/bin/env bash
# The whole test suite: test and base images, vet, static build, Go tests (race
# detector, real Docker), then the SDK compatibility tests under test/ when
# they exist. Needs a running Docker engine (scripts/ensure-docker.sh).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*"; }

step "repository hygiene"
scripts/check-repo.sh

step "test image"
scripts/build-test-image.sh

# The realistic image the E2B conformance tests run on; cached by a hash of
# its recipe under /var/cache/sandpit, so only the first run builds it.
step "base image"
scripts/build-base-image.sh

# The desktop template's image (base image plus Xvfb, Xfce, a VNC server,
# noVNC and Chromium, about 5 minutes to build when its recipe changed;
# cached by its recipe's hash like the others): built in the background
# while the rest of the run goes on, since only the desktop tests need it
# (test/e2b/desktop.test.mjs, test/daytona/computer-use.test.mjs,
# test/mcp/desktop.test.mjs). They
# wait for the status file (test/desktop-image.mjs) and fail with the
# build's log when the build failed; the run fails then too.
step "desktop image (in the background)"
SANDPIT_DESKTOP_BUILD="$(mktemp -d)"
export SANDPIT_DESKTOP_BUILD
(
	rc=0
	scripts/build-desktop-image.sh >"$SANDPIT_DESKTOP_BUILD/log" 2>&1 || rc=$?
	echo "$rc" >"$SANDPIT_DESKTOP_BUILD/status.part"
	mv "$SANDPIT_DESKTOP_BUILD/status.part" "$SANDPIT_DESKTOP_BUILD/status"
) &
desktop_build_pid=$!
echo "log: $SANDPIT_DESKTOP_BUILD/log"

# The code-interpreter template's image (base image plus Debian's Jupyter
# and data packages): cached by its recipe's hash, so only a run after a
# recipe change builds it.
step "code-interpreter image"
scripts/build-code-interpreter-image.sh

# The Daytona facade's default image (base image plus the `daytona`
# account, python and a TypeScript language server from npm): cached by its
# recipe's hash like the others.
step "Daytona image"
scripts/build-daytona-image.sh

step "go vet ./..."
go vet ./...

step "CGO_ENABLED=0 go build ./..."
CGO_ENABLED=0 go build ./...

step "scripts/update-ui-vendor.sh --check (the dashboard's vendored xterm is the lockfile's)"
scripts/update-ui-vendor.sh --check

step "scripts/build.sh (sandpit with the small agent embedded)"
scripts/build.sh -o bin/sandpit

# Test daemons run without the warm pool sized from demand (on by default
# for users), so that every container a test's daemon holds is one of its
# sandboxes; the pool's own tests turn it on with --warm-pool-auto.
export SANDPIT_WARM_POOL_AUTO=false

step "Caddy with caddy-l4 (built once per tools/caddy-l4/go.sum, cached)"
SANDPIT_CADDY_L4="$(scripts/build-caddy-l4.sh)"
export SANDPIT_CADDY_L4
echo "$SANDPIT_CADDY_L4"

# Node packages first: the Go tests of the Caddy router run the E2B SDK.
for dir in test/e2b test/daytona test/ui test/mcp; do
	[[ -f "$dir/package.json" ]] || continue
	(
		cd "$dir"
		# A checkout has no node_modules (ignored by git): install then. An
		# existing one is used as is, so this works without a registry.
		if [[ ! -d node_modules ]]; then
			step "npm install in $dir"
			if [[ -f package-lock.json ]]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi
		fi
	)
done

# The suites (the Go tests, the fuzz targets, the Node suites, the
# TypeScript SDK) share no state: each starts daemons of its own on ports
# of its own and labels what it makes with its own run id. They run at once,
# the Node suites and the rest in the background while the Go tests run in
# the foreground, each background suite with its output in a log printed
# when it ends: the steps mostly wait on the engine, so running them side by
# side takes minutes off the run.
parallel_logs="$(mktemp -d)"
parallel_pids=()
parallel_names=()
in_background() {
	local name="$1"
	shift
	("$@") >"$parallel_logs/$name.log" 2>&1 &
	parallel_pids+=("$!")
	parallel_names+=("$name")
}

# Every Go native fuzz target runs for a short fixed time beyond its seed
# corpus (testdata/fuzz, which the plain test run above replays). A failure
# leaves the crashing input in testdata/fuzz/<target>/ to commit as a seed.
# The budget is a count of executions, not a duration: with a wall-clock
# -fuzztime, Go 1.26's fuzz coordinator can report "context deadline
# exceeded" at the deadline and fail a target that found nothing
# (go.dev/issue/75804, fixed in Go 1.27), which a loaded 2-core machine hits.
fuzz_all() {
	local fuzz_time="${FUZZ_TIME:-5000x}" pkg target
	while read -r pkg target; do
		step "fuzz $target ($pkg, $fuzz_time)"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzz_time" "$pkg"
	done < <(grep -rlE --include='*_test.go' '^func Fuzz' internal cmd test 2>/dev/null |
		while read -r f; do
			for t in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$f" | cut -d' ' -f2); do
				echo "./$(dirname "$f") $t"
			done
		done | sort)
}
in_background fuzz fuzz_all

# test/ui drives the dashboard in Debian's headless Chromium and keeps its
# screenshots under test/ui/artifacts (SANDPIT_ARTIFACTS overrides).
node_suite() {
	cd "$1"
	step "node tests in $1"
	# The package's own test script when it has one, else node's runner.
	if node -e 'process.exit(require("./package.json").scripts?.test ? 0 : 1)'; then
		npm test
	else
		node --test
	fi
}
for dir in test/e2b test/daytona test/ui test/mcp; do
	[[ -f "$dir/package.json" ]] || continue
	in_background "node-${dir#test/}" node_suite "$dir"
done

# The TypeScript SDK: a clean install from its lockfile, a check that the
# committed code generated from proto/ is current, the compile, then its
# tests against a real daemon. An existing node_modules is kept, so a local
# run works without a registry.
ts_sdk() {
	cd sdk/typescript
	step "TypeScript SDK (sdk/typescript)"
	[[ -d node_modules ]] || npm ci --no-audit --no-fund
	npm run --silent check-generated
	npm run --silent build
	npm test
}
[[ -f sdk/typescript/package.json ]] && in_background ts-sdk ts_sdk

# The Python SDK: installed offline (--no-index; it needs only the standard
# library and setuptools) from a copy of sdk/python into a virtualenv in a
# temporary directory, then its tests against real daemons run from the
# binary built above. Debian's interpreter, whose setuptools and wheel come
# from python3-setuptools and python3-wheel, when there is one.
py_sdk() {
	step "Python SDK (sdk/python)"
	local tmp py=python3
	[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
	tmp="$(mktemp -d)"
	# Expanded now: the trap runs after the function's locals are gone.
	trap "rm -rf '$tmp'" EXIT
	cp -r sdk/python "$tmp/src"
	rm -rf "$tmp/src/build" "$tmp/src"/src/*.egg-info
	"$py" -m venv --system-site-packages "$tmp/venv"
	"$tmp/venv/bin/pip" install --quiet --no-index --no-build-isolation "$tmp/src"
	SANDPIT_BIN="$PWD/bin/sandpit" "$tmp/venv/bin/python" -m unittest discover -s sdk/python/tests -v
}
[[ -f sdk/python/pyproject.toml ]] && in_background py-sdk py_sdk

# -parallel 4: the integration tests mostly wait on the engine (creates,
# starts, builds, restarts), so twice the two cores' worth of them at once
# keeps the engine busy rather than the run waiting; a run of ./test at 4
# beside four other developers' test runs had no failure.
go_status=passed
step "go test -race -count=1 -parallel ${GO_TEST_PARALLEL:-4} -timeout ${GO_TEST_TIMEOUT:-45m} ./..."
go test -race -count=1 -parallel "${GO_TEST_PARALLEL:-4}" -timeout "${GO_TEST_TIMEOUT:-45m}" ./... || go_status=FAILED

failed=()
[[ $go_status == passed ]] || failed+=("go test")
for i in "${!parallel_pids[@]}"; do
	name="${parallel_names[$i]}"
	if wait "${parallel_pids[$i]}"; then
		status=passed
	else
		status=FAILED
		failed+=("$name")
	fi
	step "$name: $status"
	cat "$parallel_logs/$name.log"
done
rm -rf "$parallel_logs"
wait "$desktop_build_pid" || true
if [[ "$(cat "$SANDPIT_DESKTOP_BUILD/status" 2>/dev/null)" == 0 ]]; then
	step "desktop image: built"
else
	step "desktop image: FAILED"
	cat "$SANDPIT_DESKTOP_BUILD/log"
	failed+=("desktop image")
fi
rm -rf "$SANDPIT_DESKTOP_BUILD"
if ((${#failed[@]})); then
	step "failed: ${failed[*]}"
	exit 1
fi

# Last and alone: the tests that restart the Docker engine, which stops
# every container on the machine (see test/engine_restart_test.go).
step "engine restart tests"
SANDPIT_ENGINE_RESTART_TEST=1 go test -count=1 -timeout 10m -run '^TestEngineRestart' ./test/

step "all tests passed"
