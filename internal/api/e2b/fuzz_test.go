package e2b

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// FuzzFingerprint checks the create fingerprint's canonicalisation on
// arbitrary bodies: it is deterministic, survives a JSON round trip, ignores
// the order and repetition of network lists, hashes an absent timeout like
// the explicit default, and keeps two callers apart.
func FuzzFingerprint(f *testing.F) {
	f.Add([]byte(baseBody))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"templateID":"base","timeout":300,"autoPause":true,"secure":false,"allow_internet_access":false}`))
	f.Add([]byte(`{"network":{"allowOut":["b","a","a"],"denyOut":[]},"autoResume":{"enabled":true}}`))
	key := KeyIdentity("k")
	f.Fuzz(func(t *testing.T, js []byte) {
		var b CreateBody
		if json.Unmarshal(js, &b) != nil {
			return
		}
		fp := Fingerprint(key, b)
		if again := Fingerprint(key, b); again != fp {
			t.Fatalf("not deterministic: %s != %s", fp, again)
		}
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		var b2 CreateBody
		if err := json.Unmarshal(enc, &b2); err != nil {
			t.Fatal(err)
		}
		if got := Fingerprint(key, b2); got != fp {
			t.Fatalf("a JSON round trip changed the fingerprint of %s", js)
		}
		if b.Network != nil {
			shuffled := *b.Network
			shuffled.AllowOut = append(slices.Clone(shuffled.AllowOut), shuffled.AllowOut...)
			slices.Reverse(shuffled.AllowOut)
			shuffled.DenyOut = slices.Clone(shuffled.DenyOut)
			slices.Reverse(shuffled.DenyOut)
			b3 := b
			b3.Network = &shuffled
			if got := Fingerprint(key, b3); got != fp {
				t.Fatalf("reordering network lists changed the fingerprint of %s", js)
			}
		}
		if b.Timeout == nil {
			explicit := b
			secs := b.timeoutSeconds()
			explicit.Timeout = &secs
			if got := Fingerprint(key, explicit); got != fp {
				t.Fatalf("the explicit default timeout changed the fingerprint of %s", js)
			}
		}
		if Fingerprint(KeyIdentity("other"), b) == fp {
			t.Fatalf("two callers share a fingerprint for %s", js)
		}
	})
}

var e2bRoutes = []struct{ method, path string }{
	{http.MethodPost, "/e2b/sandboxes"},
	{http.MethodPost, "/e2b/v2/sandboxes"},
	{http.MethodGet, "/e2b/v2/sandboxes"},
	{http.MethodGet, "/e2b/sandboxes"},
	{http.MethodPost, "/e2b/sandboxes/sbfuzz/timeout"},
	{http.MethodPost, "/e2b/sandboxes/sbfuzz/connect"},
	{http.MethodPost, "/e2b/sandboxes/sbfuzz/resume"},
}

// FuzzE2BRequests sends arbitrary bodies and queries through the real E2B
// facade over the real service and store: no input may earn a 500 or a
// panic.
func FuzzE2BRequests(f *testing.F) {
	f.Add(uint8(0), "", []byte(baseBody))
	f.Add(uint8(2), "metadata=a%3D1%26b%3D2&state=running,paused&limit=3", []byte(nil))
	f.Add(uint8(3), "query=%7B%22a%22%3A%221%22%7D", []byte(nil))
	f.Add(uint8(4), "", []byte(`{"timeout":10}`))
	svc, st := testenv.FuzzService(f)
	h := New(svc, svc.Idempotency(), Config{Auth: api.NewAuth(svc.Identity(), "tok")})
	_ = st
	f.Fuzz(func(t *testing.T, route uint8, query string, body []byte) {
		rt := e2bRoutes[int(route)%len(e2bRoutes)]
		req := httptest.NewRequest(rt.method, "/", bytes.NewReader(body))
		req.URL = &url.URL{Path: rt.path, RawQuery: query}
		req.RequestURI = req.URL.RequestURI()
		req.Header.Set("X-API-KEY", "tok")
		req.Header.Set("Content-Type", "application/json")
		testenv.ServeNo500(t, h, req)
	})
}
