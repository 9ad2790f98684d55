package daytona

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// FuzzSocketPacket feeds arbitrary Socket.IO packets (the payload of an
// Engine.IO message frame) to the parser: it must not panic, must answer
// only with Socket.IO frames, and must admit a client to the broadcast hub
// only on a connect to the main namespace carrying the right token.
func FuzzSocketPacket(f *testing.F) {
	for _, s := range []string{"", "0", `0{"token":"tok"}`, `0{"token":"bad"}`, `0/admin,{"token":"tok"}`, "1", `2["evt",1]`, "0/", "0/,", "3/x,5[]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pkt string) {
		// A nil service opens sessions without limits.
		h := &eventAPI{core: &core{ctx: context.Background()}, svc: (*service.Service)(nil), hub: newHub(), auth: api.NewAuth(nil, "tok")}
		c := &sioConn{out: make(chan string, 16), done: make(chan struct{})}
		h.socketMessage(c, "sid", pkt)
		close(c.out)
		for frame := range c.out {
			if !strings.HasPrefix(frame, "4") {
				t.Fatalf("packet %q: answered with a non-message frame %q", pkt, frame)
			}
		}
		if h.hub.size() == 1 && (!strings.HasPrefix(pkt, "0") || !strings.Contains(pkt, `"tok"`)) {
			t.Fatalf("packet %q joined the hub", pkt)
		}
	})
}

var daytonaRoutes = []struct{ method, path string }{
	{http.MethodPost, "/daytona/sandbox"},
	{http.MethodGet, "/daytona/sandbox"},
	{http.MethodPut, "/daytona/sandbox/sbfuzz/labels"},
	{http.MethodPost, "/daytona/toolbox/sbfuzz/process/execute"},
	{http.MethodGet, "/daytona/sandbox/sbfuzz/ports/"},
}

// FuzzDaytonaRequests sends arbitrary bodies and queries through the real
// Daytona facade over the real service and store: no input may earn a 500
// or a panic.
func FuzzDaytonaRequests(f *testing.F) {
	f.Add(uint8(0), "", []byte(`{"name":"a","labels":{"k":"v"},"env":{"A":"1"},"autoStopInterval":5}`))
	f.Add(uint8(1), `labels=%7B%22k%22%3A%22v%22%7D&states=started,stopped&limit=2`, []byte(nil))
	f.Add(uint8(2), "", []byte(`{"labels":{"a":"b"}}`))
	f.Add(uint8(3), "", []byte(`{"command":"echo hi","timeout":3}`))
	f.Add(uint8(4), "3000", []byte(nil))
	svc, _ := testenv.FuzzService(f)
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	h := New(ctx, svc, api.NewAuth(svc.Identity(), "tok"), Options{})
	f.Fuzz(func(t *testing.T, route uint8, query string, body []byte) {
		rt := daytonaRoutes[int(route)%len(daytonaRoutes)]
		u := &url.URL{Path: rt.path, RawQuery: query}
		if strings.HasSuffix(rt.path, "/ports/") {
			u.Path += url.PathEscape(query) + "/preview-url"
			u.RawQuery = ""
		}
		req := httptest.NewRequest(rt.method, "/", bytes.NewReader(body))
		req.URL = u
		req.RequestURI = u.RequestURI()
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("Content-Type", "application/json")
		testenv.ServeNo500(t, h, req)
	})
}
