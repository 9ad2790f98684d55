package v1

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/templates"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// v1Routes are the request shapes the fuzzer picks from by index.
var v1Routes = []struct{ method, path string }{
	{http.MethodPost, "/v1/sandboxes"},
	{http.MethodGet, "/v1/sandboxes"},
	{http.MethodPost, "/v1/sandboxes/sbfuzz/ports"},
	{http.MethodPost, "/v1/sandboxes/sbfuzz/custom-domains"},
	{http.MethodPost, "/v1/sandboxes/sbfuzz/exec"},
	{http.MethodPost, "/v1/sandboxes/sbfuzz/stop"},
	{http.MethodDelete, "/v1/sandboxes/sbfuzz/ports/"},
}

// FuzzV1Requests sends arbitrary bodies, queries and path tails through the
// real /v1 handler (with the Idempotency-Key layer) over a real store: no
// input may earn a 500 or a panic.
func FuzzV1Requests(f *testing.F) {
	f.Add(uint8(0), "", []byte(`{"name":"a","env":{"A":"1"},"labels":{"k":"v"},"timeout_s":5}`), "")
	f.Add(uint8(1), "label=a%3Db&state=running&limit=5&page_token=x", []byte(nil), "")
	f.Add(uint8(2), "", []byte(`{"port":3000,"protocol":"tcp"}`), "k1")
	f.Add(uint8(3), "", []byte(`{"hostname":"a.example.com","port":80}`), "")
	f.Add(uint8(4), "", []byte(`{"cmd":"true","timeout_s":-1}`), "")
	f.Add(uint8(6), "", []byte(nil), "")
	svc, st := testenv.FuzzService(f)
	tpl := templates.New(templates.Config{}, st, svc.Idempotency(), svc.Events(), svc)
	h := New(svc, tpl, api.NewAuth(svc.Identity(), "tok"), nil, api.NewIdempotency(svc.Idempotency(), api.IdempotencyConfig{}))
	f.Fuzz(func(t *testing.T, route uint8, query string, body []byte, key string) {
		rt := v1Routes[int(route)%len(v1Routes)]
		u := &url.URL{Path: rt.path, RawQuery: query}
		if rt.method == http.MethodDelete {
			u.Path += url.PathEscape(query)
			u.RawQuery = ""
		}
		req := httptest.NewRequest(rt.method, "/", bytes.NewReader(body))
		req.URL = u
		req.RequestURI = u.RequestURI()
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		testenv.ServeNo500(t, h, req)
	})
}
