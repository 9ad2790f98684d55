package sandpit_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// resOp is one logical operation of a resource chaos client: its key, what
// it made as each answer said (a second id for one key is a violation), and
// its final status (0: never answered).
type resOp struct {
	kind, key, target string
	status            int
	ids               map[string]bool
}

// resClient does the mutating calls beyond the sandbox lifecycle, each
// retried with the same Idempotency-Key until a definite answer.
type resClient struct {
	n         int
	d         *harness.Daemon
	ops       []*resOp
	sandboxes []string
	seq       int
	tries     int
}

// made extracts the ids of the resources an answer names.
type made func(harness.Answer) []string

func idOf(a harness.Answer) []string {
	if id := a.ID(); id != "" {
		return []string{id}
	}
	return nil
}

func buildIDOf(a harness.Answer) []string {
	var b apitypes.BuildTemplateResponse
	if json.Unmarshal(a.Body, &b) == nil && b.Template.ID != "" {
		return []string{b.Template.ID}
	}
	return nil
}

func forkIDsOf(a harness.Answer) []string {
	var f apitypes.ForkResponse
	_ = json.Unmarshal(a.Body, &f)
	var ids []string
	for _, r := range f.Forks {
		if r.Sandbox != nil {
			ids = append(ids, r.Sandbox.ID)
		}
	}
	return ids
}

func fingerprintOf(a harness.Answer) []string {
	var k apitypes.SSHKey
	if json.Unmarshal(a.Body, &k) == nil && k.Fingerprint != "" {
		return []string{k.Fingerprint}
	}
	return nil
}

func tokenNameOf(a harness.Answer) []string {
	var tk apitypes.Token
	if json.Unmarshal(a.Body, &tk) == nil && tk.Name != "" {
		return []string{tk.Name}
	}
	return nil
}

// do sends one operation, retrying with the same key on transport errors,
// 5xx and in-flight answers, until a definite answer or ctx ends. A token
// create takes no key (its answer holds a secret, which is never stored for
// a replay): its retry after a crash finds the name taken, which is its
// definite answer.
func (c *resClient) do(ctx context.Context, kind, target, method, path, body string, ids made) *resOp {
	c.seq++
	op := &resOp{kind: kind, key: fmt.Sprintf("res-%d-%d", c.n, c.seq), target: target, ids: map[string]bool{}}
	c.ops = append(c.ops, op)
	keys := []string{op.key}
	if kind == "token" {
		keys = nil
	}
	for ctx.Err() == nil {
		c.tries++
		actx, cancel := context.WithTimeout(ctx, 90*time.Second)
		a, err := keyed(actx, c.d, method, path, body, keys...)
		cancel()
		if err == nil && a.Status < 300 {
			for _, id := range ids(a) {
				op.ids[id] = true
			}
		}
		if err == nil && a.Status < 500 && a.Code() != "idempotency_key_in_flight" {
			op.status = a.Status
			return op
		}
		time.Sleep(time.Duration(50+randInt(200)) * time.Millisecond)
	}
	return op
}

func (c *resClient) next(ctx context.Context, t *testing.T) {
	pick := randInt(100)
	if len(c.sandboxes) == 0 || pick < 8 {
		if op := c.do(ctx, "create", "", http.MethodPost, "/v1/sandboxes", `{}`, idOf); op.status == http.StatusCreated {
			for id := range op.ids {
				c.sandboxes = append(c.sandboxes, id)
			}
		}
		return
	}
	id := c.sandboxes[randInt(len(c.sandboxes))]
	switch {
	case pick < 18:
		body, _ := json.Marshal(apitypes.BuildTemplateRequest{Name: fmt.Sprintf("chaos-%d-%d", c.n, c.seq+1),
			Dockerfile: fmt.Sprintf("FROM %s\nLABEL chaos=%d-%d\n", testBase, c.n, c.seq+1)})
		c.do(ctx, "template", "", http.MethodPost, "/v1/templates", string(body), buildIDOf)
	case pick < 32:
		// Unnamed: only the key keeps a retry from making a second one.
		c.do(ctx, "snapshot", id, http.MethodPost, "/v1/sandboxes/"+id+"/snapshots", `{}`, idOf)
	case pick < 42:
		op := c.do(ctx, "fork", id, http.MethodPost, "/v1/sandboxes/"+id+"/fork", `{"count":1}`, forkIDsOf)
		if op.status == http.StatusCreated {
			for f := range op.ids {
				c.sandboxes = append(c.sandboxes, f)
			}
		}
	case pick < 56:
		c.do(ctx, "volume", "", http.MethodPost, "/v1/volumes", fmt.Sprintf(`{"name":"chaos-%d-%d"}`, c.n, c.seq+1), idOf)
	case pick < 70:
		egress := []string{"none", "public"}[randInt(2)]
		c.do(ctx, "network", id, http.MethodPut, "/v1/sandboxes/"+id+"/network", fmt.Sprintf(`{"egress":%q}`, egress), idOf)
	case pick < 84:
		mem := []int{128, 192, 256}[randInt(3)]
		c.do(ctx, "resize", id, http.MethodPut, "/v1/sandboxes/"+id+"/resources", fmt.Sprintf(`{"memory_mb":%d}`, mem), idOf)
	case pick < 94:
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Error(err)
			return
		}
		sp, _ := ssh.NewPublicKey(pub)
		body, _ := json.Marshal(map[string]string{"public_key": strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " chaos"})
		c.do(ctx, "ssh-key", "", http.MethodPost, "/v1/ssh-keys", string(body), fingerprintOf)
	default:
		c.do(ctx, "token", "", http.MethodPost, "/v1/tokens",
			fmt.Sprintf(`{"name":"chaos-%d-%d","owner":"chaos","scopes":["sandboxes:read"]}`, c.n, c.seq+1), tokenNameOf)
	}
}

// chaosCrashPoints are the crash points of the calls the resource chaos
// makes (internal/crashpoint; the harness builds the daemon with them): a
// sandbox or fork made, a snapshot committed, an image built, a volume's row
// and its engine volume made, a resize stored.
var chaosCrashPoints = []string{"before-response", "after-snapshot-commit", "after-image-build", "after-volume-row", "after-volume-create", "after-resize-store"}

// TestChaosResources extends the chaos run to the mutating calls beyond the
// sandbox lifecycle: template builds, snapshots, forks, volume creates,
// network updates, resizes, SSH keys and access tokens. Four clients retry
// each call with its key across SIGKILLs of the daemon (every ~8-12 s, or
// sooner at the crash point each restart arms).
// Afterwards the store, routes and containers agree (CheckConsistent); every
// sandbox, template, snapshot, volume, SSH key and token the daemon lists was
// named to some client, so no retry made a second one; no key was answered
// with two resources; every ready template's image is in the engine, and the
// engine holds a volume for each volume row and none besides.
func TestChaosResources(t *testing.T) {
	t.Parallel()
	duration := min(chaosDuration(), 45*time.Second)
	d := harness.Start(t, sandpitBin, harness.Options{})
	deadline := time.Now().Add(duration)
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(3*time.Minute))
	defer cancel()

	clients := make([]*resClient, 4)
	var wg sync.WaitGroup
	for i := range clients {
		clients[i] = &resClient{n: i, d: d}
		wg.Add(1)
		go func(c *resClient) {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				c.next(ctx, t)
			}
		}(clients[i])
	}
	// Each restart arms one crash point, so that besides the SIGKILLs at
	// random moments the daemon dies exactly where a retry is most likely to
	// make a second resource: after the resource exists, before the answer.
	kills, atPoints := 0, 0
	for {
		wait := time.Duration(8000+randInt(4000)) * time.Millisecond
		if time.Until(deadline) < wait {
			break
		}
		if d.Wait(wait) {
			atPoints++
		} else {
			d.Kill()
		}
		kills++
		d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=" + chaosCrashPoints[randInt(len(chaosCrashPoints))]})
	}
	// The rest of the run, and the checks, on a daemon with no crash point.
	d.Kill()
	kills++
	d.Restart(nil)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("clients did not get answers within 3 minutes after the run")
	}
	settle(t, d)
	d.CheckConsistent(t)

	violations := 0
	violate := func(format string, args ...any) {
		violations++
		t.Errorf(format, args...)
	}
	counts := map[string]int{}
	known := map[string]bool{}
	ops := 0
	for _, c := range clients {
		for _, op := range c.ops {
			ops++
			counts[op.kind]++
			if len(op.ids) > 1 {
				violate("%s key %s was answered with %d resources: %v", op.kind, op.key, len(op.ids), op.ids)
			}
			for id := range op.ids {
				known[id] = true
			}
		}
	}
	ctx2 := ctxFor(t, 2*time.Minute)
	var (
		tpls  apitypes.ListTemplatesResponse
		snaps apitypes.ListSnapshotsResponse
		vols  apitypes.ListVolumesResponse
		keys  apitypes.ListSSHKeysResponse
		toks  apitypes.TokenList
	)
	for path, out := range map[string]any{"/v1/templates": &tpls, "/v1/snapshots": &snaps, "/v1/volumes": &vols,
		"/v1/ssh-keys": &keys, "/v1/tokens": &toks} {
		if st, _, msg, err := postJSON(ctx2, d, http.MethodGet, path, "", out); err != nil || st != http.StatusOK {
			t.Fatalf("GET %s: %d %s %v", path, st, msg, err)
		}
	}
	state, err := d.State(ctx2)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range state.Sandboxes {
		if !known[sb.ID] {
			violate("sandbox %s exists but no client was told about it", sb.ID)
		}
	}
	for _, tp := range append(tpls.Templates, snaps.Snapshots...) {
		if !known[tp.ID] && strings.HasPrefix(tp.Name, "chaos-") {
			violate("template %s (%s) exists but no client was told about it", tp.ID, tp.Name)
		}
		if tp.Image != "" && exec.Command("docker", "image", "inspect", tp.Image).Run() != nil {
			violate("template %s names image %s, which the engine does not have", tp.ID, tp.Image)
		}
	}
	for _, s := range snaps.Snapshots {
		if !known[s.ID] {
			violate("snapshot %s exists but no client was told about it", s.ID)
		}
	}
	rows := map[string]bool{}
	for _, v := range vols.Volumes {
		rows[v.ID] = true
		if !known[v.ID] {
			violate("volume %s exists but no client was told about it", v.ID)
		}
	}
	engineVols := 0
	for end := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		engineVols = len(d.Volumes(t, "sandpit.volume-id"))
		if engineVols == len(rows) || time.Now().After(end) {
			break
		}
	}
	if engineVols != len(rows) {
		violate("the engine holds %d volumes, the store %d", engineVols, len(rows))
	}
	for _, k := range keys.Keys {
		if !known[k.Fingerprint] {
			violate("SSH key %s exists but no client was told about it", k.Fingerprint)
		}
	}
	for _, tk := range toks.Tokens {
		if strings.HasPrefix(tk.Name, "chaos-") && !known[tk.Name] {
			// A token whose create's answer was lost to a kill: its retry
			// found the name taken. One token, not two: names are unique.
			t.Logf("token %s was made by an attempt whose answer was lost", tk.Name)
		}
	}
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var sb strings.Builder
	tries := 0
	for _, c := range clients {
		tries += c.tries
	}
	for _, k := range kinds {
		fmt.Fprintf(&sb, " %s=%d", k, counts[k])
	}
	summary, _ := json.Marshal(map[string]any{"operations": ops, "requests": tries, "kills": kills, "kills_at_crash_points": atPoints, "violations": violations})
	t.Logf("resource chaos %s: %s; operations:%s", duration, summary, sb.String())
}

// settle waits until no sandbox is starting (background restarts after the
// last kill), so the comparison sees a world at rest.
func settle(t *testing.T, d *harness.Daemon) {
	t.Helper()
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		var list struct {
			Sandboxes []struct{ State string } `json:"sandboxes"`
		}
		st, _, _, err := postJSON(context.Background(), d, http.MethodGet, "/v1/sandboxes?limit=1000", "", &list)
		starting := 0
		for _, sb := range list.Sandboxes {
			if sb.State == "starting" {
				starting++
			}
		}
		if err == nil && st == http.StatusOK && starting == 0 {
			return
		}
	}
}
