package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

func tcpURL(hostPort int) string { return fmt.Sprintf("tcp://127.0.0.1:%d", hostPort) }

func TestTryReserveHostPortOutcomes(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	createSandbox(t, s, "sb-a", "")
	createSandbox(t, s, "sb-b", "")

	steps := []struct {
		name     string
		p        sandpit.ExposedPort
		want     sandpit.ReserveOutcome
		wantHost int
	}{
		{"first reservation", sandpit.ExposedPort{SandboxID: "sb-a", Port: 8080, Protocol: "tcp", HostPort: 22000, PublicURL: tcpURL(22000)}, sandpit.Reserved, 22000},
		{"retry, same candidate", sandpit.ExposedPort{SandboxID: "sb-a", Port: 8080, Protocol: "tcp", HostPort: 22000, PublicURL: tcpURL(22000)}, sandpit.Existing, 22000},
		{"retry, other candidate", sandpit.ExposedPort{SandboxID: "sb-a", Port: 8080, Protocol: "tcp", HostPort: 22001, PublicURL: tcpURL(22001)}, sandpit.Existing, 22000},
		{"other sandbox, same host port", sandpit.ExposedPort{SandboxID: "sb-b", Port: 8080, Protocol: "tcp", HostPort: 22000}, sandpit.Taken, 0},
		{"same sandbox, other port, same host port", sandpit.ExposedPort{SandboxID: "sb-a", Port: 9090, Protocol: "tcp", HostPort: 22000}, sandpit.Taken, 0},
		{"http exposure, no host port", sandpit.ExposedPort{SandboxID: "sb-a", Port: 3000, Protocol: "http"}, sandpit.Reserved, 0},
		{"http retry", sandpit.ExposedPort{SandboxID: "sb-a", Port: 3000, Protocol: "http"}, sandpit.Existing, 0},
		{"host port 0 repeats across sandboxes", sandpit.ExposedPort{SandboxID: "sb-b", Port: 3000, Protocol: "http"}, sandpit.Reserved, 0},
	}
	for _, st := range steps {
		res, err := s.TryReserveHostPort(ctx, st.p, t0)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if res.Outcome != st.want {
			t.Fatalf("%s: outcome %v, want %v", st.name, res.Outcome, st.want)
		}
		if st.want != sandpit.Taken && (res.Row.SandboxID != st.p.SandboxID || res.Row.Port != st.p.Port || res.Row.HostPort != st.wantHost) {
			t.Errorf("%s: row %+v, want host port %d", st.name, res.Row, st.wantHost)
		}
		if st.want == sandpit.Taken && res.Row != (sandpit.ExposedPort{}) {
			t.Errorf("%s: sandpit.Taken carries a row %+v", st.name, res.Row)
		}
	}
	if res, _ := s.TryReserveHostPort(ctx, steps[0].p, t0); res.Row.PublicURL != tcpURL(22000) || !res.Row.CreatedAt.Equal(t0) {
		t.Errorf("existing row not returned verbatim: %+v", res.Row)
	}

	// Bad input is an error, never a silent Taken.
	for _, p := range []sandpit.ExposedPort{
		{SandboxID: "sb-a", Port: 0, HostPort: 22005},
		{SandboxID: "sb-a", Port: 70000, HostPort: 22005},
		{SandboxID: "sb-a", Port: 1, HostPort: -1},
		{SandboxID: "", Port: 1, HostPort: 22005},
	} {
		if res, err := s.TryReserveHostPort(ctx, p, t0); err == nil {
			t.Errorf("%+v: accepted, outcome %v", p, res.Outcome)
		}
	}
	// An unknown sandbox fails the foreign key, which OR IGNORE does not hide.
	if _, err := s.TryReserveHostPort(ctx, sandpit.ExposedPort{SandboxID: "ghost", Port: 1, HostPort: 22009}, t0); !errors.Is(err, sandpit.ErrNotFound) {
		t.Errorf("unknown sandbox: got %v, want sandpit.ErrNotFound", err)
	}
}

func TestTryReserveHostPortTwoSandboxesRace(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	createSandbox(t, s, "sb-a", "")
	createSandbox(t, s, "sb-b", "")
	for round := range 50 {
		host := 22000 + round
		var results [2]sandpit.ReserveResult
		var errs [2]error
		parallel(2, func(i int) {
			results[i], errs[i] = s.TryReserveHostPort(ctx, sandpit.ExposedPort{
				SandboxID: []string{"sb-a", "sb-b"}[i], Port: 1000 + round, Protocol: "tcp", HostPort: host,
			}, t0)
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		reserved, taken := 0, 0
		for _, r := range results {
			switch r.Outcome {
			case sandpit.Reserved:
				reserved++
			case sandpit.Taken:
				taken++
			}
		}
		if reserved != 1 || taken != 1 {
			t.Fatalf("round %d: outcomes %v %v, want one sandpit.Reserved and one sandpit.Taken", round, results[0].Outcome, results[1].Outcome)
		}
	}
	if n, _ := s.CountHostPortsInRange(ctx, sandpit.PortRange{Lo: 22000, Hi: 22049}); n != 50 {
		t.Errorf("bound host ports = %d, want 50", n)
	}
}

func TestAllocateHostPortSameExposureConcurrently(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	createSandbox(t, s, "sb-a", "")
	pool := sandpit.PortRange{Lo: 22000, Hi: 22999}
	rows := make([]sandpit.ExposedPort, 64)
	reused := make([]bool, 64)
	errs := make([]error, 64)
	parallel(64, func(i int) {
		rows[i], reused[i], errs[i] = s.AllocateHostPort(ctx,
			sandpit.ExposedPort{SandboxID: "sb-a", Port: 8080, Protocol: "tcp"}, pool, tcpURL, t0)
	})
	fresh := 0
	for i := range 64 {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if !reused[i] {
			fresh++
		}
		if rows[i] != rows[0] {
			t.Errorf("caller %d got %+v, caller 0 got %+v", i, rows[i], rows[0])
		}
	}
	if fresh != 1 {
		t.Fatalf("%d callers got reused=false, want exactly 1", fresh)
	}
	if rows[0].HostPort < pool.Lo || rows[0].HostPort > pool.Hi || rows[0].PublicURL != tcpURL(rows[0].HostPort) {
		t.Errorf("row %+v is outside the pool or has the wrong URL", rows[0])
	}
	if n, _ := s.CountHostPortsInRange(ctx, pool); n != 1 {
		t.Errorf("bound host ports = %d, want 1", n)
	}
}

func TestAllocateHostPortSinglePortPool(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	createSandbox(t, s, "sb-a", "")
	createSandbox(t, s, "sb-b", "")
	pool := sandpit.PortRange{Lo: 22000, Hi: 22000}
	exposure := sandpit.ExposedPort{SandboxID: "sb-a", Port: 8080, Protocol: "tcp"}

	var candidates atomic.Int64
	counting := func(hp int) string { candidates.Add(1); return tcpURL(hp) }

	first, reused, err := s.AllocateHostPort(ctx, exposure, pool, counting, t0)
	if err != nil || reused || first.HostPort != 22000 {
		t.Fatalf("first allocation: %+v reused=%v err=%v", first, reused, err)
	}
	for i := range 1000 {
		candidates.Store(0)
		row, reused, err := s.AllocateHostPort(ctx, exposure, pool, counting, t0)
		if err != nil {
			t.Fatalf("retry %d: %v", i, err)
		}
		if !reused || row != first {
			t.Fatalf("retry %d: %+v reused=%v, want %+v reused=true", i, row, reused, first)
		}
		if n := candidates.Load(); n != 1 {
			t.Fatalf("retry %d tried %d candidates; a retry must stop at the first", i, n)
		}
	}

	other := sandpit.ExposedPort{SandboxID: "sb-b", Port: 8080, Protocol: "tcp"}
	_, _, err = s.AllocateHostPort(ctx, other, pool, tcpURL, t0)
	if !errors.Is(err, sandpit.ErrPortPoolExhausted) {
		t.Fatalf("second sandbox: got %v, want sandpit.ErrPortPoolExhausted", err)
	}

	// Deleting the owner cascades to its exposures and frees the port.
	if err := s.DeleteSandbox(ctx, "sb-a"); err != nil {
		t.Fatal(err)
	}
	if ports, _ := s.ListPorts(ctx, "sb-a"); len(ports) != 0 {
		t.Fatalf("ports survived their sandbox: %+v", ports)
	}
	row, reused, err := s.AllocateHostPort(ctx, other, pool, tcpURL, t0)
	if err != nil || reused || row.HostPort != 22000 {
		t.Fatalf("after the cascade: %+v reused=%v err=%v", row, reused, err)
	}
}

func TestAllocateHostPortFillsPool(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	pool := sandpit.PortRange{Lo: 22000, Hi: 22007}
	n := pool.Size()
	for i := range n + 1 {
		createSandbox(t, s, fmt.Sprintf("sb-%d", i), "")
	}
	rows := make([]sandpit.ExposedPort, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		rows[i], _, errs[i] = s.AllocateHostPort(ctx, sandpit.ExposedPort{SandboxID: fmt.Sprintf("sb-%d", i), Port: 80, Protocol: "tcp"}, pool, tcpURL, t0)
	})
	seen := map[int]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("sandbox %d: %v", i, errs[i])
		}
		if seen[rows[i].HostPort] {
			t.Fatalf("host port %d handed out twice", rows[i].HostPort)
		}
		seen[rows[i].HostPort] = true
	}
	_, _, err := s.AllocateHostPort(ctx, sandpit.ExposedPort{SandboxID: fmt.Sprintf("sb-%d", n), Port: 80}, pool, tcpURL, t0)
	if !errors.Is(err, sandpit.ErrPortPoolExhausted) {
		t.Fatalf("full pool: got %v, want sandpit.ErrPortPoolExhausted", err)
	}
	for _, bad := range []sandpit.PortRange{{Lo: 0, Hi: 10}, {Lo: 10, Hi: 9}, {Lo: 1, Hi: 70000}} {
		if _, _, err := s.AllocateHostPort(ctx, sandpit.ExposedPort{SandboxID: "sb-0", Port: 81}, bad, nil, t0); err == nil || errors.Is(err, sandpit.ErrPortPoolExhausted) {
			t.Errorf("range %+v: got %v, want an invalid-range error", bad, err)
		}
	}
}

func TestPortQueries(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	createSandbox(t, s, "sb-a", "")
	createSandbox(t, s, "sb-b", "")
	for _, p := range []sandpit.ExposedPort{
		{SandboxID: "sb-b", Port: 22, Protocol: "tcp", HostPort: 22002},
		{SandboxID: "sb-a", Port: 443, Protocol: "tcp", HostPort: 22001},
		{SandboxID: "sb-a", Port: 80, Protocol: "http"},
	} {
		if res, err := s.TryReserveHostPort(ctx, p, t0); err != nil || res.Outcome != sandpit.Reserved {
			t.Fatalf("%+v: %v %v", p, res.Outcome, err)
		}
	}
	got, err := s.GetPort(ctx, "sb-a", 443)
	if err != nil || got.HostPort != 22001 {
		t.Fatalf("GetPort: %+v %v", got, err)
	}
	if _, err := s.GetPort(ctx, "sb-a", 1); !errors.Is(err, sandpit.ErrNotFound) {
		t.Errorf("GetPort missing: %v", err)
	}
	a, _ := s.ListPorts(ctx, "sb-a")
	if len(a) != 2 || a[0].Port != 80 || a[1].Port != 443 {
		t.Errorf("ListPorts(sb-a) = %+v", a)
	}
	all, _ := s.ListAllPorts(ctx)
	if len(all) != 3 || all[2].SandboxID != "sb-b" {
		t.Errorf("ListAllPorts = %+v", all)
	}
	if n, _ := s.CountHostPortsInRange(ctx, sandpit.PortRange{Lo: 22000, Hi: 22001}); n != 1 {
		t.Errorf("CountHostPortsInRange = %d, want 1", n)
	}
	if err := s.DeletePort(ctx, "sb-a", 443); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePort(ctx, "sb-a", 443); !errors.Is(err, sandpit.ErrNotFound) {
		t.Errorf("second DeletePort: %v", err)
	}
	// The freed host port is available to another exposure.
	if res, err := s.TryReserveHostPort(ctx, sandpit.ExposedPort{SandboxID: "sb-b", Port: 443, HostPort: 22001}, t0); err != nil || res.Outcome != sandpit.Reserved {
		t.Errorf("reusing a deleted exposure's host port: %v %v", res.Outcome, err)
	}
}
