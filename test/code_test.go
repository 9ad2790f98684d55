package sandpit_test

import (
	"context"
	"errors"
	"strings"
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
