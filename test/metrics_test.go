package sandpit_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// scrape fetches /metrics with the given token and parses it.
func scrape(t *testing.T, ctx context.Context, d *harness.Daemon, token string) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	status, _, body := bearerGet(t, ctx, d, "/metrics", token)
	if status != http.StatusOK {
		return status, nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return status, fams
}

// value is the value of the series of family name whose labels include all
// of want (counter, gauge, or a histogram's sample count); 0 when absent.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f, ok := fams[name]
	if !ok {
		return 0
	}
	var sum float64
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// keyedCreate sends one POST /v1/sandboxes with an Idempotency-Key and
// returns the status and the Idempotent-Replayed header.
func keyedCreate(t *testing.T, ctx context.Context, d *harness.Daemon, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/v1/sandboxes", strings.NewReader(`{"labels":{"test":"metrics"}}`))
	req.Header.Set("Authorization", "Bearer "+d.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed")
}

// TestMetrics scrapes /metrics around the operations that should move each
// figure: a create, a replayed keyed create, an expose and a proxied request,
// and checks the endpoint refuses a scrape without the admin token.
func TestMetrics(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)

	if status, _ := scrape(t, ctx, d, ""); status != http.StatusUnauthorized {
		t.Fatalf("scrape without a token: %d, want 401", status)
	}
	if status, _ := scrape(t, ctx, d, "not-the-token"); status != http.StatusUnauthorized {
		t.Fatalf("scrape with a wrong token: %d, want 401", status)
	}
	_, before := scrape(t, ctx, d, d.Token)
	for _, name := range []string{"sandpit_creates_total", "sandpit_create_duration_seconds", "sandpit_sandboxes",
		"sandpit_store_wait_total", "sandpit_store_wait_seconds_total", "sandpit_routes", "sandpit_tcp_listeners"} {
		if _, ok := before[name]; !ok {
			t.Errorf("family %s missing before any operation", name)
		}
	}
	if v := value(before, "sandpit_creates_total", map[string]string{"path": "warm"}); v != 0 {
		t.Errorf("warm creates = %v before any create, want an exposed 0", v)
	}

	// A keyed create, then its replay.
	if status, replayed := keyedCreate(t, ctx, d, "metrics-key-1"); status != http.StatusCreated || replayed != "" {
		t.Fatalf("first keyed create: %d replayed=%q", status, replayed)
	}
	if status, replayed := keyedCreate(t, ctx, d, "metrics-key-1"); status != http.StatusCreated || replayed != "true" {
		t.Fatalf("replayed keyed create: %d replayed=%q", status, replayed)
	}
	// An unkeyed create (the client's own key makes it keyed too).
	id := newSandbox(t, ctx, c)
	startHTTPD(t, ctx, c, id, 8080, "metrics page")
	p := mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
	testkit.Eventually(t, 10*time.Second, "preview URL", func() error { return servesPage(ctx, d, p.PublicURL, "metrics page") })
	mustExpose(t, ctx, d, id, 8081, "tcp", http.StatusCreated)

	_, after := scrape(t, ctx, d, d.Token)
	scope := "v1:POST /v1/sandboxes"
	for _, tc := range []struct {
		name    string
		family  string
		labels  map[string]string
		atLeast float64
	}{
		{"cold creates", "sandpit_creates_total", map[string]string{"path": "cold"}, 2},
		{"replayed creates", "sandpit_creates_total", map[string]string{"path": "replayed"}, 1},
		{"create latency samples", "sandpit_create_duration_seconds", map[string]string{"path": "cold"}, 2},
		{"idempotency acquired", "sandpit_idempotency_outcomes_total", map[string]string{"scope": scope, "outcome": "acquired"}, 2},
		{"idempotency replay", "sandpit_idempotency_outcomes_total", map[string]string{"scope": scope, "outcome": "replay"}, 1},
		{"running sandboxes", "sandpit_sandboxes", map[string]string{"state": "running"}, 2},
		{"http routes", "sandpit_routes", map[string]string{"kind": "http"}, 1},
		{"tcp listeners", "sandpit_tcp_listeners", nil, 1},
		{"proxied 200s", "sandpit_proxy_requests_total", map[string]string{"code": "200"}, 1},
		{"engine creates", "sandpit_engine_call_duration_seconds", map[string]string{"op": "create"}, 2},
		{"engine starts", "sandpit_engine_call_duration_seconds", map[string]string{"op": "start"}, 2},
	} {
		b, a := value(before, tc.family, tc.labels), value(after, tc.family, tc.labels)
		if a-b < tc.atLeast {
			t.Errorf("%s: %s%v moved %v -> %v, want +%v at least", tc.name, tc.family, tc.labels, b, a, tc.atLeast)
		}
	}
	// No series carries an owner: scopes are the base scope only.
	for _, m := range after["sandpit_idempotency_outcomes_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if strings.Contains(l.GetValue(), "@owner") {
				t.Errorf("idempotency series names an owner: %v", m.GetLabel())
			}
		}
	}
	// The single writer has served every write; its wait counter exists and
	// never runs backwards.
	if value(after, "sandpit_store_wait_total", nil) < value(before, "sandpit_store_wait_total", nil) {
		t.Error("store wait count went backwards")
	}
}

// TestMetricsPublic: with --metrics-public a scraper needs no token.
func TestMetricsPublic(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--metrics-public"}})
	ctx := ctxFor(t, time.Minute)
	if status, fams := scrape(t, ctx, d, ""); status != http.StatusOK || fams["sandpit_creates_total"] == nil {
		t.Fatalf("public scrape: %d, families %d", status, len(fams))
	}
}

// TestPprof: --pprof serves Go's profiles to the admin token only; without
// the flag there is nothing at /debug/pprof/.
func TestPprof(t *testing.T) {
	t.Parallel()
	// Each subtest makes its context once it runs: a parallel subtest may
	// wait its turn for minutes behind the package's other tests.
	t.Run("on", func(t *testing.T) {
		t.Parallel()
		ctx := ctxFor(t, 2*time.Minute)
		d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--pprof"}})
		_, tok := tenant(t, ctx, d, "carol", nil)
		tests := []struct {
			name, path, token string
			want              int
		}{
			{"admin index", "/debug/pprof/", d.Token, http.StatusOK},
			{"admin heap", "/debug/pprof/heap?debug=1", d.Token, http.StatusOK},
			{"admin cpu", "/debug/pprof/profile?seconds=1", d.Token, http.StatusOK},
			{"tenant", "/debug/pprof/heap?debug=1", tok, http.StatusForbidden},
			{"no token", "/debug/pprof/", "", http.StatusUnauthorized},
			{"bad token", "/debug/pprof/", "nope", http.StatusUnauthorized},
		}
		for _, tt := range tests {
			status, _, body := bearerGet(t, ctx, d, tt.path, tt.token)
			if status != tt.want {
				t.Errorf("%s: GET %s: %d, want %d (%.200s)", tt.name, tt.path, status, tt.want, body)
			}
			if tt.name == "admin heap" && !strings.Contains(body, "heap profile") {
				t.Errorf("heap profile: %.200s", body)
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		ctx := ctxFor(t, time.Minute)
		d := harness.Start(t, sandpitBin, harness.Options{})
		if status, _, _ := bearerGet(t, ctx, d, "/debug/pprof/", d.Token); status != http.StatusNotFound {
			t.Fatalf("without --pprof: %d, want 404", status)
		}
	})
}

// bearerGet GETs path on the daemon's API with token (none when empty) and
// returns the status, the header and the body.
func bearerGet(t *testing.T, ctx context.Context, d *harness.Daemon, path, token string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}
