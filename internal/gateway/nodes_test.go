package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/api/route"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
)

// startNode starts a real cluster node on loopback that expects expect
// voters.
func startNode(t *testing.T, name string, keys cluster.Keys, expect int, join []string) (*cluster.Cluster, string) {
	t.Helper()
	// Gossip binds TCP and UDP on one port, so it cannot be told to take
	// port 0 here.
	gossip := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	c, err := cluster.Start(context.Background(), cluster.Config{
		NodeName: name, DataDir: t.TempDir(),
		RaftListen: "127.0.0.1:0", GossipListen: gossip,
		Join: join, BootstrapExpect: expect, Keys: keys,
		Self:   cluster.Node{APIAddr: "127.0.0.1:1" + name[len(name)-1:]},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Fast: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, gossip
}

func testKeys(t *testing.T, secret string) cluster.Keys {
	t.Helper()
	k, err := cluster.DeriveKeys([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	testkit.Eventually(t, d, what, func() error {
		if !ok() {
			return fmt.Errorf("not yet")
		}
		return nil
	})
}

// knowsClusterPort reports whether c has the cluster port of node, which it
// needs to forward anything there.
func knowsClusterPort(c *cluster.Cluster, node string) bool {
	for _, m := range c.Peers() {
		if m.Name == node && m.Meta.Raft != "" {
			return true
		}
	}
	return false
}

// surfacesTable is a route table in the shapes of the surfaces' own
// declarations (see each surface's forwarding), for tests that need no
// surface behind it.
func surfacesTable() *Table {
	native := api.NewRoutes(http.NewServeMux(), nil, nil).NamesToo()
	native.Declare("POST /v1/sandboxes", route.Forwarding{Locate: route.LocateCreate})
	native.Declare("GET /v1/sandboxes", route.Forwarding{Locate: route.LocateList})
	native.Declare("/v1/sandboxes/{id}", route.Forwarding{Locate: route.LocateSandbox})
	native.Declare("/v1/sandboxes/{id}/", route.Forwarding{Locate: route.LocateSandbox})
	e2b := api.NewRoutes(http.NewServeMux(), nil, nil)
	e2b.Declare("/sandboxes/{id}", route.Forwarding{Locate: route.LocateSandbox})
	e2b.Declare("/sandboxes/{id}/", route.Forwarding{Locate: route.LocateSandbox})
	e2b.Declare("/envd/", route.Forwarding{Locate: route.LocateHeader, Header: "E2b-Sandbox-Id"})
	root := api.NewRoutes(http.NewServeMux(), nil, nil)
	root.Declare("/files", route.Forwarding{Locate: route.LocateHeader, Header: "E2b-Sandbox-Id", Signature: "signature"})
	daytona := api.NewRoutes(http.NewServeMux(), nil, nil)
	daytona.Declare("/sandbox/{idOrName}", route.Forwarding{Locate: route.LocateSandbox})
	daytona.Declare("/sandbox/{idOrName}/", route.Forwarding{Locate: route.LocateSandbox})
	daytona.Declare("/toolbox/{id}/", route.Forwarding{Locate: route.LocateSandbox})
	return NewTable(
		Surface{Routes: native.Forwarded()},
		Surface{Mount: "/e2b", Routes: e2b.Forwarded()},
		Surface{Routes: root.Forwarded()},
		Surface{Mount: "/daytona", Routes: daytona.Forwarded()},
	)
}
