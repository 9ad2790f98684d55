package sandpit_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestOpenAPIServed: /v1/openapi.json serves the contract without a token,
// as an OpenAPI 3.1 document that loads and validates.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, time.Minute)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/v1/openapi.json", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" || doc.Paths.Find("/v1/sandboxes/{id}") == nil || doc.Paths.Find("/v1/status") == nil {
		t.Fatalf("served document: openapi %q, paths %d", doc.OpenAPI, doc.Paths.Len())
	}
}
