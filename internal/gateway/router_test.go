package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/cluster"
)

func TestRouterServesLocallyAndRefusesASecondHop(t *testing.T) {
	keys := testKeys(t, "a cluster key of enough bytes")
	n1, _ := startNode(t, "n1", keys, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n1.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n1.Replica().Reserve(ctx, cluster.Reservation{SandboxID: "mine", Name: "m", Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	if err := n1.Replica().Reserve(ctx, cluster.Reservation{SandboxID: "theirs", Name: "t", Node: "n2"}); err != nil {
		t.Fatal(err)
	}
	local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := New(n1).API(local, Config{Routes: surfacesTable(), WriteError: api.WriteError, Authenticate: func(*http.Request) (sandpit.Principal, error) {
		return sandpit.Principal{Owner: "admin", Admin: true}, nil
	}})
	forwarded := cluster.WithForwarded(context.Background(), sandpit.Principal{Owner: "admin"})
	tests := []struct {
		name      string
		path      string
		forwarded bool
		want      int
	}{
		{"own sandbox", "/v1/sandboxes/mine", false, http.StatusTeapot},
		{"own sandbox by name", "/v1/sandboxes/m/exec", false, http.StatusTeapot},
		{"unknown sandbox is answered here", "/v1/sandboxes/nope", false, http.StatusTeapot},
		{"not a sandbox path", "/v1/tokens", false, http.StatusTeapot},
		{"forwarded for own sandbox", "/v1/sandboxes/mine", true, http.StatusTeapot},
		{"forwarded for another node's sandbox", "/v1/sandboxes/theirs", true, http.StatusMisdirectedRequest},
		{"e2b, forwarded for another node's sandbox", "/e2b/sandboxes/theirs", true, http.StatusMisdirectedRequest},
		{"daytona by name, forwarded", "/daytona/sandbox/t", true, http.StatusMisdirectedRequest},
		{"daytona toolbox, forwarded", "/daytona/toolbox/theirs/files", true, http.StatusMisdirectedRequest},
		{"daytona own by name", "/daytona/sandbox/m", false, http.StatusTeapot},
		// n2 has no address: the forward fails and says so.
		{"another node's sandbox, owner unknown", "/v1/sandboxes/theirs", false, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tt.path, nil)
			if tt.forwarded {
				r = r.WithContext(forwarded)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Fatalf("%s: %d %s, want %d", tt.path, w.Code, w.Body, tt.want)
			}
		})
	}
}
