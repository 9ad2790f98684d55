package cluster_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
)

// TestClusterPTYFromAnyNode: every node's status names its cluster, and the
// native terminal WebSocket, opened the way a browser opens it (the token in
// the subprotocol list), reaches a sandbox on another node through the node
// it was opened on: that node authenticates the subprotocol's token and
// forwards the upgrade to the owner.
func TestClusterPTYFromAnyNode(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// GET /v1/status says which cluster each node is in (the dashboard
	// shows its cluster panel by it).
	for _, n := range c.nodes {
		a := call(ctx, n, http.MethodGet, "/v1/status", "", nil)
		var st apitypes.Status
		if a.Status != http.StatusOK || json.Unmarshal(a.Body, &st) != nil || !st.Cluster.Enabled || st.Cluster.Node != n.name || st.Cluster.Nodes != len(c.nodes) {
			t.Errorf("%s: GET /v1/status cluster %+v (%d %s), want enabled, node %s, %d nodes", n.name, st.Cluster, a.Status, a.Body, n.name, len(c.nodes))
		}
	}
	sb, err := c.nodes[0].Client().Create(ctx, client.CreateRequest{Env: map[string]string{"GREETING": "hello-across-nodes"}})
	if err != nil {
		t.Fatal(err)
	}
	owner := c.ownerOf(t, sb.ID)
	if owner == nil {
		t.Fatalf("no node runs %s", sb.ID)
	}
	for _, entry := range c.nodes {
		if entry == owner {
			continue
		}
		ws, resp, err := websocket.Dial(ctx, "ws://"+entry.Addr+"/v1/sandboxes/"+sb.ID+"/pty",
			&websocket.DialOptions{Subprotocols: []string{"sandpit.pty", "bearer." + clusterToken}})
		if err != nil {
			t.Fatalf("dial through %s (owner %s): %v %+v", entry.name, owner.name, err, resp)
		}
		if err := ws.Write(ctx, websocket.MessageBinary, []byte("echo \"<$GREETING>\"; exit\r")); err != nil {
			t.Fatal(err)
		}
		var seen strings.Builder
		for !strings.Contains(seen.String(), "<hello-across-nodes>") {
			typ, b, err := ws.Read(ctx)
			if err != nil {
				t.Fatalf("through %s: the terminal ended (%v) after %q", entry.name, err, seen.String())
			}
			if typ == websocket.MessageBinary {
				seen.Write(b)
			}
		}
		ws.CloseNow()
	}
}
