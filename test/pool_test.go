package sandpit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// poolCreate posts a native create (with an Idempotency-Key when key is not
// empty) and returns the sandbox and the Server-Timing header.
func poolCreate(t testing.TB, d *harness.Daemon, req apitypes.CreateRequest, key string) (apitypes.Sandbox, string) {
	t.Helper()
	b, _ := json.Marshal(req)
	hr, _ := http.NewRequest(http.MethodPost, d.URL()+"/v1/sandboxes", bytes.NewReader(b))
	hr.Header.Set("Authorization", "Bearer "+d.Token)
	hr.Header.Set("Content-Type", "application/json")
	if key != "" {
		hr.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Error(err)
		return apitypes.Sandbox{}, ""
	}
	defer resp.Body.Close()
	var sb apitypes.Sandbox
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		t.Errorf("create: %s: %s", resp.Status, buf.String())
		return sb, ""
	}
	if err := json.NewDecoder(resp.Body).Decode(&sb); err != nil {
		t.Error(err)
	}
	return sb, resp.Header.Get("Server-Timing")
}

// adminGet reads a path of the API with the admin token.
func adminGet(t testing.TB, d *harness.Daemon, path string) string {
	t.Helper()
	hr, _ := http.NewRequest(http.MethodGet, d.URL()+path, nil)
	hr.Header.Set("Authorization", "Bearer "+d.Token)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return buf.String()
}

func poolStatus(t testing.TB, d *harness.Daemon) apitypes.WarmPoolStatus {
	t.Helper()
	hr, _ := http.NewRequest(http.MethodGet, d.URL()+"/v1/pool", nil)
	hr.Header.Set("Authorization", "Bearer "+d.Token)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st apitypes.WarmPoolStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// awaitPool waits until the first pool has ready free slots.
func awaitPool(t testing.TB, d *harness.Daemon, ready int, budget time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		st := poolStatus(t, d)
		if len(st.Pools) > 0 && st.Pools[0].Ready >= ready && st.Pools[0].Starting == 0 {
			return time.Since(start)
		}
		if time.Since(start) > budget {
			t.Fatalf("pool did not reach %d ready slots within %s: %+v", ready, budget, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pooledContainers lists the daemon's free and adopted pooled containers.
func pooledContainers(t testing.TB, d *harness.Daemon) []string {
	return d.Containers(t, "sandpit.pool")
}

func inspect(t testing.TB, id, format string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "--format", format, id).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", id, err)
	}
	return strings.TrimSpace(string(out))
}

// hostnameOf is the short id of the container a sandbox runs in.
func hostnameOf(t testing.TB, c *client.Client, id string) string {
	t.Helper()
	res, err := c.Exec(context.Background(), id, client.ExecRequest{Cmd: "hostname"})
	if err != nil || res.ExitCode != 0 {
		t.Errorf("hostname of %s: %v %+v", id, err, res)
		return ""
	}
	return strings.TrimSpace(res.Stdout)
}

// TestPoolAdoptionAppliesTheCreate: a create with env, labels and a memory
// limit adopts a pooled container, and gets all of them; the other pooled
// container is left as it was.
func TestPoolAdoptionAppliesTheCreate(t *testing.T) {
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--warm-pool", "sandpit/base:test=2"}})
	awaitPool(t, d, 2, 60*time.Second)
	before := pooledContainers(t, d)
	if len(before) != 2 {
		t.Fatalf("pooled containers %v, want 2", before)
	}
	if got := inspect(t, before[0], `{{index .Config.Labels "sandpit.pool"}}`); got == "" {
		t.Fatalf("pooled container has no pool label")
	}
	// Pooled containers carry the limits a create naming none gets.
	was := map[string]string{}
	for _, id := range before {
		was[id] = inspect(t, id, "{{.HostConfig.Memory}} {{.State.Running}}")
		if was[id] != fmt.Sprint(1024<<20)+" true" {
			t.Fatalf("pooled container %s: memory, running = %s, want the default 1024 MiB", id, was[id])
		}
	}
	c := d.Client()
	if sbs, _, err := c.List(context.Background(), client.ListOptions{}); err != nil || len(sbs) != 0 {
		t.Fatalf("pooled containers listed as sandboxes: %v %v", sbs, err)
	}

	sb, timing := poolCreate(t, d, apitypes.CreateRequest{
		Env: map[string]string{"GREETING": "hello pool"}, Labels: map[string]string{"team": "a"}, MemoryMB: 256,
	}, "")
	t.Logf("Server-Timing: %s", timing)
	if !strings.Contains(timing, "desc=warm") || !strings.Contains(timing, "store;dur=") || !strings.Contains(timing, "agent;dur=") {
		t.Fatalf("Server-Timing %q: want a warm create with store and agent phases", timing)
	}
	res, err := c.Exec(context.Background(), sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo $GREETING"}})
	if err != nil || strings.TrimSpace(res.Stdout) != "hello pool" {
		t.Fatalf("echo $GREETING: %+v %v", res, err)
	}
	got, err := c.Get(context.Background(), sb.ID)
	if err != nil || got.Labels["team"] != "a" {
		t.Fatalf("labels: %+v %v", got.Labels, err)
	}
	sbs, _, err := c.List(context.Background(), client.ListOptions{})
	if err != nil || len(sbs) != 1 {
		t.Fatalf("list after adoption: %d sandboxes, %v", len(sbs), err)
	}
	host := hostnameOf(t, c, sb.ID)
	var adopted, other string
	for _, id := range before {
		if strings.HasPrefix(id, host) {
			adopted = id
		} else {
			other = id
		}
	}
	if adopted == "" {
		t.Fatalf("sandbox runs in %s, not in a pooled container %v", host, before)
	}
	if mem := inspect(t, adopted, "{{.HostConfig.Memory}}"); mem != fmt.Sprint(256<<20) {
		t.Fatalf("adopted container memory %s, want %d", mem, 256<<20)
	}
	if mem := inspect(t, other, "{{.HostConfig.Memory}} {{.State.Running}}"); mem != was[other] {
		t.Fatalf("the other pooled container changed: memory, running = %s", mem)
	}
	// The warm create is counted as one, and the status reports the pool.
	if m := adminGet(t, d, "/metrics"); !strings.Contains(m, `sandpit_creates_total{path="warm"} 1`) {
		t.Errorf("metrics do not count the warm create:\n%s", m)
	}
	if st := adminGet(t, d, "/v1/status"); !strings.Contains(st, `"pool":{"enabled":true`) {
		t.Errorf("status does not report the pool: %s", st)
	}
	// The pool refills behind the adoption; the adopted container is its
	// sandbox's and the free ones the pool's.
	awaitPool(t, d, 2, 60*time.Second)
	d.CheckConsistent(t)
	if err := c.Delete(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if n := len(pooledContainers(t, d)); n != 2 {
		t.Fatalf("after delete: %d pooled containers, want the 2 free ones", n)
	}
	d.CheckConsistent(t)
}

// TestPoolStorm: 40 concurrent creates against a pool of 10 each get their
// own container, at least the 10 pooled ones are adopted (refills finished
// during the storm may be adopted too), and the pool refills to 10; with one
// Idempotency-Key a storm of 100 makes one sandbox and adopts one container.
// Four times the pool is a storm already: every slot is taken while most
// creates still go cold, and the cold ones are what made a storm of 100 the
// suite's slowest test.
func TestPoolStorm(t *testing.T) {
	// Its own daemon and labels: it runs beside the other parallel tests
	// rather than before them, which took minutes off the suite.
	t.Parallel()
	if testing.Short() {
		t.Skip("40 concurrent creates against a pool of 10: left out of -short runs")
	}
	d := harness.Start(t, sandpitBin, harness.Options{
		Args:      []string{"--warm-pool", "sandpit/base:test=10", "--warm-pool-refill", "2"},
		PortRange: harness.FreeRange(t, 5),
	})
	awaitPool(t, d, 10, 120*time.Second)
	c := d.Client()

	const n, keyedN = 40, 100
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		warm   int
		ids    []string
		timing []string
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, st := poolCreate(t, d, apitypes.CreateRequest{Labels: map[string]string{"i": fmt.Sprint(i)}}, "")
			mu.Lock()
			defer mu.Unlock()
			ids = append(ids, sb.ID)
			timing = append(timing, st)
			if strings.Contains(st, "desc=warm") {
				warm++
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	st := poolStatus(t, d)
	t.Logf("storm of %d: %d warm, %d cold; pool hits %d misses %d", n, warm, n-warm, st.Hits, st.Misses)
	if warm < 10 || int64(warm) != st.Hits {
		t.Fatalf("%d warm creates, %d hits: want at least 10 and equal", warm, st.Hits)
	}
	hosts := map[string]string{}
	for _, id := range ids {
		h := hostnameOf(t, c, id)
		if prev, dup := hosts[h]; dup {
			t.Fatalf("sandboxes %s and %s share container %s", prev, id, h)
		}
		hosts[h] = id
	}
	refill := awaitPool(t, d, 10, 180*time.Second)
	t.Logf("pool refilled to 10 within %s after the storm", refill)
	d.CheckConsistent(t)
	for _, id := range ids {
		if err := c.Delete(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}

	// A keyed storm: one sandbox, one adoption.
	hits := poolStatus(t, d).Hits
	var keyed sync.Map
	for range keyedN {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, _ := poolCreate(t, d, apitypes.CreateRequest{Env: map[string]string{"K": "v"}}, "pool-storm-key")
			keyed.Store(sb.ID, true)
		}()
	}
	wg.Wait()
	count := 0
	keyed.Range(func(any, any) bool { count++; return true })
	if count != 1 {
		t.Fatalf("keyed storm made %d sandboxes, want 1", count)
	}
	if got := poolStatus(t, d).Hits - hits; got != 1 {
		t.Fatalf("keyed storm adopted %d pooled containers, want 1", got)
	}
	awaitPool(t, d, 10, 120*time.Second)
	if sbs, _, _ := c.List(context.Background(), client.ListOptions{}); len(sbs) != 1 {
		t.Fatalf("%d sandboxes after the keyed storm, want 1", len(sbs))
	}
	if got := len(pooledContainers(t, d)); got != 11 {
		t.Fatalf("%d pooled containers, want 10 free and 1 adopted", got)
	}
	d.CheckConsistent(t)
}

// TestPoolSurvivesRestart: a restarted daemon keeps its healthy pooled
// containers, and replaces one killed behind its back.
func TestPoolSurvivesRestart(t *testing.T) {
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--warm-pool", "sandpit/base:test=3"}})
	awaitPool(t, d, 3, 60*time.Second)
	// An adopted one must come back as its sandbox, with its settings.
	sb, _ := poolCreate(t, d, apitypes.CreateRequest{Env: map[string]string{"KEEP": "me"}}, "")
	awaitPool(t, d, 3, 60*time.Second)
	before := strings.Join(pooledContainers(t, d), " ")

	d.Stop()
	d.Restart(nil)
	awaitPool(t, d, 3, 60*time.Second)
	if after := strings.Join(pooledContainers(t, d), " "); after != before {
		t.Fatalf("pooled containers after restart:\n%s\nwant the same as before:\n%s", after, before)
	}
	c := d.Client()
	res, err := c.Exec(context.Background(), sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo $KEEP"}})
	if err != nil || strings.TrimSpace(res.Stdout) != "me" {
		t.Fatalf("adopted sandbox after restart: %+v %v", res, err)
	}
	d.CheckConsistent(t)

	// Kill a free pooled container behind the daemon's back.
	host := hostnameOf(t, c, sb.ID)
	var victim string
	for _, id := range pooledContainers(t, d) {
		if !strings.HasPrefix(id, host) {
			victim = id
			break
		}
	}
	if out, err := exec.Command("docker", "kill", victim).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v %s", err, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ids := pooledContainers(t, d)
		st := poolStatus(t, d)
		if !strings.Contains(strings.Join(ids, " "), victim) && len(ids) == 4 && st.Pools[0].Ready == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("killed pooled container not replaced: %v %+v", ids, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.CheckConsistent(t)
}

// TestPoolFallsBackToCold: a pooled container that does not answer (paused
// behind the daemon's back) is dropped and the create goes cold instead of
// failing; the pool refills.
func TestPoolFallsBackToCold(t *testing.T) {
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--warm-pool", "sandpit/base:test=1"}})
	awaitPool(t, d, 1, 60*time.Second)
	pooled := pooledContainers(t, d)
	if out, err := exec.Command("docker", "pause", pooled[0]).CombinedOutput(); err != nil {
		t.Fatalf("docker pause: %v %s", err, out)
	}
	sb, timing := poolCreate(t, d, apitypes.CreateRequest{Env: map[string]string{"V": "cold"}}, "")
	if !strings.Contains(timing, "desc=cold") {
		t.Fatalf("Server-Timing %q: want a cold create", timing)
	}
	c := d.Client()
	res, err := c.Exec(context.Background(), sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo $V"}})
	if err != nil || strings.TrimSpace(res.Stdout) != "cold" {
		t.Fatalf("echo $V: %+v %v", res, err)
	}
	awaitPool(t, d, 1, 60*time.Second)
	for _, id := range pooledContainers(t, d) {
		if id == pooled[0] {
			t.Fatalf("the unanswering pooled container %s is still there", id)
		}
	}
	if st := poolStatus(t, d); st.Hits != 0 || st.Misses != 1 {
		t.Fatalf("hits %d misses %d, want 0 and 1", st.Hits, st.Misses)
	}
	d.CheckConsistent(t)
}

// TestPoolAdoptionAppliesNetworkPolicy: a create with its own egress policy
// that adopts a pooled container is confined before it answers (its rule is
// in place and it reaches nothing), while a sandbox adopted under the
// daemon's defaults reaches "the internet"; deleting the confined sandbox
// removes its rule.
func TestPoolAdoptionAppliesNetworkPolicy(t *testing.T) {
	fn := newFakeNet(t)
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--warm-pool", "sandpit/base:test=2"}})
	awaitPool(t, d, 2, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := d.Client()

	confined, timing := poolCreate(t, d, apitypes.CreateRequest{Network: &apitypes.Network{Egress: "none"}}, "")
	if !strings.Contains(timing, "desc=warm") {
		t.Fatalf("Server-Timing %q: want a warm create", timing)
	}
	if !strings.Contains(iptablesRules(t), "sandpit:"+confined.ID) {
		t.Fatalf("no rule for the adopted %s:\n%s", confined.ID, iptablesRules(t))
	}
	open, timing := poolCreate(t, d, apitypes.CreateRequest{}, "")
	if !strings.Contains(timing, "desc=warm") {
		t.Fatalf("Server-Timing %q: want a warm create", timing)
	}
	if reaches(t, ctx, c, confined.ID, fn.internet, fn.port) {
		t.Errorf("adopted sandbox with egress none reaches the internet")
	}
	if !reaches(t, ctx, c, open.ID, fn.internet, fn.port) {
		t.Errorf("adopted sandbox with the default policy does not reach the internet")
	}
	if err := c.Delete(ctx, confined.ID); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(iptablesRules(t), "sandpit:"+confined.ID) {
		t.Errorf("rules of deleted %s remain", confined.ID)
	}
	d.CheckConsistent(t)
}

// TestPoolConsistencyFlagsUnknownPooledContainer: the consistency checker
// accepts the pool's free and adopted containers, and reports a pooled
// container the daemon's pool does not hold.
func TestPoolConsistencyFlagsUnknownPooledContainer(t *testing.T) {
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--warm-pool", "sandpit/base:test=1"}})
	awaitPool(t, d, 1, 60*time.Second)
	sb, _ := poolCreate(t, d, apitypes.CreateRequest{}, "")
	awaitPool(t, d, 1, 60*time.Second)
	d.CheckConsistent(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got, err := d.SandboxContainers(ctx, sb.ID); err != nil || len(got) != 1 {
		t.Fatalf("containers of the adopted %s: %v %v, want one", sb.ID, got, err)
	}
	// A container labelled as this run's pooled one, which the daemon never
	// made (it lacks the daemon's instance label, so the daemon leaves it
	// alone): the checker must see it.
	out, err := exec.Command("docker", "create", "--label", "sandpit.run="+d.Label, "--label", "sandpit.pool=stray",
		"--label", "sandpit.sandbox-id=pool-stray", "sandpit/base:test", "true").CombinedOutput()
	if err != nil {
		t.Fatalf("docker create: %v %s", err, out)
	}
	stray := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", stray).Run() })
	bad, err := d.Inconsistencies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 1 || !strings.Contains(bad[0], "unknown to the pool") {
		t.Fatalf("inconsistencies %q, want the stray pooled container alone", bad)
	}
}
