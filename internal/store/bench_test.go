package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// Every benchmark here commits to disk with synchronous=FULL, so the numbers
// are dominated by fsync and vary with the machine. Compare them to
// BenchmarkBaselineInsert from the same run: claim+complete is two commits per
// operation, so its fair per-commit figure is twice its ops/s.

func BenchmarkClaimComplete(b *testing.B) {
	s, _ := openStore(b)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		fp := fmt.Sprintf("fp-%d", i)
		i++
		c, err := s.ClaimIdempotentRequest(ctx, sandpit.ClaimRequest{Scope: "bench", Fingerprint: fp, PendingTTL: time.Minute}, t0)
		if err != nil || c.Outcome != sandpit.Acquired {
			b.Fatalf("claim: %+v %v", c, err)
		}
		if err := s.CompleteIdempotentRequest(ctx, sandpit.Completion{
			Scope: "bench", Fingerprint: fp, Generation: c.Generation, TargetID: fp, ReplayTTL: time.Minute,
		}, t0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "commits/s")
}

func BenchmarkReserveHostPort(b *testing.B) {
	s, _ := openStore(b)
	ctx := context.Background()
	const perSandbox = 1000
	i := 0
	for b.Loop() {
		if i%perSandbox == 0 {
			b.StopTimer()
			createSandbox(b, s, fmt.Sprintf("sb-%d", i/perSandbox), "")
			b.StartTimer()
		}
		// Fresh (sandbox, port) and host port each time; the pool is wide
		// enough that every reservation succeeds.
		res, err := s.TryReserveHostPort(ctx, sandpit.ExposedPort{
			SandboxID: fmt.Sprintf("sb-%d", i/perSandbox), Port: 1 + i%perSandbox, Protocol: "tcp",
			HostPort: 1 + i%65535, PublicURL: "tcp://127.0.0.1",
		}, t0)
		if err != nil || res.Outcome != sandpit.Reserved {
			b.Fatalf("reserve %d: %v %v", i, res.Outcome, err)
		}
		i++
		if i%65535 == 0 {
			b.Fatal("benchmark ran past the host-port range")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

func BenchmarkRetryExistingExposure(b *testing.B) {
	s, _ := openStore(b)
	ctx := context.Background()
	createSandbox(b, s, "sb-a", "")
	pool := sandpit.PortRange{Lo: 20000, Hi: 29999}
	p := sandpit.ExposedPort{SandboxID: "sb-a", Port: 8080, Protocol: "tcp"}
	if _, _, err := s.AllocateHostPort(ctx, p, pool, tcpURL, t0); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, reused, err := s.AllocateHostPort(ctx, p, pool, tcpURL, t0); err != nil || !reused {
			b.Fatalf("retry: reused=%v %v", reused, err)
		}
	}
}

// BenchmarkBaselineInsert is the floor the store is measured against: one
// single-row INSERT and its commit, on a separately opened connection set up
// exactly like the store's (one connection, WAL, synchronous=FULL, foreign
// keys, busy timeout, immediate transactions).
func BenchmarkBaselineInsert(b *testing.B) {
	path := filepath.Join(b.TempDir(), "baseline.db")
	db, err := sql.Open("sqlite", path+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(ON)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		b.Fatalf("journal_mode %q %v", mode, err)
	}
	i := 0
	for b.Loop() {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO t (id, v) VALUES (?, ?)`, i, "x"); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkPreviewTokenRevoked is the preview gate's per-request check of a
// signed URL, with 1000 revocations stored; BenchmarkGetSandboxBaseline, a
// lookup by primary key every API call makes, is its yardstick.
func BenchmarkPreviewTokenRevoked(b *testing.B) {
	s, _ := openStore(b)
	ctx := context.Background()
	createSandbox(b, s, "sb-a", "")
	for i := range 1000 {
		if err := s.RevokePreviewToken(ctx, "sb-a", fmt.Sprintf("tok-%d", i), t0.Add(time.Hour), t0); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if ok, err := s.PreviewTokenRevoked(ctx, "tok-live"); err != nil || ok {
			b.Fatalf("revoked %v, err %v", ok, err)
		}
	}
}

func BenchmarkGetSandboxBaseline(b *testing.B) {
	s, _ := openStore(b)
	ctx := context.Background()
	createSandbox(b, s, "sb-a", "")
	for b.Loop() {
		if _, err := s.GetSandbox(ctx, "sb-a"); err != nil {
			b.Fatal(err)
		}
	}
}
