package sandpit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/test/harness"
)

// chaosDuration is how long the chaos run lasts (SANDPIT_CHAOS_DURATION,
// default 60s as in CI).
func chaosDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("SANDPIT_CHAOS_DURATION")); err == nil && d > 0 {
		return d
	}
	return 60 * time.Second
}

// chaosOp is one logical operation of a chaos client and what it saw.
type chaosOp struct {
	kind    string // create, expose, domain, stop, start, delete
	key     string
	sandbox string // the sandbox it acted on (for create: the one it made)
	detail  string // port/protocol or hostname
	status  int    // final status; 0 = never answered
	ids     map[string]bool
}

// chaosClient does random operations on its own sandboxes, each retried with
// the same Idempotency-Key on any error until it gets a definite answer.
type chaosClient struct {
	n     int
	d     *harness.Daemon
	ops   []*chaosOp
	mine  []string // its live sandboxes
	seq   int
	tries int
}

// names is the pool named creates draw from: shared by all clients, so they
// collide and the schema must keep one sandbox per name.
var chaosNames = []string{"chaos-a", "chaos-b", "chaos-c", "chaos-d"}

func (c *chaosClient) next(ctx context.Context) {
	c.seq++
	key := fmt.Sprintf("chaos-%d-%d", c.n, c.seq)
	pick := randInt(100)
	if len(c.mine) == 0 || pick < 20 {
		body := `{}`
		if randInt(2) == 0 {
			body = fmt.Sprintf(`{"name":%q}`, chaosNames[randInt(len(chaosNames))])
		}
		op := c.do(ctx, "create", key, "", http.MethodPost, "/v1/sandboxes", body, "")
		if op.status == http.StatusCreated {
			c.mine = append(c.mine, op.sandbox)
		}
		return
	}
	id := c.mine[randInt(len(c.mine))]
	switch {
	case pick < 45:
		proto := []string{"http", "tcp"}[randInt(2)]
		port := 3000 + randInt(3)
		c.do(ctx, "expose", key, id, http.MethodPost, "/v1/sandboxes/"+id+"/ports",
			fmt.Sprintf(`{"port":%d,"protocol":%q}`, port, proto), strconv.Itoa(port)+"/"+proto)
	case pick < 60:
		host := fmt.Sprintf("c%d-%d.chaos.test", c.n, c.seq)
		c.do(ctx, "domain", key, id, http.MethodPost, "/v1/sandboxes/"+id+"/custom-domains",
			fmt.Sprintf(`{"hostname":%q,"port":3000}`, host), host)
	case pick < 75:
		c.do(ctx, "stop", key, id, http.MethodPost, "/v1/sandboxes/"+id+"/stop", ``, "")
	case pick < 90:
		c.do(ctx, "start", key, id, http.MethodPost, "/v1/sandboxes/"+id+"/start", ``, "")
	default:
		op := c.do(ctx, "delete", key, id, http.MethodDelete, "/v1/sandboxes/"+id, ``, "")
		if op.status == http.StatusNoContent || op.status == http.StatusNotFound {
			for i, m := range c.mine {
				if m == id {
					c.mine = append(c.mine[:i], c.mine[i+1:]...)
					break
				}
			}
		}
	}
}

// do sends one operation, retrying with the same key on transport errors,
// 5xx and in-flight conflicts, until a definite answer or ctx ends.
func (c *chaosClient) do(ctx context.Context, kind, key, id, method, path, body, detail string) *chaosOp {
	op := &chaosOp{kind: kind, key: key, sandbox: id, detail: detail, ids: map[string]bool{}}
	c.ops = append(c.ops, op)
	for ctx.Err() == nil {
		c.tries++
		actx, cancel := context.WithTimeout(ctx, 90*time.Second)
		a, err := keyed(actx, c.d, method, path, body, key)
		cancel()
		if err == nil && a.Status < 500 && a.Code() != "idempotency_key_in_flight" {
			op.status = a.Status
			if kind == "create" && a.Status == http.StatusCreated {
				op.sandbox = a.ID()
				op.ids[a.ID()] = true
			}
			return op
		}
		if err == nil && kind == "create" && a.ID() != "" {
			op.ids[a.ID()] = true
		}
		time.Sleep(time.Duration(50+randInt(200)) * time.Millisecond)
	}
	return op
}

// TestChaos runs eight clients doing random creates (named and keyed),
// exposes, domains, stops, starts and deletes, each retried with the same
// key on any error, while the daemon is SIGKILLed and restarted every ~10s.
// Afterwards the store, the router, the listeners and the engine agree; no
// name or key has two sandboxes; every success a client saw is true in the
// final state unless that client deleted the sandbox later; and no container
// or host port is orphaned.
func TestChaos(t *testing.T) {
	// Its own daemon and labels: it runs beside the other parallel tests
	// rather than before them, which took minutes off the suite.
	t.Parallel()
	duration := chaosDuration()
	d := harness.Start(t, sandpitBin, harness.Options{PortRange: harness.FreeRange(t, 80)})
	deadline := time.Now().Add(duration)
	// Clients may finish their last operation after the deadline; a retry
	// loop that never ends is a failure, reported below.
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(3*time.Minute))
	defer cancel()

	clients := make([]*chaosClient, 8)
	var wg sync.WaitGroup
	for i := range clients {
		clients[i] = &chaosClient{n: i, d: d}
		wg.Add(1)
		go func(c *chaosClient) {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				c.next(ctx)
			}
		}(clients[i])
	}
	crashes := 0
	for {
		wait := time.Duration(8000+randInt(4000)) * time.Millisecond
		if time.Until(deadline) < wait {
			break
		}
		time.Sleep(wait)
		d.Kill()
		crashes++
		d.Restart(nil)
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("clients did not get answers within 3 minutes after the run")
	}

	settle(t, d)
	d.CheckConsistent(t)

	st, err := d.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	final := map[string]string{}
	names := map[string]int{}
	for _, sb := range st.Sandboxes {
		final[sb.ID] = sb.State
		if sb.Name != "" {
			names[sb.Name]++
		}
	}
	for n, k := range names {
		if k > 1 {
			t.Errorf("name %s has %d sandboxes", n, k)
		}
	}
	ports := map[string]bool{}
	for _, p := range st.Ports {
		ports[p.SandboxID+":"+strconv.Itoa(p.Port)+"/"+p.Protocol] = true
	}
	domains := map[string]string{}
	for _, dm := range st.Domains {
		domains[dm.Hostname] = dm.SandboxID
	}

	counts := map[string]int{}
	known := map[string]bool{}
	for _, c := range clients {
		deleted := map[string]bool{}
		lastState := map[string]string{}
		for _, op := range c.ops {
			counts[op.kind]++
			counts[op.kind+" "+strconv.Itoa(op.status)]++
			if len(op.ids) > 1 {
				t.Errorf("key %s made %d sandboxes: %v", op.key, len(op.ids), op.ids)
			}
			for id := range op.ids {
				known[id] = true
			}
			ok := op.status >= 200 && op.status < 300
			switch {
			case op.kind == "delete" && (ok || op.status == http.StatusNotFound):
				deleted[op.sandbox] = true
			case op.kind == "create" && ok:
				lastState[op.sandbox] = "running"
			case (op.kind == "start" || op.kind == "stop") && ok:
				lastState[op.sandbox] = map[string]string{"start": "running", "stop": "stopped"}[op.kind]
			}
		}
		for _, op := range c.ops {
			if op.status < 200 || op.status >= 300 || deleted[op.sandbox] {
				continue
			}
			switch op.kind {
			case "create":
				if _, ok := final[op.sandbox]; !ok {
					t.Errorf("client %d: created %s (key %s), never deleted it, and it is gone", c.n, op.sandbox, op.key)
				}
			case "expose":
				port, proto, _ := strings.Cut(op.detail, "/")
				if !ports[op.sandbox+":"+port+"/"+proto] && final[op.sandbox] != "" {
					t.Errorf("client %d: exposed %s on %s, and the exposure is gone", c.n, op.detail, op.sandbox)
				}
			case "domain":
				if domains[op.detail] != op.sandbox && final[op.sandbox] != "" {
					t.Errorf("client %d: bound %s to %s, and the binding is gone", c.n, op.detail, op.sandbox)
				}
			}
		}
		for id, want := range lastState {
			if got := final[id]; !deleted[id] && got != want {
				t.Errorf("client %d: sandbox %s is %q, but the client's last successful start/stop/create left it %s", c.n, id, got, want)
			}
		}
	}
	for id := range final {
		if !known[id] {
			t.Errorf("sandbox %s exists but no client was ever told about it", id)
		}
	}
	// No host port of the pool is bound without a route.
	lo, hi, _ := strings.Cut(d.PortRange, "-")
	a, _ := strconv.Atoi(lo)
	b, _ := strconv.Atoi(hi)
	routed := map[int]bool{}
	for _, r := range st.Routes {
		if r.Kind == "tcp" {
			routed[r.HostPort] = true
		}
	}
	host, _, _ := net.SplitHostPort(d.ProxyAddr)
	for p := a; p <= b; p++ {
		if routed[p] {
			continue
		}
		if conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(p)), 200*time.Millisecond); err == nil {
			conn.Close()
			t.Errorf("host port %d accepts connections without a route", p)
		}
	}

	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	tries := 0
	for _, c := range clients {
		tries += c.tries
	}
	for _, k := range keys {
		fmt.Fprintf(&sb, " %s=%d", k, counts[k])
	}
	summary, _ := json.Marshal(map[string]any{"crashes": crashes, "requests": tries, "sandboxes_left": len(final)})
	t.Logf("chaos %s: %s; operations:%s", duration, summary, sb.String())
}
