package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// listAll lists every sandbox in the node's own store.
func listAll(ctx context.Context, n *node) ([]client.Sandbox, error) {
	var out []client.Sandbox
	token := ""
	for {
		page, next, err := n.Client().List(ctx, client.ListOptions{Limit: 100, PageToken: token})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if next == "" {
			return out, nil
		}
		token = next
	}
}

// nameOp is one reservation or release of a name, as a client saw it: from
// its first send to the answer it kept, across all its retries.
type nameOp struct {
	name    string
	release bool   // a delete of the sandbox that held the name
	id      string // the sandbox made (reserve ok) or deleted (release)
	ok      bool   // reserve: 201; release: always
	call    int64
	ret     int64
	client  int
	// trail is each attempt's node and answer, for the failure's log.
	trail []string
}

// nameModel is a register per name: "" when free, else the id holding it. A
// reservation succeeds only on a free name and fails only on a held one; a
// release frees the name its sandbox held.
var nameModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			n := op.Input.(nameOp).name
			by[n] = append(by[n], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		held := state.(string)
		in := input.(nameOp)
		if in.release {
			return held == in.id, ""
		}
		if in.ok {
			return held == "", in.id
		}
		return held != "", held
	},
	DescribeOperation: func(input, output any) string {
		in := input.(nameOp)
		switch {
		case in.release:
			return "release " + in.name + " " + in.id
		case in.ok:
			return "reserve " + in.name + " -> " + in.id
		}
		return "reserve " + in.name + " -> conflict"
	},
}

// TestClusterLeaderKilledDuringStorm storms the cluster with named, keyed
// creates (and deletes of what they made, but for a quarter kept) whose clients retry any error with
// the same key on the next node; a third of the way in the leader is
// SIGKILLed, two thirds in it is restarted. Afterwards no name or key has
// two sandboxes, every sandbox a client was told of exists, no container is
// orphaned, the three digests agree and the names' history is linearizable.
func TestClusterLeaderKilledDuringStorm(t *testing.T) {
	dur := 60 * time.Second
	if v := os.Getenv("SANDPIT_CLUSTER_STORM"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		dur = d
	}
	c := startCluster(t)
	var leader *node
	for _, n := range c.nodes {
		if role(n) == "Leader" {
			leader = n
		}
	}
	if leader == nil {
		t.Fatal("no leader")
	}

	const workers = 6
	names := make([]string, 16)
	for i := range names {
		names[i] = fmt.Sprintf("storm-%d", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur+4*time.Minute)
	defer cancel()
	begin := time.Now()
	stopAt := begin.Add(dur)

	var (
		mu       sync.Mutex
		history  []porcupine.Operation
		made     = map[string]string{} // id -> name, of sandboxes clients were told of and did not delete
		killedAt time.Time
		healedAt time.Time // first fresh Raft-backed answer after the kill
		counts   = map[string]int{}
	)
	record := func(op nameOp) {
		mu.Lock()
		defer mu.Unlock()
		history = append(history, porcupine.Operation{ClientId: op.client, Input: op, Call: op.call, Output: op, Return: op.ret})
	}
	// send retries one request across the nodes until done says stop.
	send := func(w int, method, path, body, key string, trail *[]string, done func(harness.Answer) bool) harness.Answer {
		for attempt := 0; ctx.Err() == nil; attempt++ {
			n := c.nodes[(w+attempt)%len(c.nodes)]
			sent := time.Now()
			actx, acancel := context.WithTimeout(ctx, 45*time.Second)
			a := call(actx, n, method, path, body, map[string]string{"Idempotency-Key": key})
			acancel()
			mu.Lock()
			at := time.Since(begin).Round(time.Millisecond)
			switch {
			case a.Err != nil:
				counts["transport error"]++
				*trail = append(*trail, fmt.Sprintf("%s@%s:transport", n.name, at))
			default:
				counts[fmt.Sprintf("%d %s", a.Status, a.Code())]++
				*trail = append(*trail, fmt.Sprintf("%s@%s:%d%s%s", n.name, at, a.Status, map[bool]string{true: "(replayed)"}[a.Replayed], a.ID()))
				// A reservation answered afresh (not replayed) went through
				// the Raft log: the first one sent after the kill tells how
				// long clients saw the cluster without a leader.
				if !killedAt.IsZero() && sent.After(killedAt) && healedAt.IsZero() && !a.Replayed && (a.Status == 201 || a.Code() == "name_conflict") {
					healedAt = time.Now()
				}
			}
			mu.Unlock()
			if a.Err == nil && done(a) {
				return a
			}
			time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond)
		}
		return harness.Answer{Err: ctx.Err()}
	}

	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stopAt); i++ {
				// Three in four creates contend for a small pool of names and
				// release them again; one in four takes a name of its own
				// and keeps it, for the check that what clients were told
				// of exists afterwards.
				keep := rand.IntN(4) == 0
				name := names[rand.IntN(len(names))]
				if keep {
					name = fmt.Sprintf("kept-w%d-%d", w, i)
				}
				key := fmt.Sprintf("storm-w%d-%d", w, i)
				op := nameOp{name: name, client: w, call: time.Now().UnixNano()}
				a := send(w, http.MethodPost, "/v1/sandboxes", fmt.Sprintf(`{"name":%q}`, name), key, &op.trail, func(a harness.Answer) bool {
					return a.Status == 201 || a.Code() == "name_conflict"
				})
				op.ret = time.Now().UnixNano()
				if a.Err != nil {
					t.Errorf("reserve %s never answered: %v", name, a.Err)
					return
				}
				op.ok, op.id = a.Status == 201, a.ID()
				record(op)
				if !op.ok {
					continue
				}
				if keep {
					mu.Lock()
					made[op.id] = name
					mu.Unlock()
					continue
				}
				rel := nameOp{name: name, release: true, id: op.id, client: w, call: time.Now().UnixNano()}
				a = send(w, http.MethodDelete, "/v1/sandboxes/"+op.id, "", key+"-delete", &rel.trail, func(a harness.Answer) bool {
					return a.Status == 204 || a.Status == 200 || a.Status == 404
				})
				rel.ret = time.Now().UnixNano()
				if a.Err != nil {
					t.Errorf("release %s never answered: %v", op.id, a.Err)
					return
				}
				rel.ok = true
				record(rel)
			}
		}()
	}

	time.Sleep(dur / 3)
	mu.Lock()
	killedAt = time.Now()
	mu.Unlock()
	leader.Kill()
	t.Logf("killed leader %s at %s", leader.name, killedAt.Sub(begin).Round(time.Millisecond))
	time.Sleep(time.Until(begin.Add(2 * dur / 3)))
	leader.Restart(nil)
	t.Logf("restarted %s at %s", leader.name, time.Since(begin).Round(time.Millisecond))
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	c.waitFormed(60 * time.Second)
	digest := c.digests(30 * time.Second)

	mu.Lock()
	defer mu.Unlock()
	reserves, oks := 0, 0
	for _, h := range history {
		if op := h.Input.(nameOp); !op.release {
			reserves++
			if op.ok {
				oks++
			}
		}
	}
	election := time.Duration(0)
	if !healedAt.IsZero() {
		election = healedAt.Sub(killedAt)
	}
	t.Logf("storm %s: %d reservations (%d made a sandbox), %d operations; answers seen: %v", dur, reserves, oks, len(history), counts)
	t.Logf("election seen by clients: the first reservation sent after the kill was answered %s after it", election.Round(time.Millisecond))

	// What exists: the cluster-wide listing, the same through every node,
	// and one container for each sandbox across the three daemons.
	byName := map[string][]string{}
	exists := map[string]bool{}
	var listed []int
	for _, n := range c.nodes {
		sbs, err := listAll(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, len(sbs))
		if n != c.nodes[0] {
			continue
		}
		for _, sb := range sbs {
			exists[sb.ID] = true
			if sb.Name != "" {
				byName[sb.Name] = append(byName[sb.Name], sb.ID)
			}
		}
	}
	if listed[0] != listed[1] || listed[1] != listed[2] {
		t.Errorf("the nodes list %v sandboxes", listed)
	}
	containers := 0
	for _, n := range c.nodes {
		containers += len(n.Containers(t))
	}
	if containers != len(exists) {
		t.Errorf("%d containers for %d sandboxes", containers, len(exists))
	}
	for name, ids := range byName {
		if len(ids) > 1 {
			t.Errorf("name %s has %d sandboxes: %v", name, len(ids), ids)
		}
	}
	for id, name := range made {
		if !exists[id] {
			t.Errorf("sandbox %s (%s), answered 201, does not exist", id, name)
		}
	}
	// Every sandbox that exists is one a client was told of: none was made
	// twice for one key, none is left over from an interrupted attempt.
	for id := range exists {
		if _, ok := made[id]; !ok {
			t.Errorf("sandbox %s exists but no client was told of it", id)
		}
	}
	st, err := c.nodes[0].Client().ClusterStatus(ctx)
	if err != nil || st.Placements != len(exists) {
		t.Errorf("index holds %d placements for %d sandboxes (%v)", st.Placements, len(exists), err)
	}
	t.Logf("after the storm: %d sandboxes, digest %s on all three nodes", len(exists), digest[:12])

	res, info := porcupine.CheckOperationsVerbose(nameModel, history, time.Minute)
	if res != porcupine.Ok {
		path := t.TempDir() + "/names.html"
		if f, err := os.Create(path); err == nil {
			_ = porcupine.Visualize(nameModel, info, f)
			f.Close()
		}
		logIllegalNames(t, history, begin)
		t.Fatalf("the names' history is not linearizable (%v); visualization in %s", res, path)
	}
}

// logIllegalNames logs, for each name whose own history is not
// linearizable, its operations in the order they were sent, with times
// from the storm's start: the visualization's file is gone with the test's
// temporary directory, and CI keeps only the log.
func logIllegalNames(t *testing.T, history []porcupine.Operation, begin time.Time) {
	t.Helper()
	by := map[string][]porcupine.Operation{}
	for _, op := range history {
		n := op.Input.(nameOp).name
		by[n] = append(by[n], op)
	}
	at := func(ns int64) time.Duration { return time.Duration(ns - begin.UnixNano()).Round(time.Millisecond) }
	for name, ops := range by {
		if porcupine.CheckOperations(nameModel, ops) {
			continue
		}
		sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
		t.Logf("name %s is not linearizable; its %d operations:", name, len(ops))
		for _, op := range ops {
			t.Logf("  client %d  %9s .. %9s  %s  [%s]", op.ClientId, at(op.Call), at(op.Return), nameModel.DescribeOperation(op.Input, op.Output), strings.Join(op.Input.(nameOp).trail, " "))
		}
	}
}
