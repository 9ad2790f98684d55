package sandpit_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// sseEvents reads a Server-Sent Events stream into a channel of events,
// checking that each event's name matches its type.
func sseEvents(t *testing.T, resp *http.Response) <-chan apitypes.Event {
	out := make(chan apitypes.Event, 64)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		name := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				var e apitypes.Event
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e); err != nil || e.Type != name {
					t.Errorf("event %q: data %s (%v)", name, line, err)
				}
				out <- e
			}
		}
	}()
	return out
}

// TestEventStream subscribes to GET /v1/events, as `curl -N` would, and
// sees the changes made through /v1, through the E2B API and by the expiry
// sweeper.
func TestEventStream(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/v1/events", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("events without a token: %v %v, want 401", resp, err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := sseEvents(t, resp)

	c := d.Client()
	a, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stop(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	b, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/e2b/sandboxes/"+b.ID+"/timeout", strings.NewReader(`{"timeout":1}`))
	tr.Header.Set("X-API-KEY", d.Token)
	tr.Header.Set("Content-Type", "application/json")
	if r, err := http.DefaultClient.Do(tr); err != nil || r.StatusCode/100 != 2 {
		t.Fatalf("e2b set timeout: %v %v", r, err)
	}

	want := []apitypes.Event{
		{Type: "created", SandboxID: a.ID, State: "running", OldState: "creating"},
		{Type: "stopped", SandboxID: a.ID, State: "stopped", OldState: "running"},
		{Type: "created", SandboxID: b.ID, State: "running", OldState: "creating"},
		{Type: "expired", SandboxID: b.ID, State: "", OldState: "running"},
	}
	for i, w := range want {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("stream ended before event %d", i)
			}
			if e.Type != w.Type || e.SandboxID != w.SandboxID || e.State != w.State || e.OldState != w.OldState || e.Time.IsZero() {
				t.Fatalf("event %d: %+v, want %+v", i, e, w)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no event %d (%+v) within 30 s", i, w)
		}
	}
}

// TestEventStreamEndsOnShutdown: an open stream does not hold up a graceful
// shutdown.
func TestEventStreamEndsOnShutdown(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, d.URL()+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+d.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	d.Stop()
	if !d.Wait(10 * time.Second) {
		t.Fatal("the daemon did not stop within 10 s with an event stream open")
	}
}

// TestContainerDeathIsAnnounced kills a sandbox's container behind the
// daemon's back: the stream (followed with the Go client) announces it as
// died, and the sandbox is stopped.
func TestContainerDeathIsAnnounced(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	c := d.Client()
	events := make(chan client.Event, 64)
	streamCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		defer close(events)
		// A first change (the create below) proves the subscription is live
		// before the container is killed.
		_ = c.Events(streamCtx, func(e client.Event) error {
			events <- e
			return nil
		})
	}()
	var sb client.Sandbox
	for sb.ID == "" {
		// Creates until one is seen on the stream: the stream may not be
		// subscribed yet when the first is made.
		made, err := c.Create(ctx, client.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-events:
			if e.Type == "created" {
				sb = client.Sandbox{ID: e.SandboxID}
			}
		case <-time.After(5 * time.Second):
			t.Logf("create of %s not seen yet; creating another", made.ID)
		}
	}
	if out, err := run(ctx, t, "docker", "kill", "sandpit-"+sb.ID); err != nil {
		t.Fatalf("docker kill: %v %s", err, out)
	}
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("stream ended")
			}
			if e.Type != "died" {
				continue
			}
			if e.SandboxID != sb.ID || e.State != "stopped" || e.OldState != "running" {
				t.Fatalf("died event %+v", e)
			}
			got, err := c.Get(ctx, sb.ID)
			if err != nil || got.State != "stopped" {
				t.Fatalf("after the death: %+v %v, want stopped", got, err)
			}
			if _, err := c.Start(ctx, sb.ID); err != nil {
				t.Fatalf("start after the death: %v", err)
			}
			return
		case <-time.After(30 * time.Second):
			t.Fatal("no died event within 30 s")
		}
	}
}
