package sandpit_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/filesig"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// metricValue reads one unlabelled metric from the daemon's /metrics.
func metricValue(t *testing.T, ctx context.Context, d *harness.Daemon, name string) float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+d.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// TestTenantUnauthMadeUpPreviewHostWritesNothing: preview hosts naming no
// sandbox, in both host forms, cost the store no activity write; a real
// sandbox's preview host still records activity.
func TestTenantUnauthMadeUpPreviewHostWritesNothing(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	const writes = "sandpit_store_activity_writes_total"
	before := metricValue(t, ctx, d, writes)
	for i := range 40 {
		id := fmt.Sprintf("sbmadeup%04d", i)
		for _, host := range []string{id + "-8080.localhost", "8080-" + id + ".localhost"} {
			if _, _, err := proxyGet(ctx, d, "http://"+host+"/"); err != nil {
				t.Fatalf("GET %s: %v", host, err)
			}
		}
	}
	if after := metricValue(t, ctx, d, writes); after != before {
		t.Fatalf("80 made-up preview hosts made %v activity writes, want none", after-before)
	}

	sb, err := d.Client().Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := proxyGet(ctx, d, "http://"+sb.ID+"-8080.localhost/"); err != nil {
		t.Fatal(err)
	}
	if after := metricValue(t, ctx, d, writes); after != before+1 {
		t.Fatalf("a real sandbox's preview host: %v activity writes, want 1", after-before)
	}
}

// TestTenantUnauthRateLimits: a client sending made-up signed /files URLs
// gets 429 with Retry-After past its unauthenticated budget, while its
// authenticated calls still pass; a client whose credentials are refused
// too often gets 429 on every request until its budget refills. A real
// signed URL still finds its sandbox (from the daemon's memory, with no
// sandbox named in it).
func TestTenantUnauthRateLimits(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--unauth-rate-limit", "5", "--auth-failure-rate-limit", "2",
		// Each refusal is otherwise held about 100 ms, in which the budgets
		// refill by half a request (5/s) and a fifth (2/s): on a loaded
		// machine the bursts below would then never run dry. The hold has
		// tests of its own; this one is about the budgets.
		"--auth-failure-delay", "0"}})
	ctx := ctxFor(t, 2*time.Minute)
	c := d.Client(client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	// A secured E2B sandbox: its envdAccessToken is what the SDK signs
	// file URLs with.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/e2b/sandboxes", strings.NewReader(`{"templateID":"base","secure":true}`))
	req.Header.Set("X-API-KEY", d.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sb struct {
		ID          string `json:"sandboxID"`
		AccessToken string `json:"envdAccessToken"`
	}
	err = json.NewDecoder(resp.Body).Decode(&sb)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || sb.AccessToken == "" {
		t.Fatalf("e2b create: %d %+v %v", resp.StatusCode, sb, err)
	}
	if err := c.WriteFile(ctx, sb.ID, "/tmp/signed.txt", []byte("signed content")); err != nil {
		t.Fatal(err)
	}
	get := func(path, token string) (int, string, string) {
		t.Helper()
		status, h, body := bearerGet(t, ctx, d, path, token)
		return status, h.Get("Retry-After"), body
	}

	// A genuine signed download, made as the E2B SDK makes it.
	q := url.Values{"path": {"/tmp/signed.txt"}}
	q.Set(filesig.ParamSignature, filesig.Compute("/tmp/signed.txt", filesig.Read, "", sb.AccessToken, ""))
	if status, _, body := get("/files?"+q.Encode(), ""); status != http.StatusOK || body != "signed content" {
		t.Fatalf("signed download: %d %q", status, body)
	}

	// Made-up signatures: the burst (twice the rate, minus the genuine
	// one) is answered, then 429.
	forged := url.Values{"path": {"/etc/shadow"}, filesig.ParamSignature: {"v1_" + strings.Repeat("A", 43)}}
	limited := false
	for i := 0; i < 20 && !limited; i++ {
		status, retry, body := get("/files?"+forged.Encode(), "")
		switch status {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			if n, err := strconv.Atoi(retry); err != nil || n < 1 || !strings.Contains(body, "rate_limited") {
				t.Fatalf("429 with Retry-After %q, body %s", retry, body)
			}
			if i < 9 {
				t.Fatalf("limited after %d requests, the burst is 10", i)
			}
			limited = true
		default:
			t.Fatalf("forged signature %d: %d %s", i, status, body)
		}
	}
	if !limited {
		t.Fatal("20 forged signed URLs in a burst were never limited")
	}
	if status, _, body := get("/v1/sandboxes/"+sb.ID, d.Token); status != http.StatusOK {
		t.Fatalf("an authenticated call of the limited client: %d %s", status, body)
	}

	// Refused credentials: a burst of ten (five times the rate), then
	// every request from the client is refused, even a good one.
	refusedAt := -1
	for i := 0; i < 20 && refusedAt < 0; i++ {
		switch status, _, body := get("/v1/sandboxes", "spt_000000000000_guess"+strconv.Itoa(i)); status {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			refusedAt = i
		default:
			t.Fatalf("bad token %d: %d %s", i, status, body)
		}
	}
	if refusedAt < 9 {
		t.Fatalf("refused credentials limited after %d, want after the burst of 10", refusedAt)
	}
	// The budget refills at 2 a second, so a good call that reaches the
	// daemon half a second after the last refusal (a loaded machine can
	// take that long between two requests) finds one refilled token and is
	// served. The claim is that a client with no budget is refused whatever
	// it presents: spend the budget again, then call at once, a few times.
	var (
		status int
		retry  string
	)
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			if st, _, body := get("/v1/sandboxes", "spt_000000000000_again"+strconv.Itoa(attempt)); st != http.StatusTooManyRequests && st != http.StatusUnauthorized {
				t.Fatalf("bad token again: %d %s", st, body)
			}
		}
		if status, retry, _ = get("/v1/sandboxes/"+sb.ID, d.Token); status == http.StatusTooManyRequests {
			break
		}
	}
	if status != http.StatusTooManyRequests || retry == "" {
		t.Fatalf("a good token from a client past its failure budget: %d (Retry-After %q), want 429", status, retry)
	}
	n, _ := strconv.Atoi(retry)
	time.Sleep(time.Duration(n) * time.Second)
	if status, _, body := get("/v1/sandboxes/"+sb.ID, d.Token); status != http.StatusOK {
		t.Fatalf("after Retry-After: %d %s", status, body)
	}
}
