package openapi_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sandpit-dev/sandpit/api/openapi"
)

func load(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openapi.YAML())
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestJSONIsTheDocument: the served JSON is the YAML document, converted.
func TestJSONIsTheDocument(t *testing.T) {
	b, err := openapi.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if v["openapi"] != "3.1.0" {
		t.Fatalf("openapi = %v", v["openapi"])
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := doc.Paths.Len(), load(t).Paths.Len(); got != want {
		t.Fatalf("JSON has %d paths, YAML %d", got, want)
	}
}

// routePattern finds the route registrations of the /v1 handler and the
// daemon: route("GET /v1/..."), keyed("POST /v1/..."), HandleFunc("POST
// /v1/...") and so on; the first group says whether the route is keyed.
var routePattern = regexp.MustCompile(`(route|keyed|HandleFunc|Handle)\("((?:GET|POST|PUT|DELETE|PATCH) /v1/[^"]*)"`)

// TestEveryRouteDocumented: each /v1 route the daemon registers is an
// operation of the document, so a new endpoint cannot ship undocumented; and
// an operation takes the IdempotencyKey parameter exactly when its route is
// registered as keyed. The agent passthrough forwards another protocol and
// is left out.
func TestEveryRouteDocumented(t *testing.T) {
	doc := load(t)
	var files []string
	for _, glob := range []string{"../../internal/api/v1/*.go", "../../internal/daemon/*.go"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	found, keyed := 0, map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range routePattern.FindAllStringSubmatch(string(src), -1) {
			method, path, _ := strings.Cut(m[2], " ")
			found++
			item := doc.Paths.Find(path)
			if item == nil || item.GetOperation(method) == nil {
				t.Errorf("%s registers %s %s, which the OpenAPI document does not describe", filepath.Base(f), method, path)
				continue
			}
			keyed[m[2]] = m[1] == "keyed"
		}
	}
	if found < 20 {
		t.Fatalf("found only %d routes: has the registration style changed?", found)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			takesKey := false
			for _, p := range op.Parameters {
				if p.Ref == "#/components/parameters/IdempotencyKey" {
					takesKey = true
				}
			}
			route := method + " " + path
			isKeyed, registered := keyed[route]
			switch {
			case registered && takesKey != isKeyed:
				t.Errorf("%s: the document says Idempotency-Key %v, the route is registered keyed=%v", route, takesKey, isKeyed)
			case !registered && takesKey:
				t.Errorf("%s takes Idempotency-Key in the document, but no keyed route is registered for it", route)
			}
		}
	}
}
