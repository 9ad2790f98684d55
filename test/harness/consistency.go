package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
)

// DebugState is the body of GET /v1/debug/state.
type DebugState = apitypes.DebugState

// State reads the daemon's debug snapshot.
func (d *Daemon) State(ctx context.Context) (DebugState, error) {
	var st DebugState
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/v1/debug/state", nil)
	if err != nil {
		return st, err
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("debug state: %d %s", resp.StatusCode, b)
	}
	return st, json.Unmarshal(b, &st)
}

// engineContainer is what the engine itself (not the daemon) says about one
// labelled container.
type engineContainer struct {
	ID, Name, SandboxID, State, IP string
	// Pooled is whether the container carries the warm pool's label: its
	// sandbox-id label is then a pool slot's id, whoever adopted it.
	Pooled bool
}

// engineContainers lists this daemon's containers through the docker CLI.
func (d *Daemon) engineContainers(ctx context.Context) ([]engineContainer, error) {
	var out []byte
	for attempt := 1; ; attempt++ {
		ids, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--no-trunc", "--filter", "label=sandpit.run="+d.Label).Output()
		if err != nil {
			return nil, fmt.Errorf("docker ps: %w", err)
		}
		if len(strings.Fields(string(ids))) == 0 {
			return nil, nil
		}
		args := append([]string{"inspect", "-f", `{{.Id}} {{.Name}} {{if index .Config.Labels "sandpit.pool"}}pooled{{else}}-{{end}} {{index .Config.Labels "sandpit.sandbox-id"}} {{.State.Status}} {{range .NetworkSettings.Networks}}{{.IPAddress}},{{end}}`}, strings.Fields(string(ids))...)
		out, err = exec.CommandContext(ctx, "docker", args...).CombinedOutput()
		if err == nil {
			break
		}
		// A container removed between ps and inspect (a warm pool replaces
		// its slots on its own): list again.
		if attempt < 5 && strings.Contains(string(out), "No such object") {
			continue
		}
		return nil, fmt.Errorf("docker inspect: %v: %s", err, out)
	}
	var cs []engineContainer
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		c := engineContainer{ID: f[0], Name: strings.TrimPrefix(f[1], "/"), Pooled: f[2] == "pooled", SandboxID: f[3], State: f[4]}
		if len(f) > 5 {
			c.IP, _, _ = strings.Cut(f[5], ",")
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// snapshot reads the daemon's debug state and then the engine's view of its
// containers.
func (d *Daemon) snapshot(ctx context.Context) (DebugState, []engineContainer, error) {
	st, err := d.State(ctx)
	if err != nil {
		return st, nil, err
	}
	engine, err := d.engineContainers(ctx)
	return st, engine, err
}

// Inconsistencies compares the store, the router's table, the bound TCP
// listeners (as the daemon reports them and as a dial finds them), the
// preview proxy and the engine's labelled containers, and returns every
// disagreement. It assumes no operation is in flight.
func (d *Daemon) Inconsistencies(ctx context.Context) ([]string, error) {
	st, engine, err := d.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	var bad []string
	badf := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }

	byBox, poolBad := attributePooled(st, engine)
	bad = append(bad, poolBad...)
	rows := map[string]string{} // id -> state
	want := map[string]string{} // route key -> upstream
	for _, sb := range st.Sandboxes {
		rows[sb.ID] = sb.State
		cs := byBox[sb.ID]
		switch {
		case sb.State == "creating" || sb.State == "deleting":
			badf("sandbox %s is stuck in %s", sb.ID, sb.State)
			continue
		case len(cs) > 1:
			badf("sandbox %s has %d containers", sb.ID, len(cs))
			continue
		case len(cs) == 0:
			// An archived sandbox's files are in its image, and its
			// container is gone on purpose.
			if sb.State != "error" && !(sb.State == "stopped" && sb.StateReason == "archived") {
				badf("sandbox %s is %s but has no container", sb.ID, sb.State)
			}
			continue
		}
		c := cs[0]
		if c.Name != sb.ContainerID {
			badf("sandbox %s runs in container %s, its row names %s", sb.ID, c.Name, sb.ContainerID)
		}
		engineState := map[string]string{"running": "running", "paused": "paused", "stopped": "exited", "starting": "running"}[sb.State]
		if sb.State == "stopped" && c.State == "created" {
			engineState = "created"
		}
		if sb.State == "paused" && sb.PauseMode == "filesystem" {
			// A filesystem pause keeps its container stopped.
			engineState = "exited"
		}
		if sb.State == "paused" && sb.PauseMode == "memory" && d.checkpointed(sb.ID) {
			// A checkpointed memory pause (runsc-ckpt) keeps its
			// processes on disk and its container stopped.
			engineState = "exited"
		}
		if sb.State != "error" && c.State != engineState {
			badf("sandbox %s is %s but its container is %s", sb.ID, sb.State, c.State)
		}
		if sb.State != "running" {
			continue
		}
		want["http:"+sb.ID+":49983"] = net.JoinHostPort(c.IP, "49983")
		for _, p := range st.Ports {
			if p.SandboxID != sb.ID {
				continue
			}
			up := net.JoinHostPort(c.IP, strconv.Itoa(p.Port))
			if p.Protocol == "tcp" {
				want["tcp:"+strconv.Itoa(p.HostPort)] = up
			} else {
				want["http:"+sb.ID+":"+strconv.Itoa(p.Port)] = up
			}
		}
		for _, dm := range st.Domains {
			if dm.SandboxID == sb.ID {
				want["domain:"+dm.Hostname] = net.JoinHostPort(c.IP, strconv.Itoa(dm.Port))
			}
		}
	}
	for id, cs := range byBox {
		if _, ok := rows[id]; !ok {
			for _, c := range cs {
				badf("container %s (sandbox %q) has no row", c.ID[:12], id)
			}
		}
	}
	got := map[string]string{}
	var tcpRoutes []int
	for _, r := range st.Routes {
		var key string
		switch r.Kind {
		case "tcp":
			key = "tcp:" + strconv.Itoa(r.HostPort)
			tcpRoutes = append(tcpRoutes, r.HostPort)
		case "domain":
			key = "domain:" + r.Hostname
		default:
			key = "http:" + r.SandboxID + ":" + strconv.Itoa(r.Port)
		}
		got[key] = r.Upstream
	}
	for k, up := range want {
		if g, ok := got[k]; !ok {
			badf("route %s missing (want upstream %s)", k, up)
		} else if g != up {
			badf("route %s points at %s, want %s", k, g, up)
		}
	}
	for k, up := range got {
		if _, ok := want[k]; !ok {
			badf("route %s -> %s should not exist", k, up)
		}
	}
	sort.Ints(tcpRoutes)
	listeners := slices.Clone(st.Listeners)
	sort.Ints(listeners)
	if !slices.Equal(tcpRoutes, listeners) {
		badf("TCP listeners %v differ from TCP routes %v", listeners, tcpRoutes)
	}
	// The listeners as a client finds them: every TCP route accepts, and
	// every recorded host port without a route refuses.
	host, _, _ := net.SplitHostPort(d.ProxyAddr)
	for _, p := range st.Ports {
		if p.Protocol != "tcp" {
			continue
		}
		routed := slices.Contains(tcpRoutes, p.HostPort)
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(p.HostPort)), time.Second)
		if err == nil {
			conn.Close()
		}
		switch {
		case routed && err != nil:
			badf("host port %d has a route but refuses connections: %v", p.HostPort, err)
		case !routed && err == nil:
			badf("host port %d of non-running sandbox %s accepts connections", p.HostPort, p.SandboxID)
		}
	}
	// The preview proxy as a client finds it: no route, no answer.
	for _, sb := range st.Sandboxes {
		if sb.State == "running" {
			continue
		}
		if code := d.previewStatus(ctx, sb.ID, 49983); code != http.StatusNotFound {
			badf("preview of %s sandbox %s answers %d, want 404", sb.State, sb.ID, code)
		}
	}
	sort.Strings(bad)
	return bad, nil
}

// attributePooled files the engine's containers under the sandbox each
// belongs to. A pooled container is its adopter's when the daemon's pool
// says a sandbox adopted its slot, and the pool's own (filed nowhere) while
// the slot is free; a pooled container without a slot, a free ready slot
// without its container and an adopted slot whose sandbox has no row are
// inconsistencies.
func attributePooled(st DebugState, engine []engineContainer) (map[string][]engineContainer, []string) {
	var bad []string
	slots := map[string]apitypes.DebugPoolSlot{}
	for _, sl := range st.PoolSlots {
		slots[sl.ID] = sl
	}
	rows := map[string]bool{}
	for _, sb := range st.Sandboxes {
		rows[sb.ID] = true
	}
	byBox := map[string][]engineContainer{}
	found := map[string]bool{}
	for _, c := range engine {
		if !c.Pooled {
			byBox[c.SandboxID] = append(byBox[c.SandboxID], c)
			continue
		}
		sl, ok := slots[c.SandboxID]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("pooled container %s (slot %q) is unknown to the pool", c.Name, c.SandboxID))
		case sl.ContainerID != c.Name:
			bad = append(bad, fmt.Sprintf("pooled container %s is not slot %s's container %s", c.Name, sl.ID, sl.ContainerID))
		case sl.SandboxID != "":
			byBox[sl.SandboxID] = append(byBox[sl.SandboxID], c)
		case sl.Ready && c.State != "running":
			bad = append(bad, fmt.Sprintf("free pooled container %s is %s", c.Name, c.State))
		}
		found[c.SandboxID] = true
	}
	for _, sl := range st.PoolSlots {
		switch {
		case sl.SandboxID == "" && sl.Ready && !found[sl.ID]:
			bad = append(bad, fmt.Sprintf("ready pool slot %s has no container", sl.ID))
		case sl.SandboxID != "" && !rows[sl.SandboxID]:
			bad = append(bad, fmt.Sprintf("pool slot %s is adopted by %s, which has no row", sl.ID, sl.SandboxID))
		}
	}
	return byBox, bad
}

// SandboxContainers lists the engine containers (ids) that hold sandbox id
// on this daemon: those labelled with the id and the pooled one it
// adopted. The daemon must be serving, since only it knows the adoptions.
func (d *Daemon) SandboxContainers(ctx context.Context, id string) ([]string, error) {
	st, engine, err := d.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	byBox, _ := attributePooled(st, engine)
	var out []string
	for _, c := range byBox[id] {
		out = append(out, c.ID)
	}
	return out, nil
}

// previewStatus is the status the proxy answers for a preview host.
func (d *Daemon) previewStatus(ctx context.Context, id string, port int) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.ProxyAddr+"/health", nil)
	if err != nil {
		return 0
	}
	req.Host = id + "-" + strconv.Itoa(port) + ".localhost"
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// checkpointed reports whether the daemon's data directory holds a complete
// checkpoint of the sandbox (internal/service/checkpoint.go).
func (d *Daemon) checkpointed(id string) bool {
	fi, err := os.Stat(filepath.Join(d.DataDir, "checkpoints", id))
	return err == nil && fi.IsDir()
}

// CheckConsistent fails the test unless the store, the router, the TCP
// listeners and the engine agree. Engine events are handled asynchronously,
// so it retries for a few seconds before it reports.
func (d *Daemon) CheckConsistent(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var bad []string
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		bad, err = d.Inconsistencies(ctx)
		if err == nil && len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("consistency check: %v", err)
	}
	t.Fatalf("store, router, listeners and engine disagree:\n  %s", strings.Join(bad, "\n  "))
}
