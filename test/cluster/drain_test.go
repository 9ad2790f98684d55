package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// nodeOf is the node field of a created or fetched /v1 sandbox.
func nodeOf(a harness.Answer) string {
	var sb struct {
		Node string `json:"node"`
	}
	_ = json.Unmarshal(a.Body, &sb)
	return sb.Node
}

// cli runs the sandpit CLI against n as the cluster's admin.
func cli(t *testing.T, n *node, args ...string) (string, error) {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(n.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sandpitBin, append(args, "--addr", n.Addr, "--token-file", tok)...).CombinedOutput()
	return string(out), err
}

// createOn creates unkeyed sandboxes through entry until one lands on a
// node want accepts, and returns its id and node.
func createOn(ctx context.Context, t *testing.T, entry *node, want func(node string) bool) (string, string) {
	t.Helper()
	for range 20 {
		a := call(ctx, entry, http.MethodPost, "/v1/sandboxes", `{}`, nil)
		if a.Status != 201 {
			t.Fatalf("create: %d %s %v", a.Status, a.Body, a.Err)
		}
		if want(nodeOf(a)) {
			return a.ID(), nodeOf(a)
		}
	}
	t.Fatal("twenty creates never landed on the wanted node")
	return "", ""
}

func TestClusterDrainStopsPlacementAndUndrainRestoresIt(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n1, n2 := c.nodes[0], c.nodes[1]
	kept, _ := createOn(ctx, t, n1, func(n string) bool { return n == "n2" })

	// Drain n2 with the CLI, through another node: the flag is replicated.
	if out, err := cli(t, n1, "cluster", "drain", "n2"); err != nil {
		a := call(ctx, n1, http.MethodGet, "/v1/cluster/members", "", nil)
		t.Fatalf("cluster drain: %v\n%s\n%s", err, out, a.Body)
	}
	// An unknown node is refused and changes nothing.
	before := c.digests(10 * time.Second)
	if a := call(ctx, n1, http.MethodPost, "/v1/cluster/drain", `{"node":"nope","drain":true}`, nil); a.Status != 404 || a.Code() != "not_found" {
		t.Fatalf("drain of an unknown node: %d %s", a.Status, a.Body)
	}
	if a := call(ctx, n1, http.MethodPost, "/v1/cluster/drain", `{"drain":true}`, nil); a.Status != 400 {
		t.Fatalf("drain without a node: %d %s", a.Status, a.Body)
	}
	if after := c.digests(10 * time.Second); after != before {
		t.Fatal("a refused drain changed the index")
	}
	for _, n := range c.nodes {
		ms, err := n.Client().ClusterMembers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Draining != (m.Name == "n2") {
				t.Fatalf("%s sees %s draining=%v", n.name, m.Name, m.Draining)
			}
		}
		if st, err := n.Client().ClusterStatus(ctx); err != nil || fmt.Sprint(st.Draining) != "[n2]" {
			t.Fatalf("%s status: %+v %v", n.name, st, err)
		}
	}
	if out, err := cli(t, n2, "cluster", "members"); err != nil || !strings.Contains(out, "draining") {
		t.Fatalf("cluster members does not show the drain: %v\n%s", err, out)
	}

	// Twenty creates sent round-robin to n1, n2, n3 land on n1 and n3 only.
	// Half carry an Idempotency-Key, which places by the key's rendezvous.
	per := map[string]int{}
	for i := range 20 {
		var hdr map[string]string
		if i%2 == 1 {
			hdr = map[string]string{"Idempotency-Key": fmt.Sprintf("drain-%d", i)}
		}
		a := call(ctx, c.nodes[i%3], http.MethodPost, "/v1/sandboxes", `{}`, hdr)
		if a.Status != 201 {
			t.Fatalf("create %d: %d %s %v", i, a.Status, a.Body, a.Err)
		}
		per[nodeOf(a)]++
	}
	t.Logf("placements while n2 drains: %v", per)
	if per["n2"] != 0 || per["n1"]+per["n3"] != 20 {
		t.Fatalf("creates landed on %v, want only n1 and n3", per)
	}
	if k := len(n2.Containers(t)); k != 1 {
		t.Fatalf("the drained node runs %d containers, want its one", k)
	}
	// n2's sandbox keeps running and is reachable from every node.
	for _, n := range c.nodes {
		res, err := n.Client().Exec(ctx, kept, client.ExecRequest{Cmd: "echo", Args: []string{"still here"}})
		if err != nil || strings.TrimSpace(res.Stdout) != "still here" {
			t.Fatalf("exec in the drained node's sandbox through %s: %+v %v", n.name, res, err)
		}
	}

	// Undrain (through the client, on n3) restores placement on n2.
	if err := c.nodes[2].Client().ClusterDrain(ctx, "n2", false); err != nil {
		t.Fatal(err)
	}
	createOn(ctx, t, n1, func(n string) bool { return n == "n2" })
}

func TestClusterMaxSandboxesIsNeverExceeded(t *testing.T) {
	c := startClusterWith(t, func(string) []string { return []string{"--max-sandboxes", "2"} })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The leader registers each member's ceiling in the index shortly after
	// the cluster forms; until then only each node's own store enforces it.
	deadline := time.Now().Add(20 * time.Second)
	for registered := false; !registered; {
		registered = true
		for _, n := range c.nodes {
			ms, err := n.Client().ClusterMembers(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				registered = registered && m.MaxSandboxes == 2
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the members' --max-sandboxes never reached the index")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Nine creates at once from the three nodes: placement is decided in
	// the replicated index, so no node ever holds more than two, and every
	// create refused is 503 no_capacity.
	as := storm(c, 9, func(i int, nd *node) harness.Answer {
		return call(ctx, nd, http.MethodPost, "/v1/sandboxes", `{}`, nil)
	})
	t.Logf("nine concurrent creates: %v", tally(as))
	made := 0
	for _, a := range as {
		switch {
		case a.Status == 201:
			made++
		case a.Status != 503 || a.Code() != "no_capacity":
			t.Fatalf("create: %d %s %v", a.Status, a.Body, a.Err)
		}
	}
	if made > 6 {
		t.Fatalf("%d creates succeeded with room for 6", made)
	}
	// Filling up one at a time makes exactly six.
	for i := made; i < 6; i++ {
		if a := call(ctx, c.nodes[i%3], http.MethodPost, "/v1/sandboxes", `{}`, nil); a.Status != 201 {
			t.Fatalf("create %d of 6: %d %s", i+1, a.Status, a.Body)
		}
	}
	for _, n := range c.nodes {
		if k := len(n.Containers(t)); k != 2 {
			t.Fatalf("%s runs %d sandboxes, want 2", n.name, k)
		}
	}
	// The seventh is refused on every node and every surface, with a delay
	// to retry after.
	for _, n := range c.nodes {
		for _, tc := range []struct{ path, body string }{
			{"/v1/sandboxes", `{}`},
			{"/v1/sandboxes", `{"name":"seventh"}`},
			{"/e2b/sandboxes", `{"templateID":"base","timeout":60}`},
			{"/daytona/sandbox", `{}`},
		} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, n.URL()+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+n.Token)
			req.Header.Set("X-API-KEY", n.Token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("%s %s: %d (Retry-After %q), want 503 with Retry-After", n.name, tc.path, resp.StatusCode, resp.Header.Get("Retry-After"))
			}
		}
		if a := call(ctx, n, http.MethodPost, "/v1/sandboxes", `{}`, nil); a.Code() != "no_capacity" {
			t.Fatalf("%s: %d %s, want no_capacity", n.name, a.Status, a.Body)
		}
	}
	total := 0
	for _, n := range c.nodes {
		total += len(n.Containers(t))
	}
	if total != 6 {
		t.Fatalf("%d containers after the refusals, want 6", total)
	}
	c.digests(10 * time.Second)
}

// sseEvent is one event of a /v1/events stream.
type sseEvent struct {
	Type      string `json:"type"`
	SandboxID string `json:"sandbox_id"`
	Node      string `json:"node"`
}

// subscribe opens n's /v1/events and returns its events once the stream says
// it is subscribed.
func subscribe(ctx context.Context, t *testing.T, n *node) <-chan sseEvent {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.URL()+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+n.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("subscribe: %v %v", resp, err)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, ": subscribed") {
		t.Fatalf("first line %q %v", line, err)
	}
	out := make(chan sseEvent, 64)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				var e sseEvent
				if json.Unmarshal([]byte(data), &e) == nil {
					out <- e
				}
			}
		}
	}()
	return out
}

func TestClusterEventsOfAnyNodeCarryTheWholeCluster(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	events := subscribe(ctx, t, c.nodes[0])
	id, owner := createOn(ctx, t, c.nodes[1], func(n string) bool { return n != "n1" })
	if err := c.nodes[2].Client().Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	var got []string
	timeout := time.After(30 * time.Second)
	for !slices.Contains(got, "created") || !slices.Contains(got, "deleted") {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended; saw %v", got)
			}
			if e.SandboxID != id {
				continue
			}
			if e.Node != owner {
				t.Fatalf("event %s of %s names node %q, want %q", e.Type, id, e.Node, owner)
			}
			got = append(got, e.Type)
		case <-timeout:
			t.Fatalf("n1's stream showed %v of %s on %s, want created and deleted", got, id, owner)
		}
	}
}

func TestClusterE2BAndDaytonaListingsSpanNodes(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// At least one sandbox on each node.
	for _, name := range []string{"n1", "n2", "n3"} {
		createOn(ctx, t, c.nodes[0], func(n string) bool { return n == name })
	}
	// The native listing (cluster-wide since part 1) says which node
	// runs each.
	want := map[string]string{} // id -> node
	all, err := listAll(ctx, c.nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range all {
		want[sb.ID] = sb.Node
	}
	get := func(n *node, path string, hdr map[string]string) harness.Answer {
		a := call(ctx, n, http.MethodGet, path, "", hdr)
		if a.Status != 200 {
			t.Fatalf("%s %s: %d %s", n.name, path, a.Status, a.Body)
		}
		return a
	}
	e2bKey := map[string]string{"X-API-KEY": clusterToken}
	for _, n := range c.nodes {
		for _, path := range []string{"/e2b/sandboxes", "/e2b/v2/sandboxes"} {
			var listed []struct {
				SandboxID string `json:"sandboxID"`
				ClientID  string `json:"clientID"`
			}
			_ = json.Unmarshal(get(n, path, e2bKey).Body, &listed)
			seen := map[string]string{}
			for _, l := range listed {
				seen[l.SandboxID] = l.ClientID
			}
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				t.Fatalf("%s %s lists %v, want %v (id: node)", n.name, path, seen, want)
			}
		}
		var dt struct {
			Items []struct {
				ID       string `json:"id"`
				RunnerID string `json:"runnerId"`
			} `json:"items"`
		}
		_ = json.Unmarshal(get(n, "/daytona/sandbox", nil).Body, &dt)
		seen := map[string]string{}
		for _, it := range dt.Items {
			seen[it.ID] = it.RunnerID
		}
		if fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Fatalf("%s daytona list %v, want %v", n.name, seen, want)
		}
	}
	// Paging through the merged listings, one row a page, sees every
	// sandbox exactly once.
	pageE2B := func(n *node) []string {
		var ids []string
		token := ""
		// One row a page: a page per sandbox (their number depends on
		// where placement put the creates above), and a spare.
		for range len(want) + 1 {
			path := "/e2b/v2/sandboxes?limit=1"
			if token != "" {
				path += "&nextToken=" + token
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.URL()+path, nil)
			req.Header.Set("X-API-KEY", clusterToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("page: %v %v", resp, err)
			}
			var listed []struct {
				SandboxID string `json:"sandboxID"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&listed)
			resp.Body.Close()
			for _, l := range listed {
				ids = append(ids, l.SandboxID)
			}
			if token = resp.Header.Get("X-Next-Token"); token == "" {
				break
			}
		}
		return ids
	}
	pageDaytona := func(n *node) []string {
		var ids []string
		cursor := ""
		for range len(want) + 1 {
			path := "/daytona/sandbox?limit=1"
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			var page struct {
				Items []struct {
					ID string `json:"id"`
				} `json:"items"`
				NextCursor *string `json:"nextCursor"`
			}
			_ = json.Unmarshal(get(n, path, nil).Body, &page)
			for _, it := range page.Items {
				ids = append(ids, it.ID)
			}
			if page.NextCursor == nil {
				break
			}
			cursor = *page.NextCursor
		}
		return ids
	}
	for name, ids := range map[string][]string{"e2b": pageE2B(c.nodes[1]), "daytona": pageDaytona(c.nodes[2])} {
		seen := map[string]bool{}
		for _, id := range ids {
			if seen[id] || want[id] == "" {
				t.Fatalf("%s paging: %v repeats or invents %s", name, ids, id)
			}
			seen[id] = true
		}
		if len(seen) != len(want) {
			t.Fatalf("%s paging saw %v, want %d sandboxes", name, ids, len(want))
		}
	}
	// A listing through a node whose peer is down names the peer and
	// lists the rest.
	c.nodes[2].Kill()
	a := call(ctx, c.nodes[0], http.MethodGet, "/e2b/v2/sandboxes", "", e2bKey)
	if a.Status != 200 {
		t.Fatalf("list with n3 down: %d %s", a.Status, a.Body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.nodes[0].URL()+"/daytona/sandbox", nil)
		req.Header.Set("Authorization", "Bearer "+clusterToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if p := resp.Header.Get("Sandpit-Partial"); p == "n3" || time.Now().After(deadline) {
			if p != "n3" {
				t.Fatalf("Sandpit-Partial %q with n3 down", p)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
}
