package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/api/route"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/gateway"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startNode(t *testing.T, name string, keys cluster.Keys, join []string) (*cluster.Cluster, string) {
	t.Helper()
	gossip := freeAddr(t)
	c, err := cluster.Start(context.Background(), cluster.Config{
		NodeName: name, DataDir: t.TempDir(),
		RaftListen: "127.0.0.1:0", GossipListen: gossip,
		Join: join, BootstrapExpect: 2, Keys: keys,
		Self:   cluster.Node{APIAddr: "127.0.0.1:1" + name[len(name)-1:]},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Fast: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, gossip
}

// A route a surface adds (here one no surface has) is forwarded to the
// sandbox's owner from its declaration alone: the gateway is not told
// about it.
func TestNewSandboxRouteIsForwardedToTheOwner(t *testing.T) {
	keys, err := cluster.DeriveKeys([]byte("a cluster key of enough bytes"))
	if err != nil {
		t.Fatal(err)
	}
	n1, g1 := startNode(t, "n1", keys, nil)
	n2, _ := startNode(t, "n2", keys, []string{g1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range []*cluster.Cluster{n1, n2} {
		if err := n.WaitLeader(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := n1.Replica().Reserve(ctx, cluster.Reservation{SandboxID: "theirs", Node: "n2"}); err != nil {
		t.Fatal(err)
	}
	if err := n1.Replica().Reserve(ctx, cluster.Reservation{SandboxID: "mine", Node: "n1"}); err != nil {
		t.Fatal(err)
	}

	// Both nodes serve the same surface, with a route added in this build
	// only; each answers with its own name.
	surface := func(node string) (http.Handler, []route.Route) {
		mux := http.NewServeMux()
		rs := api.NewRoutes(mux, func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusForbidden)
		}, nil)
		rs.Handle("GET /v1/sandboxes/{id}/brand-new", sandpit.ActionRead, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s served %s", node, r.PathValue("id"))
		})
		rs.Handle("GET /v1/brand-new-local", sandpit.ActionRead, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s served local", node)
		})
		return mux, rs.List()
	}
	h2, _ := surface("n2")
	sctx, stop := context.WithCancel(context.Background())
	defer stop()
	go n2.ServeForwarded(sctx, h2)

	h1, routes := surface("n1")
	table := gateway.NewTable(gateway.Surface{Routes: routes})
	front := httptest.NewServer(gateway.New(n1).API(h1, gateway.Config{
		Routes:     table,
		WriteError: api.WriteError,
		Authenticate: func(*http.Request) (sandpit.Principal, error) {
			return sandpit.Principal{Owner: "admin", Admin: true}, nil
		},
	}))
	defer front.Close()

	get := func(path string) (int, string) {
		res, err := http.Get(front.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	// n1 forwards once it knows n2's cluster port (503 until then).
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := get("/v1/sandboxes/theirs/brand-new")
		if code == http.StatusOK {
			if body != "n2 served theirs" {
				t.Fatalf("another node's sandbox: %q, want it served by its owner n2", body)
			}
			break
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("another node's sandbox: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for path, want := range map[string]string{
		"/v1/sandboxes/mine/brand-new": "n1 served mine",
		"/v1/brand-new-local":          "n1 served local",
	} {
		if code, body := get(path); code != http.StatusOK || body != want {
			t.Fatalf("%s: %d %q, want %q", path, code, body, want)
		}
	}
}
