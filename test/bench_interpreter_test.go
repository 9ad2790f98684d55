package sandpit_test

import (
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkInterpreter times what a code-interpreter user waits for: a
// create of the code-interpreter-v1 template until the result of its first
// runCode('1+1'), cold (no pool) and from the warm pool (refilled between
// creates, outside the timed section), and then the round trip of one more
// runCode('1+1') on the same kernel. The baseline, in the same run, is a
// cold create of the base template with one exec of `true`: the difference
// is what the kernel's start costs. Needs the image
// (scripts/build-code-interpreter-image.sh):
//
//	go test -run '^$' -bench Interpreter -benchtime 20x ./test/
func BenchmarkInterpreter(b *testing.B) {
	if err := exec.Command("docker", "image", "inspect", "sandpit/code-interpreter:latest").Run(); err != nil {
		b.Skip("sandpit/code-interpreter:latest is not built (scripts/build-code-interpreter-image.sh)")
	}
	for _, mode := range []struct {
		name     string
		template string
		args     []string
	}{
		{"base-cold", "base", nil},
		{"cold", "code-interpreter-v1", nil},
		{"warm", "code-interpreter-v1", []string{"--warm-pool", "code-interpreter-v1=2"}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			d := harness.Start(b, sandpitBin, harness.Options{Args: mode.args})
			c := d.Client()
			warm := mode.args != nil
			first := make([]time.Duration, 0, b.N)
			again := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if warm {
					awaitPool(b, d, 1, 120*time.Second)
				}
				b.StartTimer()
				start := time.Now()
				sb, err := c.Create(b.Context(), apitypes.CreateRequest{Template: mode.template, Labels: map[string]string{"bench": "interpreter", "i": strconv.Itoa(i)}})
				if err != nil {
					b.Fatal(err)
				}
				if mode.template == "base" {
					if _, err := c.Exec(b.Context(), sb.ID, apitypes.ExecRequest{Cmd: "true"}); err != nil {
						b.Fatal(err)
					}
					first = append(first, time.Since(start))
				} else {
					ex, err := c.RunCode(b.Context(), sb.ID, client.CodeRequest{Code: "1+1"}, nil)
					if err != nil || ex.Text() != "2" {
						b.Fatalf("first runCode: %+v, %v", ex, err)
					}
					first = append(first, time.Since(start))
					t0 := time.Now()
					ex, err = c.RunCode(b.Context(), sb.ID, client.CodeRequest{Code: "1+1"}, nil)
					if err != nil || ex.Text() != "2" {
						b.Fatalf("second runCode: %+v, %v", ex, err)
					}
					again = append(again, time.Since(t0))
				}
				b.StopTimer()
				_ = c.Delete(b.Context(), sb.ID)
				b.StartTimer()
			}
			b.StopTimer()
			harness.ReportPercentiles(b, "first-result", first)
			harness.ReportPercentiles(b, "round-trip", again)
		})
	}
}
