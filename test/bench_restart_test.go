package sandpit_test

import (
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkRestartHealth times a daemon's restart from its process's start
// to the first /health answer, with 10 and with 1,000 sandbox rows whose
// containers are gone (every restart finds them running in the store, so
// each has the same checks to make: mark them error), side by side in one
// run. Run with -benchtime=5x. With the checks behind the API both take the
// same time; with the checks before it the time grows with the rows.
func BenchmarkRestartHealth(b *testing.B) {
	for _, rows := range []int{10, 1000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			d := harness.Start(b, sandpitBin, harness.Options{})
			ctx := context.Background()
			c := d.Client()
			sb, err := c.Create(ctx, client.CreateRequest{})
			if err != nil {
				b.Fatal(err)
			}
			d.Kill()
			if out, err := exec.Command("docker", "rm", "-f", "sandpit-"+sb.ID).CombinedOutput(); err != nil {
				b.Fatalf("docker rm: %v %s", err, out)
			}
			cloneRows(b, d, sb.ID, rows-1)
			samples := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				resetRows(b, d)
				b.StartTimer()
				d.Restart(nil)
				samples = append(samples, d.StartedIn)
				b.StopTimer()
				d.Kill()
				b.StartTimer()
			}
			b.StopTimer()
			harness.ReportPercentiles(b, "health", samples)
		})
	}
}

// cloneRows adds n copies of a stopped daemon's sandbox row, with ids,
// container ids and tokens of their own.
func cloneRows(b *testing.B, d *harness.Daemon, id string, n int) {
	db := openStore(b, d)
	defer db.Close()
	cols, err := db.Query(`SELECT name FROM pragma_table_info('sandboxes')`)
	if err != nil {
		b.Fatal(err)
	}
	var names, exprs []string
	for cols.Next() {
		var c string
		if err := cols.Scan(&c); err != nil {
			b.Fatal(err)
		}
		names = append(names, c)
		switch c {
		case "id":
			exprs = append(exprs, "?1")
		case "container_id":
			exprs = append(exprs, "'sandpit-' || ?1")
		case "access_token", "traffic_token":
			exprs = append(exprs, "lower(hex(randomblob(24)))")
		default:
			exprs = append(exprs, c)
		}
	}
	cols.Close()
	q := `INSERT INTO sandboxes (` + strings.Join(names, ", ") + `) SELECT ` + strings.Join(exprs, ", ") + ` FROM sandboxes WHERE id = ?2`
	tx, err := db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if _, err := tx.Exec(q, fmt.Sprintf("sbbench%019d", i), id); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

// resetRows makes every row of a stopped daemon running again, as a daemon
// that crashed with its sandboxes running left them.
func resetRows(b *testing.B, d *harness.Daemon) {
	db := openStore(b, d)
	defer db.Close()
	if _, err := db.Exec(`UPDATE sandboxes SET state = 'running', state_reason = ''`); err != nil {
		b.Fatal(err)
	}
}

func openStore(b *testing.B, d *harness.Daemon) *sql.DB {
	db, err := sql.Open("sqlite", filepath.Join(d.DataDir, "sandpit.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		b.Fatal(err)
	}
	return db
}
