package api_test

import (
	"net/http"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// TestWebSocketBearer: the token comes from the bearer.<token> subprotocol
// of a WebSocket upgrade only, whatever the header's spacing or splitting.
func TestWebSocketBearer(t *testing.T) {
	upgrade := func(protocols ...string) http.Header {
		h := http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"WebSocket"}}
		for _, p := range protocols {
			h.Add("Sec-WebSocket-Protocol", p)
		}
		return h
	}
	for _, c := range []struct {
		what   string
		header http.Header
		want   string
	}{
		{"one header", upgrade("sandpit.pty, bearer.sp_abc"), "sp_abc"},
		{"two headers", upgrade("sandpit.pty", "bearer.tok-1"), "tok-1"},
		{"no bearer", upgrade("sandpit.pty"), ""},
		{"empty bearer", upgrade("sandpit.pty, bearer."), ""},
		{"not an upgrade", http.Header{"Sec-WebSocket-Protocol": {"bearer.sp_abc"}}, ""},
		{"upgrade to something else", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"h2c"}, "Sec-WebSocket-Protocol": {"bearer.sp_abc"}}, ""},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/v1/sandboxes/x/pty", nil)
		r.Header = c.header
		if got := api.WebSocketBearer(r); got != c.want {
			t.Errorf("%s: %q, want %q", c.what, got, c.want)
		}
	}
}
