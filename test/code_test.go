package sandpit_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestRunCodeRefusals: POST /v1/sandboxes/{id}/code on a sandbox with no
// code interpreter (the test image runs nothing on port 49999) fails at
// once with 409 no_interpreter naming the template to use, instead of
// waiting on a port nobody serves; bad input is 400, an unknown sandbox
// 404, and a read-only token may not run code. Listing the contexts of such
// a sandbox is the same 409, and deleting a context that was never made
// succeeds (a retried delete answers as the first).
func TestRunCodeRefusals(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	admin := d.Client()
	_, ro := ownerTokens(t, ctx, admin, "coder")
	sb, err := admin.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    *client.Client
		id   string
		req  client.CodeRequest
		code string
	}{
		{"no interpreter", admin, sb.ID, client.CodeRequest{Code: "1+1"}, apitypes.CodeNoInterpreter},
		{"named context, no interpreter", admin, sb.ID, client.CodeRequest{Code: "1+1", Context: "a"}, apitypes.CodeNoInterpreter},
		{"empty code", admin, sb.ID, client.CodeRequest{}, apitypes.CodeBadRequest},
		{"bad context name", admin, sb.ID, client.CodeRequest{Code: "1", Context: "../x"}, apitypes.CodeBadRequest},
		{"negative timeout", admin, sb.ID, client.CodeRequest{Code: "1", TimeoutS: -1}, apitypes.CodeBadRequest},
		{"bad env name", admin, sb.ID, client.CodeRequest{Code: "1", Env: map[string]string{"A=B": "1"}}, apitypes.CodeBadRequest},
		{"unknown sandbox", admin, "nosuchsandbox", client.CodeRequest{Code: "1"}, apitypes.CodeNotFound},
		{"read-only token", client.New(d.URL(), ro.Secret), sb.ID, client.CodeRequest{Code: "1"}, apitypes.CodeForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A refused port is answered at once; one that swallowed the
			// request would run into this deadline and fail the code check.
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err := tc.c.RunCode(cctx, tc.id, tc.req, nil)
			if !client.IsCode(err, tc.code) {
				t.Fatalf("RunCode: %v, want code %s", err, tc.code)
			}
			if tc.code == apitypes.CodeNoInterpreter {
				var e *client.Error
				if !errors.As(err, &e) || e.Status != 409 || !strings.Contains(e.Message, "code-interpreter-v1") {
					t.Fatalf("no interpreter: %v, want 409 naming the code-interpreter-v1 template", err)
				}
			}
		})
	}
	if _, err := admin.CodeContexts(ctx, sb.ID); !client.IsCode(err, apitypes.CodeNoInterpreter) {
		t.Fatalf("contexts of a sandbox without interpreter: %v", err)
	}
	if err := admin.DeleteCodeContext(ctx, sb.ID, "never-made"); !client.IsCode(err, apitypes.CodeNoInterpreter) && err != nil {
		t.Fatalf("delete of a context never made: %v", err)
	}
	// Nothing was made by any refusal: the one sandbox still runs alone.
	if list, _, err := admin.List(ctx, client.ListOptions{}); err != nil || len(list) != 1 {
		t.Fatalf("sandboxes after the refusals: %d %v", len(list), err)
	}
}

// TestRunCodeContexts: on the code-interpreter-v1 template, a named
// context keeps its variables apart from the default one; twenty first uses
// of one new name racing make one context between them (each sees the
// others' increments, and the list holds the name once); a read-only token
// may list contexts but not run code or delete one; a delete, and its
// retry, leave the name free, and the next use starts a fresh context. CI
// builds the image and fails without it (scripts/test.sh).
func TestRunCodeContexts(t *testing.T) {
	t.Parallel()
	if err := exec.Command("docker", "image", "inspect", "sandpit/code-interpreter:latest").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("sandpit/code-interpreter:latest is missing: scripts/build-code-interpreter-image.sh builds it")
		}
		t.Skip("sandpit/code-interpreter:latest is not built (scripts/build-code-interpreter-image.sh)")
	}
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 4*time.Minute)
	admin := d.Client()
	tokens, roTok := ownerTokens(t, ctx, admin, "kernels")
	c := client.New(d.URL(), tokens["kernels"])
	ro := client.New(d.URL(), roTok.Secret)
	sb, err := c.Create(ctx, client.CreateRequest{Template: "code-interpreter-v1"})
	if err != nil {
		t.Fatal(err)
	}
	run := func(c *client.Client, context, code string) (client.Execution, error) {
		return c.RunCode(ctx, sb.ID, client.CodeRequest{Code: code, Context: context}, nil)
	}
	if ex, err := run(c, "", "x = 'default'\nx"); err != nil || ex.Text() != "'default'" {
		t.Fatalf("default context: %+v %v", ex, err)
	}

	const racers = 20
	var wg sync.WaitGroup
	errs := make(chan error, racers)
	for range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// In one kernel the increments add up; in twenty they would
			// each see 1.
			_, err := run(c, "ctx-a", "n = globals().get('n', 0) + 1")
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if ex, err := run(c, "ctx-a", "n"); err != nil || ex.Text() != strconv.Itoa(racers) {
		t.Fatalf("n in ctx-a after %d racing first uses: %+v %v", racers, ex, err)
	}
	if ex, err := run(c, "ctx-a", "globals().get('x', 'unset')"); err != nil || ex.Text() != "'unset'" {
		t.Fatalf("ctx-a sees the default context's x: %+v %v", ex, err)
	}
	names := func(c *client.Client) []string {
		t.Helper()
		cs, err := c.CodeContexts(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, cc := range cs {
			out = append(out, cc.Name)
		}
		return out
	}
	if got := names(ro); !slices.Equal(got, []string{"ctx-a"}) {
		t.Fatalf("contexts: %q, want [ctx-a] once", got)
	}
	if _, err := run(ro, "ctx-a", "n = 0"); !client.IsCode(err, apitypes.CodeForbidden) {
		t.Fatalf("read-only run: %v", err)
	}
	if err := ro.DeleteCodeContext(ctx, sb.ID, "ctx-a"); !client.IsCode(err, apitypes.CodeForbidden) {
		t.Fatalf("read-only delete: %v", err)
	}
	for i := range 2 {
		if err := c.DeleteCodeContext(ctx, sb.ID, "ctx-a"); err != nil {
			t.Fatalf("delete %d: %v", i+1, err)
		}
	}
	if got := names(c); len(got) != 0 {
		t.Fatalf("contexts after the delete: %q", got)
	}
	if ex, err := run(c, "ctx-a", "globals().get('n', 0)"); err != nil || ex.Text() != "0" {
		t.Fatalf("ctx-a after its delete: %+v %v", ex, err)
	}
	if ex, err := run(c, "", "x"); err != nil || ex.Text() != "'default'" {
		t.Fatalf("default context after ctx-a's delete: %+v %v", ex, err)
	}
}
