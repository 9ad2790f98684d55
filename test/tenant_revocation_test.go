package sandpit_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// openEvents opens GET /v1/events with token; the status is returned, and
// on 200 the stream's events (the channel closes when the stream ends).
func openEvents(t *testing.T, ctx context.Context, d *harness.Daemon, token string) (int, <-chan apitypes.Event) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("open event stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp.StatusCode, sseEvents(t, resp)
}

// openEventSocket opens Daytona's socket.io event socket and authenticates
// with token as the SDK does (Engine.IO v4 over WebSocket, the token in the
// connect packet). It returns the answer to the connect packet and the
// frames that follow; the channel closes when the socket does.
func openEventSocket(t *testing.T, ctx context.Context, d *harness.Daemon, token string) (string, <-chan string) {
	t.Helper()
	ws, _, err := websocket.Dial(ctx, "ws://"+d.Addr+"/daytona/socket.io/?EIO=4&transport=websocket", nil)
	if err != nil {
		t.Fatalf("dial the event socket: %v", err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	if _, open, err := ws.Read(ctx); err != nil || !strings.HasPrefix(string(open), "0{") {
		t.Fatalf("engine.io open: %q %v", open, err)
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte(`40{"token":"`+token+`"}`)); err != nil {
		t.Fatal(err)
	}
	_, ack, err := ws.Read(ctx)
	if err != nil {
		t.Fatalf("socket.io connect: %v", err)
	}
	frames := make(chan string, 64)
	go func() {
		defer close(frames)
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				return
			}
			if s := string(b); s != "2" { // pings say nothing
				frames <- s
			}
		}
	}()
	return string(ack), frames
}

// TestTenantRevocationEndsStreams: a personal token's /v1/events stream and
// Daytona event socket end within a second of the token's revocation, and
// nothing reaches them afterwards, not even a new sandbox of the token's
// owner (whose env is a secret); a token that expires loses its streams as
// it expires.
func TestTenantRevocationEndsStreams(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	admin := d.Client(client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	watch, err := admin.CreateToken(ctx, client.TokenRequest{Name: "rev-watch", Owner: "rev", Scopes: []string{"sandboxes:read"}})
	if err != nil {
		t.Fatal(err)
	}
	maker, err := admin.CreateToken(ctx, client.TokenRequest{Name: "rev-maker", Owner: "rev"})
	if err != nil {
		t.Fatal(err)
	}
	mk := client.New(d.Addr, maker.Secret, client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))

	status, events := openEvents(t, ctx, d, watch.Secret)
	if status != http.StatusOK {
		t.Fatalf("event stream: %d", status)
	}
	ack, frames := openEventSocket(t, ctx, d, watch.Secret)
	if !strings.HasPrefix(ack, "40{") {
		t.Fatalf("socket connect answered %q", ack)
	}

	// Both deliver the owner's events while the token is live.
	first, err := mk.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		if e.SandboxID != first.ID {
			t.Fatalf("first event %+v, want %s", e, first.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event on the stream before revocation")
	}
	select {
	case f := <-frames:
		if !strings.Contains(f, first.ID) {
			t.Fatalf("first socket frame %q, want %s", f, first.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event on the socket before revocation")
	}
	// Let the rest of the first sandbox's events pass.
	time.Sleep(500 * time.Millisecond)
	drain(events)
	drainFrames(frames)

	start := time.Now()
	if _, err := admin.RevokeToken(ctx, "rev-watch"); err != nil {
		t.Fatal(err)
	}
	deadline := start.Add(time.Second)
	var afterRevoke []string
	for streamOpen, socketOpen := true, true; streamOpen || socketOpen; {
		select {
		case e, ok := <-events:
			if !ok {
				streamOpen, events = false, nil
				continue
			}
			afterRevoke = append(afterRevoke, "stream: "+e.Type+" "+e.SandboxID)
		case f, ok := <-frames:
			if !ok {
				socketOpen, frames = false, nil
				continue
			}
			afterRevoke = append(afterRevoke, "socket: "+f)
		case <-time.After(time.Until(deadline)):
			t.Fatalf("1 s after the revocation: event stream open %v, event socket open %v", streamOpen, socketOpen)
		}
	}
	t.Logf("both streams ended %v after the revocation started", time.Since(start))

	// A sandbox of the owner made after the revocation, with a secret in
	// its env: nothing of it arrived (the streams are gone), and the token
	// cannot open a new stream.
	second, err := mk.Create(ctx, client.CreateRequest{Env: map[string]string{"SECRET": "after-revoke"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(afterRevoke) > 0 {
		t.Fatalf("frames after the revocation: %v", afterRevoke)
	}
	if status, _ := openEvents(t, ctx, d, watch.Secret); status != http.StatusUnauthorized {
		t.Fatalf("a new stream with the revoked token: %d, want 401", status)
	}
	if ack, _ := openEventSocket(t, ctx, d, watch.Secret); !strings.Contains(ack, "Unauthorized") {
		t.Fatalf("a new socket with the revoked token: %q", ack)
	}
	_ = second

	// Expiry: a token that expires in two seconds loses its streams then.
	short, err := admin.CreateToken(ctx, client.TokenRequest{Name: "rev-short", Owner: "rev", Scopes: []string{"sandboxes:read"}, ExpiresInS: 2})
	if err != nil {
		t.Fatal(err)
	}
	status, events = openEvents(t, ctx, d, short.Secret)
	if status != http.StatusOK {
		t.Fatalf("event stream of the short token: %d", status)
	}
	_, frames = openEventSocket(t, ctx, d, short.Secret)
	if short.ExpiresAt == nil {
		t.Fatal("the short token has no expiry")
	}
	expires := short.ExpiresAt.Add(time.Second)
	for events != nil || frames != nil {
		select {
		case _, ok := <-events:
			if !ok {
				events = nil
			}
		case _, ok := <-frames:
			if !ok {
				frames = nil
			}
		case <-time.After(time.Until(expires)):
			t.Fatalf("1 s after the token's expiry (%v): stream open %v, socket open %v", short.ExpiresAt, events != nil, frames != nil)
		}
	}
}

// TestTenantStreamsPerTokenCapped: one token holds at most
// --max-streams-per-token streams (event streams and sockets together); the
// next is refused with 429, another token is not affected, and a closed
// stream frees its place.
func TestTenantStreamsPerTokenCapped(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--max-streams-per-token", "3"}})
	ctx := ctxFor(t, 2*time.Minute)
	admin := d.Client(client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	one, err := admin.CreateToken(ctx, client.TokenRequest{Name: "cap-one", Owner: "cap", Scopes: []string{"sandboxes:read"}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := admin.CreateToken(ctx, client.TokenRequest{Name: "cap-other", Owner: "cap", Scopes: []string{"sandboxes:read"}})
	if err != nil {
		t.Fatal(err)
	}

	streamCtx, closeFirst := context.WithCancel(ctx)
	if status, _ := openEvents(t, streamCtx, d, one.Secret); status != http.StatusOK {
		t.Fatalf("stream 1: %d", status)
	}
	if status, _ := openEvents(t, ctx, d, one.Secret); status != http.StatusOK {
		t.Fatalf("stream 2: %d", status)
	}
	if ack, _ := openEventSocket(t, ctx, d, one.Secret); !strings.HasPrefix(ack, "40{") {
		t.Fatalf("socket 3: %q", ack)
	}
	if status, _ := openEvents(t, ctx, d, one.Secret); status != http.StatusTooManyRequests {
		t.Fatalf("stream 4: %d, want 429", status)
	}
	if ack, _ := openEventSocket(t, ctx, d, one.Secret); !strings.Contains(ack, "Too many") {
		t.Fatalf("socket 4: %q, want a refusal", ack)
	}
	if status, _ := openEvents(t, ctx, d, other.Secret); status != http.StatusOK {
		t.Fatalf("another token's stream: %d", status)
	}
	closeFirst()
	testkit.Eventually(t, 10*time.Second, "a closed stream frees its place", func() error {
		if status, _ := openEvents(t, ctx, d, one.Secret); status != http.StatusOK {
			return errStatus(status)
		}
		return nil
	})
}

type errStatus int

func (e errStatus) Error() string { return http.StatusText(int(e)) }

func drain(c <-chan apitypes.Event) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

func drainFrames(c <-chan string) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}
