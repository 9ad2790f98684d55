package sandpit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestTemplateBuildEvents: GET /v1/events announces a template build's start
// and its end (template.building, then template.ready or template.error with
// the engine's reason) to the template's owner, and to no other owner.
func TestTemplateBuildEvents(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	admin := client.New(d.Addr, d.Token)
	tok := func(owner string) *client.Client {
		tk, err := admin.CreateToken(ctx, client.TokenRequest{Name: owner + "-events", Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		return client.New(d.Addr, tk.Secret)
	}
	alice, bob := tok("alice"), tok("bob")

	follow := func(c *client.Client) (<-chan client.Event, context.CancelFunc) {
		ch := make(chan client.Event, 64)
		subscribed := make(chan struct{})
		sctx, cancel := context.WithCancel(ctx)
		go func() {
			defer close(ch)
			// A sandbox create announces itself: the stream is live once
			// the marker comes through.
			_ = c.Events(sctx, func(e client.Event) error {
				if e.Type == "created" {
					select {
					case <-subscribed:
					default:
						close(subscribed)
					}
					return nil
				}
				ch <- e
				return nil
			})
		}()
		go func() {
			for {
				sb, err := c.Create(sctx, client.CreateRequest{})
				if err == nil {
					_ = c.Delete(context.WithoutCancel(sctx), sb.ID)
				}
				select {
				case <-subscribed:
					return
				case <-sctx.Done():
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
		select {
		case <-subscribed:
		case <-ctx.Done():
			t.Fatal("event stream never came up")
		}
		return ch, cancel
	}
	aliceEvents, stopA := follow(alice)
	defer stopA()
	bobEvents, stopB := follow(bob)
	defer stopB()

	build := func(name, dockerfile string) client.BuildTemplateResponse {
		res, err := alice.BuildTemplate(ctx, client.BuildTemplateRequest{Name: name, Dockerfile: dockerfile})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := alice.WaitBuild(ctx, res.Template.ID, res.Build.ID, nil); err != nil {
			t.Fatal(err)
		}
		return res
	}
	good := build("evt-good", "FROM sandpit/base:test\nRUN echo ok > /ok\n")
	bad := build("evt-bad", "FROM sandpit/base:test\nRUN exit 3\n")

	next := func() client.Event {
		t.Helper()
		for {
			select {
			case e, ok := <-aliceEvents:
				if !ok {
					t.Fatal("alice's stream ended")
				}
				if e.Type == "deleted" || e.Type == "stopped" {
					continue // the marker sandbox going away
				}
				return e
			case <-ctx.Done():
				t.Fatal(errors.New("timed out waiting for a build event"))
			}
		}
	}
	for _, want := range []struct {
		typ, state string
		res        client.BuildTemplateResponse
	}{
		{"template.building", "building", good}, {"template.ready", "ready", good},
		{"template.building", "building", bad}, {"template.error", "error", bad},
	} {
		e := next()
		if e.Type != want.typ || e.State != want.state || e.BuildID != want.res.Build.ID || e.TemplateID != want.res.Template.ID ||
			e.Template != want.res.Template.Name || e.SandboxID != "" {
			t.Fatalf("event %+v, want %s (%s) of build %s of %s", e, want.typ, want.state, want.res.Build.ID, want.res.Template.Name)
		}
		if want.typ == "template.error" && e.Error == "" {
			t.Fatalf("error event without the build's reason: %+v", e)
		}
	}

	// Bob heard nothing of Alice's builds (his own marker sandbox's events
	// aside).
	deadline := time.After(500 * time.Millisecond)
	for {
		select {
		case e := <-bobEvents:
			if e.BuildID != "" || e.TemplateID != "" {
				t.Fatalf("bob saw alice's build event %+v", e)
			}
			continue
		case <-deadline:
		}
		break
	}
}
