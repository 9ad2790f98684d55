package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/filesig"
	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/volumes"
)

const testToken = "sp_test_token"

// fakeBackend stands in for the service: sandboxes are rows of a real store,
// with no container behind them, so the claim flow runs without Docker.
type fakeBackend struct {
	st      *store.Store
	creates atomic.Int64
	// delay makes each create take a while, so duplicates arrive in flight.
	delay time.Duration
	// failNext makes the next n creates fail as a runtime failure does.
	failNext atomic.Int64
}

func (f *fakeBackend) ResolveImage(image, template string) (string, error) {
	if template == "base" || template == "other" {
		return "img:" + template, nil
	}
	return "", fmt.Errorf("%w: %q", sandpit.ErrUnknownTemplate, template)
}

func (f *fakeBackend) CreateSandbox(ctx context.Context, req service.CreateRequest) (sandpit.Sandbox, error) {
	f.creates.Add(1)
	if req.ID == "" {
		req.ID = service.NewSandboxID()
	}
	time.Sleep(f.delay)
	if f.failNext.Add(-1) >= 0 {
		return sandpit.Sandbox{}, fmt.Errorf("%w: injected failure", service.ErrRuntime)
	}
	now := time.Now().UTC()
	sb := sandpit.Sandbox{ID: req.ID, Image: "img", Template: req.Template, State: sandpit.StateRunning,
		Labels: req.Labels, Env: req.Env, AccessToken: "tok-" + req.ID, CreatedAt: now, UpdatedAt: now}
	if req.Timeout > 0 {
		sb.EndAt = now.Add(req.Timeout)
	}
	if err := f.st.CreateSandbox(ctx, sb); err != nil {
		return sandpit.Sandbox{}, err
	}
	return sb, nil
}

func (f *fakeBackend) GetSandbox(ctx context.Context, id string) (sandpit.Sandbox, error) {
	return f.st.GetSandbox(ctx, id)
}

func (f *fakeBackend) ListSandboxes(ctx context.Context, o sandpit.ListOptions) ([]sandpit.Sandbox, string, error) {
	return f.st.ListSandboxes(ctx, o)
}

func (f *fakeBackend) SignedFilesSandbox(method string, q url.Values) string {
	return f.st.FindRunningByToken(filesig.Matcher(method, q))
}

func (f *fakeBackend) SandboxKnown(id string) bool { return f.st.SandboxKnown(id) }

func (f *fakeBackend) DeleteSandbox(ctx context.Context, id string) error {
	return f.st.DeleteSandbox(ctx, id)
}

func (f *fakeBackend) setState(ctx context.Context, id string, want, state sandpit.State) (sandpit.Sandbox, error) {
	sb, err := f.st.GetSandbox(ctx, id)
	if err != nil {
		return sb, err
	}
	if want != "" && sb.State != want {
		return sb, fmt.Errorf("%w: %s", service.ErrNotRunning, sb.State)
	}
	if err := f.st.UpdateSandboxState(ctx, id, state, time.Now()); err != nil {
		return sb, err
	}
	return f.st.GetSandbox(ctx, id)
}

func (f *fakeBackend) PauseSandbox(ctx context.Context, id string, _ sandpit.PauseMode) (sandpit.Sandbox, error) {
	return f.setState(ctx, id, sandpit.StateRunning, sandpit.StatePaused)
}

func (f *fakeBackend) StopSandbox(ctx context.Context, id string) (sandpit.Sandbox, error) {
	return f.setState(ctx, id, "", sandpit.StateStopped)
}

func (f *fakeBackend) WakeOnTraffic(context.Context, string) (service.WakeOutcome, error) {
	return service.WakeNotPaused, nil
}

func (f *fakeBackend) StartSandbox(ctx context.Context, id string) (sandpit.Sandbox, error) {
	return f.setState(ctx, id, "", sandpit.StateRunning)
}

func (f *fakeBackend) UpdateNetwork(context.Context, string, sandpit.NetworkPolicy) (sandpit.Sandbox, error) {
	return sandpit.Sandbox{}, errors.New("not in this test")
}

func (f *fakeBackend) SetTimeout(ctx context.Context, id string, d time.Duration) (sandpit.Sandbox, error) {
	now := time.Now()
	if err := f.st.SetSandboxEndAt(ctx, id, now.Add(d), now); err != nil {
		return sandpit.Sandbox{}, err
	}
	return f.st.GetSandbox(ctx, id)
}

func (f *fakeBackend) Stats(context.Context, string) (driver.Stats, error) {
	return driver.Stats{CPUCount: 1, MemTotal: 1 << 30}, nil
}

func (f *fakeBackend) AgentAddr(context.Context, string) (string, error) {
	return "", errors.New("no agents in unit tests")
}

func (f *fakeBackend) AgentHTTP() *agentapi.Link { return agentapi.NewLink() }

// CreateOrAdopt applies the service's one adopt policy to the fake's rows.
func (f *fakeBackend) CreateOrAdopt(ctx context.Context, req service.CreateRequest) (sandpit.Sandbox, bool, error) {
	sb, err := f.st.GetSandbox(ctx, req.ID)
	switch {
	case errors.Is(err, sandpit.ErrNotFound):
	case err != nil:
		return sb, false, err
	default:
		switch service.AdoptPolicy(sb.State) {
		case service.Adopt:
			return sb, true, nil
		case service.AwaitCreate:
			return sb, false, service.ErrCreateInProgress
		case service.Replace:
			if err := f.st.DeleteSandbox(ctx, req.ID); err != nil {
				return sb, false, err
			}
		}
	}
	sb, err = f.CreateSandbox(ctx, req)
	return sb, false, err
}

func (f *fakeBackend) CheckPortAccess(context.Context, sandpit.Sandbox, int, string) error {
	return nil
}

type fixture struct {
	t   *testing.T
	st  *store.Store
	be  *fakeBackend
	h   *Handler
	cfg Config
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cfg.Token = testToken
	if cfg.ReplayWindow == 0 {
		cfg.ReplayWindow = 10 * time.Second
	}
	if cfg.ReplayWindow < 0 {
		cfg.ReplayWindow = 0
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	f := &fixture{t: t, st: st, be: &fakeBackend{st: st}, cfg: cfg}
	f.h = New(f.be, idempotency.New(st, cfg.Now, cfg.Logger, nil), cfg)
	return f
}

// restart does what a restarted daemon does: it frees the dead process's
// pending claims and serves with a new handler over the same store.
func (f *fixture) restart() {
	f.t.Helper()
	if _, err := f.st.ExpirePendingClaims(context.Background(), time.Now(), 24*time.Hour); err != nil {
		f.t.Fatal(err)
	}
	f.h = New(f.be, idempotency.New(f.st, f.cfg.Now, f.cfg.Logger, nil), f.cfg)
}

type result struct {
	status int
	body   []byte
	header http.Header
}

func (f *fixture) do(method, path, body string, hdr ...string) result {
	f.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("X-API-KEY", testToken)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return result{rec.Code, rec.Body.Bytes(), rec.Header()}
}

func (f *fixture) create(body string, hdr ...string) (string, result) {
	f.t.Helper()
	res := f.do(http.MethodPost, "/e2b/v2/sandboxes", body, hdr...)
	var c CreatedSandbox
	if res.status == http.StatusCreated {
		if err := json.Unmarshal(res.body, &c); err != nil {
			f.t.Fatalf("create response %s: %v", res.body, err)
		}
	}
	return c.SandboxID, res
}

func (f *fixture) countSandboxes() int {
	f.t.Helper()
	all, _, err := f.st.ListSandboxes(context.Background(), sandpit.ListOptions{Limit: 1000})
	if err != nil {
		f.t.Fatal(err)
	}
	return len(all)
}

func (f *fixture) claimRow(fp string) (sandpit.Claim, error) {
	// Requests with the admin token claim in the admin owner's scope.
	ctx := sandpit.WithPrincipal(context.Background(), api.AdminPrincipal())
	return f.st.GetIdempotentRequest(ctx, identity.OwnerScope(ctx, Scope), fp)
}

const body1 = `{"templateID":"base","metadata":{"run":"1"},"timeout":60}`

func fp1(t *testing.T) string { return Fingerprint(KeyIdentity(testToken), mustBody(t, body1)) }

func TestCreateStormMakesOneSandbox(t *testing.T) {
	f := newFixture(t, Config{})
	f.be.delay = 150 * time.Millisecond
	const n = 10
	ids := make([]string, n)
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, res := f.create(body1)
			ids[i], statuses[i] = id, res.status
		}()
	}
	wg.Wait()
	for i := range n {
		if statuses[i] != http.StatusCreated || ids[i] != ids[0] {
			t.Fatalf("create %d: status %d id %q, want 201 and %q", i, statuses[i], ids[i], ids[0])
		}
	}
	if got := f.be.creates.Load(); got != 1 {
		t.Fatalf("backend creates = %d, want 1", got)
	}
	if want := SandboxIDFor(fp1(t), 1); ids[0] != want {
		t.Fatalf("id %s, want the derived %s", ids[0], want)
	}
}

func TestCreateDifferentBodiesDiffer(t *testing.T) {
	f := newFixture(t, Config{})
	a, _ := f.create(body1)
	b, _ := f.create(`{"templateID":"base","metadata":{"run":"2"},"timeout":60}`)
	if a == "" || b == "" || a == b {
		t.Fatalf("ids %q and %q: want two different sandboxes", a, b)
	}
}

func TestCreateReplayWindow(t *testing.T) {
	var offset atomic.Int64
	f := newFixture(t, Config{ReplayWindow: time.Second, Now: func() time.Time {
		return time.Now().Add(time.Duration(offset.Load()))
	}})
	a, _ := f.create(body1)
	again, res := f.create(body1)
	if again != a || res.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("within the window: id %q (replayed %q), want a replay of %q", again, res.header.Get("Idempotent-Replayed"), a)
	}
	offset.Store(int64(2 * time.Second))
	b, _ := f.create(body1)
	if b == "" || b == a {
		t.Fatalf("after the window: id %q, want a new sandbox (first was %q)", b, a)
	}
	if want := SandboxIDFor(fp1(t), 2); b != want {
		t.Fatalf("after the window: id %s, want generation 2's %s", b, want)
	}
	if f.be.creates.Load() != 2 {
		t.Fatalf("creates = %d, want 2", f.be.creates.Load())
	}
}

func TestReplayOfKilledSandboxReturnsStoredResponse(t *testing.T) {
	f := newFixture(t, Config{})
	a, first := f.create(body1)
	if res := f.do(http.MethodDelete, "/e2b/sandboxes/"+a, ""); res.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", res.status, res.body)
	}
	b, again := f.create(body1)
	if b != a || string(again.body) != string(first.body) {
		t.Fatalf("replay after kill: %q %s, want the stored response %s", b, again.body, first.body)
	}
	if f.be.creates.Load() != 1 {
		t.Fatalf("creates = %d, want 1", f.be.creates.Load())
	}
}

func TestCreateFailureDeletesClaim(t *testing.T) {
	f := newFixture(t, Config{})
	f.be.failNext.Store(1)
	if _, res := f.create(body1); res.status != http.StatusBadGateway {
		t.Fatalf("failing create: %d %s, want 502", res.status, res.body)
	}
	if _, err := f.claimRow(fp1(t)); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("claim after a failed create: %v, want it deleted", err)
	}
	if id, res := f.create(body1); res.status != http.StatusCreated || id == "" {
		t.Fatalf("retry after failure: %d %s", res.status, res.body)
	}
}

func TestWaiterClaimsAgainWhenFirstFails(t *testing.T) {
	f := newFixture(t, Config{})
	f.be.delay = 150 * time.Millisecond
	f.be.failNext.Store(1)
	var wg sync.WaitGroup
	results := make([]result, 2)
	ids := make([]string, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 1 {
				time.Sleep(30 * time.Millisecond)
			}
			ids[i], results[i] = f.create(body1)
		}()
	}
	wg.Wait()
	if results[0].status != http.StatusBadGateway || results[1].status != http.StatusCreated {
		t.Fatalf("statuses %d, %d: want the first to fail and the waiter to create", results[0].status, results[1].status)
	}
	if f.countSandboxes() != 1 {
		t.Fatalf("sandboxes = %d, want 1", f.countSandboxes())
	}
}

func TestWaitBudgetAnswers429(t *testing.T) {
	f := newFixture(t, Config{WaitBudget: 100 * time.Millisecond})
	f.be.delay = 500 * time.Millisecond
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); f.create(body1) }()
	time.Sleep(50 * time.Millisecond)
	_, res := f.create(body1)
	wg.Wait()
	if res.status != http.StatusTooManyRequests || res.header.Get("Retry-After") != "1" {
		t.Fatalf("impatient duplicate: %d Retry-After %q, want 429 and 1", res.status, res.header.Get("Retry-After"))
	}
	if f.be.creates.Load() != 1 {
		t.Fatalf("creates = %d, want 1", f.be.creates.Load())
	}
}

// deadDaemonClaim leaves the claim a daemon killed mid-create leaves: pending,
// lock live, target recorded.
func deadDaemonClaim(t *testing.T, f *fixture, fp string) string {
	t.Helper()
	ctx := sandpit.WithPrincipal(context.Background(), api.AdminPrincipal())
	scope := identity.OwnerScope(ctx, Scope)
	c, err := f.st.ClaimIdempotentRequest(ctx, sandpit.ClaimRequest{Scope: scope, Fingerprint: fp, PendingTTL: 2 * time.Minute}, time.Now())
	if err != nil || c.Outcome != sandpit.Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	id := SandboxIDFor(fp, c.Generation)
	if err := f.st.SetIdempotentTarget(ctx, scope, fp, c.Generation, id, time.Now()); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestRetryAfterCrashBeforeContainerReusesID(t *testing.T) {
	f := newFixture(t, Config{})
	id := deadDaemonClaim(t, f, fp1(t))
	f.restart()
	start := time.Now()
	got, res := f.create(body1)
	if res.status != http.StatusCreated || got != id {
		t.Fatalf("retry: %d %s, want 201 with the crashed attempt's id %s", res.status, res.body, id)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("retry waited %s for a dead daemon's lock", time.Since(start))
	}
	if f.be.creates.Load() != 1 || f.countSandboxes() != 1 {
		t.Fatalf("creates %d, sandboxes %d: want 1 and 1", f.be.creates.Load(), f.countSandboxes())
	}
	c, err := f.claimRow(fp1(t))
	if err != nil || c.State != "ready" || c.TargetID != id || c.Generation != 1 {
		t.Fatalf("claim after retry: %+v %v", c, err)
	}
}

func TestRetryAfterCrashAdoptsFinishedSandbox(t *testing.T) {
	f := newFixture(t, Config{})
	id := deadDaemonClaim(t, f, fp1(t))
	// The dead daemon finished the sandbox but died before completing.
	if _, err := f.be.CreateSandbox(context.Background(), mustBody(t, body1).request(id)); err != nil {
		t.Fatal(err)
	}
	f.restart()
	got, res := f.create(body1)
	if res.status != http.StatusCreated || got != id {
		t.Fatalf("retry: %d %s, want the adopted %s", res.status, res.body, id)
	}
	if f.be.creates.Load() != 1 || f.countSandboxes() != 1 {
		t.Fatalf("creates %d, sandboxes %d: want the sandbox adopted, not made again", f.be.creates.Load(), f.countSandboxes())
	}
}

func TestRetryAfterCrashReplacesBrokenLeftover(t *testing.T) {
	f := newFixture(t, Config{})
	id := deadDaemonClaim(t, f, fp1(t))
	if _, err := f.be.CreateSandbox(context.Background(), mustBody(t, body1).request(id)); err != nil {
		t.Fatal(err)
	}
	if err := f.st.UpdateSandboxState(context.Background(), id, sandpit.StateError, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.restart()
	got, res := f.create(body1)
	if res.status != http.StatusCreated || got != id {
		t.Fatalf("retry: %d %s", res.status, res.body)
	}
	sb, err := f.st.GetSandbox(context.Background(), id)
	if err != nil || sb.State != sandpit.StateRunning || f.countSandboxes() != 1 {
		t.Fatalf("after retry: %+v %v, %d sandboxes", sb, err, f.countSandboxes())
	}
}

func TestIdempotencyKey(t *testing.T) {
	f := newFixture(t, Config{})
	a, _ := f.create(body1, "Idempotency-Key", "k-1")
	b, _ := f.create(body1, "Idempotency-Key", "k-2")
	if a == "" || b == "" || a == b {
		t.Fatalf("two keys with one body: %q %q, want two sandboxes (the key replaces the body fingerprint)", a, b)
	}
	if again, _ := f.create(body1, "Idempotency-Key", "k-1"); again != a {
		t.Fatalf("same key, same body: %q, want replay of %q", again, a)
	}
	if _, res := f.create(`{"templateID":"base","metadata":{"run":"other"}}`, "Idempotency-Key", "k-1"); res.status != http.StatusUnprocessableEntity {
		t.Fatalf("same key, other body: %d %s, want 422", res.status, res.body)
	}
	if _, res := f.create(body1, "Idempotency-Key", ""); res.status != http.StatusBadRequest {
		t.Fatalf("empty key: %d, want 400", res.status)
	}
}

func TestDedupeOff(t *testing.T) {
	f := newFixture(t, Config{ReplayWindow: -1})
	a, _ := f.create(body1)
	b, _ := f.create(body1)
	if a == "" || b == "" || a == b {
		t.Fatalf("dedupe off: %q %q, want two sandboxes", a, b)
	}
	if _, err := f.claimRow(fp1(t)); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("dedupe off left a claim row: %v", err)
	}
}

func TestCreateRefusals(t *testing.T) {
	f := newFixture(t, Config{})
	for name, tc := range map[string]struct {
		body   string
		hdr    []string
		status int
	}{
		"unknown template":  {`{"templateID":"nope"}`, nil, 400},
		"zero timeout":      {`{"templateID":"base","timeout":0}`, nil, 400},
		"bad name allowOut": {`{"templateID":"base","network":{"allowOut":["not a name!"],"denyOut":["0.0.0.0/0"]}}`, nil, 400},
		"wildcard TLD":      {`{"templateID":"base","network":{"allowOut":["*.com"]}}`, nil, 400},
		"ipv6 denyOut":      {`{"templateID":"base","network":{"denyOut":["::/0"]}}`, nil, 400},
		"bad cidr":          {`{"templateID":"base","network":{"denyOut":["10.0.0.0/33"]}}`, nil, 400},
		"resume, no pause":  {`{"templateID":"base","autoResume":{"enabled":true}}`, nil, 400},
		"bad json":          {`{"templateID":`, nil, 400},
		"wrong key":         {body1, []string{"X-API-KEY", "wrong"}, 401},
	} {
		_, res := f.create(tc.body, tc.hdr...)
		var e ErrorBody
		if res.status != tc.status || json.Unmarshal(res.body, &e) != nil || e.Code != tc.status || e.Message == "" {
			t.Errorf("%s: %d %s, want %d in E2B's error shape", name, res.status, res.body, tc.status)
		}
	}
	if f.be.creates.Load() != 0 || f.countSandboxes() != 0 {
		t.Fatalf("refused creates made %d sandboxes", f.countSandboxes())
	}
}

func TestControlPlane(t *testing.T) {
	f := newFixture(t, Config{})
	if res := f.do(http.MethodGet, "/e2b/sandboxes/nope", ""); res.status != 404 || !strings.Contains(string(res.body), `"code":404`) {
		t.Fatalf("get unknown: %d %s", res.status, res.body)
	}
	if res := f.do(http.MethodDelete, "/e2b/sandboxes/nope", ""); res.status != 404 || !strings.Contains(string(res.body), `"code":404`) {
		t.Fatalf("kill unknown: %d %s", res.status, res.body)
	}
	ids := map[string]bool{}
	for i := range 5 {
		id, _ := f.create(fmt.Sprintf(`{"templateID":"base","metadata":{"group":"g 1&x=y","i":"%d"}}`, i))
		ids[id] = true
	}
	f.create(`{"templateID":"base","metadata":{"group":"other"}}`)

	// Page through the group with the SDK's triple-encoded filter.
	filter := "metadata=group%3Dg%2525201%252526x%25253Dy"
	seen := map[string]bool{}
	token := ""
	for pages := 0; ; pages++ {
		q := "/e2b/v2/sandboxes?" + filter + "&limit=2"
		if token != "" {
			q += "&nextToken=" + token
		}
		res := f.do(http.MethodGet, q, "")
		var page []ListedSandbox
		if res.status != 200 || json.Unmarshal(res.body, &page) != nil {
			t.Fatalf("list: %d %s", res.status, res.body)
		}
		for _, sb := range page {
			if !ids[sb.SandboxID] || seen[sb.SandboxID] {
				t.Fatalf("list returned %s unexpectedly", sb.SandboxID)
			}
			seen[sb.SandboxID] = true
		}
		if token = res.header.Get("X-Next-Token"); token == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if len(seen) != len(ids) {
		t.Fatalf("paged %d of %d sandboxes", len(seen), len(ids))
	}

	var id string
	for k := range ids {
		id = k
		break
	}
	if res := f.do(http.MethodPost, "/e2b/sandboxes/"+id+"/pause", ""); res.status != 204 {
		t.Fatalf("pause: %d %s", res.status, res.body)
	}
	if res := f.do(http.MethodPost, "/e2b/sandboxes/"+id+"/pause", ""); res.status != 409 {
		t.Fatalf("pause again: %d %s, want 409", res.status, res.body)
	}
	res := f.do(http.MethodGet, "/e2b/v2/sandboxes?state=paused", "")
	var paused []ListedSandbox
	if json.Unmarshal(res.body, &paused) != nil || len(paused) != 1 || paused[0].SandboxID != id || paused[0].State != "paused" {
		t.Fatalf("list paused: %s", res.body)
	}
	if res := f.do(http.MethodPost, "/e2b/v2/sandboxes/"+id+"/connect", `{"timeout":30}`); res.status != 201 {
		t.Fatalf("connect paused: %d %s, want 201", res.status, res.body)
	}
	if res := f.do(http.MethodPost, "/e2b/v2/sandboxes/"+id+"/connect", `{"timeout":30}`); res.status != 200 {
		t.Fatalf("connect running: %d %s, want 200", res.status, res.body)
	}
	if res := f.do(http.MethodPost, "/e2b/sandboxes/"+id+"/timeout", `{"timeout":5}`); res.status != 204 {
		t.Fatalf("set timeout: %d %s", res.status, res.body)
	}
	res = f.do(http.MethodGet, "/e2b/sandboxes/"+id, "")
	var d SandboxDetail
	if json.Unmarshal(res.body, &d) != nil || d.State != "running" || time.Until(d.EndAt) > 6*time.Second || d.EnvdAccessToken == "" {
		t.Fatalf("get: %s", res.body)
	}
	if res := f.do(http.MethodGet, "/e2b/sandboxes/"+id+"/metrics", ""); res.status != 200 || !strings.HasPrefix(string(res.body), "[") {
		t.Fatalf("metrics: %d %s", res.status, res.body)
	}
	if res := f.do(http.MethodGet, "/e2b/v2/sandboxes?state=stopped", ""); res.status != 400 {
		t.Fatalf("bad state filter: %d", res.status)
	}
}

func TestGatewayUnknownSandboxIs502(t *testing.T) {
	f := newFixture(t, Config{})
	req := httptest.NewRequest(http.MethodGet, "/e2b/envd/health", nil)
	req.Header.Set("E2b-Sandbox-Id", "nope")
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadGateway {
		t.Fatalf("gateway to unknown sandbox: %d, want 502 (the SDK's 'not running')", rec.Code)
	}
}

func TestIdenticalCreateAfterClaimReapedIsNew(t *testing.T) {
	// Once the reaper deletes a completed claim row, the next identical
	// create starts again at generation 1; it must still get a new sandbox,
	// not adopt the live one the first row made.
	var offset atomic.Int64
	f := newFixture(t, Config{ReplayWindow: time.Second, Now: func() time.Time {
		return time.Now().Add(time.Duration(offset.Load()))
	}})
	a, _ := f.create(body1)
	offset.Store(int64(time.Hour))
	if n, err := f.st.ReapIdempotentRequests(context.Background(), f.h.now()); err != nil || n != 1 {
		t.Fatalf("reap: %d %v", n, err)
	}
	b, res := f.create(body1)
	if res.status != http.StatusCreated || b == a {
		t.Fatalf("create after the row was reaped: %d id %q, want a new sandbox (first %q)", res.status, b, a)
	}
	c, err := f.claimRow(fp1(t))
	if err != nil || c.Generation != 1 || c.TargetID != b {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if f.be.creates.Load() != 2 || f.countSandboxes() != 2 {
		t.Fatalf("creates %d, sandboxes %d: want 2 and 2", f.be.creates.Load(), f.countSandboxes())
	}
}

func TestUnimplementedEndpointIsNotANotFound(t *testing.T) {
	f := newFixture(t, Config{})
	res := f.do(http.MethodGet, "/e2b/sandboxes/abc/logs", ``)
	var e ErrorBody
	if res.status != http.StatusNotImplemented || json.Unmarshal(res.body, &e) != nil || e.Code != 501 {
		t.Fatalf("unimplemented endpoint: %d %s, want 501 (a 404 reads as 'sandbox not found' in the SDK)", res.status, res.body)
	}
	if res := f.do(http.MethodGet, "/e2b/sandboxes/abc/logs", ``, "X-API-KEY", "nope"); res.status != http.StatusUnauthorized {
		t.Fatalf("unauthenticated: %d, want 401 before anything else", res.status)
	}
}

// The fake's volumes are the real aggregate over its store, with no engine:
// a volume create is refused as on a daemon without volumes.
func (f *fakeBackend) Volumes() *volumes.Service { return volumes.New(volumes.Config{Store: f.st}) }
