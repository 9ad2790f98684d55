package e2b

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/filesig"
)

func TestListOrder(t *testing.T) {
	f := newFixture(t, Config{})
	var ids []string
	for _, b := range []string{`{"metadata":{"n":"0"}}`, `{"metadata":{"n":"1"}}`, `{"metadata":{"n":"2"}}`} {
		id, res := f.create(b)
		if res.status != http.StatusCreated {
			t.Fatalf("create: %d %s", res.status, res.body)
		}
		ids = append(ids, id)
	}
	listed := func(query string) []string {
		t.Helper()
		res := f.do(http.MethodGet, "/e2b/v2/sandboxes"+query, "")
		var out []ListedSandbox
		if res.status != http.StatusOK || json.Unmarshal(res.body, &out) != nil {
			t.Fatalf("list%s: %d %s", query, res.status, res.body)
		}
		var got []string
		for _, sb := range out {
			got = append(got, sb.SandboxID)
		}
		return got
	}
	asc := ids
	desc := []string{ids[2], ids[1], ids[0]}
	tests := []struct {
		query string
		want  []string
	}{
		{"", desc},
		{"?order=desc", desc},
		{"?order=asc", asc},
	}
	for _, tt := range tests {
		if got := listed(tt.query); len(got) != 3 || got[0] != tt.want[0] || got[1] != tt.want[1] || got[2] != tt.want[2] {
			t.Errorf("list%s = %v, want %v", tt.query, got, tt.want)
		}
	}
	if res := f.do(http.MethodGet, "/e2b/v2/sandboxes?order=sideways", ""); res.status != http.StatusBadRequest {
		t.Fatalf("bad order: %d %s", res.status, res.body)
	}
}

func TestMetricsWindowValidation(t *testing.T) {
	f := newFixture(t, Config{})
	id, _ := f.create(body1)
	for _, q := range []string{"?start=yesterday", "?end=-5", "?start=200&end=100"} {
		if res := f.do(http.MethodGet, "/e2b/sandboxes/"+id+"/metrics"+q, ""); res.status != http.StatusBadRequest {
			t.Errorf("metrics%s: %d %s, want 400", q, res.status, res.body)
		}
	}
}

func TestSignedFilesAtTheRoot(t *testing.T) {
	f := newFixture(t, Config{})
	id, _ := f.create(body1)
	sb, err := f.be.GetSandbox(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(q url.Values) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/files?"+q.Encode(), nil)
		rec := httptest.NewRecorder()
		f.h.SignedFiles(rec, req)
		return rec
	}
	// Unsigned: nothing says which sandbox it is for.
	if rec := serve(url.Values{"path": {"/tmp/x"}}); rec.Code != http.StatusBadRequest {
		t.Fatalf("unsigned: %d %s", rec.Code, rec.Body)
	}
	// Signed with no running sandbox's token.
	q := url.Values{"path": {"/tmp/x"}, filesig.ParamSignature: {filesig.Compute("/tmp/x", filesig.Read, "", "not-a-token", "")}}
	if rec := serve(q); rec.Code != http.StatusUnauthorized {
		t.Fatalf("foreign signature: %d %s", rec.Code, rec.Body)
	}
	// Signed with the sandbox's token: routed to it (whose agent the unit
	// fixture cannot reach, hence an E2B-shaped 502 naming no other cause).
	q.Set(filesig.ParamSignature, filesig.Compute("/tmp/x", filesig.Read, "", sb.AccessToken, ""))
	rec := serve(q)
	var body ErrorBody
	if rec.Code != http.StatusBadGateway || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Code != http.StatusBadGateway {
		t.Fatalf("signed: %d %s", rec.Code, rec.Body)
	}
}
