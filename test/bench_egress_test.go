package sandpit_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkEgressByName measures, in one run, HTTPS requests from a sandbox
// to a host of the test's internet two ways:
//
//   - direct: a sandbox with no rules on names, whose connections go
//     straight out through the host (the baseline);
//   - egress: a sandbox allowed only that host's name, whose connections
//     the firewall hands to the egress proxy, which reads the SNI, checks
//     the name and the address, and splices;
//   - intercept: the same with a rule on that host setting a header from
//     a secret, so the proxy terminates TLS with the daemon's CA, fills the
//     header, and makes its own TLS connection to the host.
//
// Each op is one round of 50 requests per side per mode, made by the probe
// inside the sandbox (so exec and the API are not in the figures): on fresh
// connections (TCP and TLS setup, and the proxy's decision, in every
// request) and on one kept-alive connection (the splice alone). It reports
// the median over the rounds of each round's median, and the egress/direct
// ratios; the difference of the fresh medians is the connection setup cost.
func BenchmarkEgressByName(b *testing.B) {
	bt := testing.TB(b)
	ti := newTestInternet(bt)
	caFile := filepath.Join(b.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ti.caPEM, 0o644); err != nil {
		b.Fatal(err)
	}
	d := harness.Start(bt, sandpitBin, harness.Options{Args: []string{"--egress-resolver", ti.dnsURL, "--egress-ca", caFile}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := d.Client()
	if _, err := c.CreateSecret(ctx, "bench-key", "bench-value"); err != nil {
		b.Fatal(err)
	}
	direct, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	egress, err := c.Create(ctx, client.CreateRequest{Network: &client.Network{Egress: "none", AllowDomains: []string{"allowed.test"}}})
	if err != nil {
		b.Fatal(err)
	}
	intercept, err := c.Create(ctx, client.CreateRequest{Network: &client.Network{Egress: "none", AllowDomains: []string{"allowed.test"},
		Rules: map[string][]client.NetworkRule{"allowed.test": withHeader("Authorization", "Bearer {{secret:bench-key}}")}}})
	if err != nil {
		b.Fatal(err)
	}
	for _, id := range []string{direct.ID, egress.ID, intercept.ID} {
		installProbe(bt, ctx, c, id, ti)
	}
	round := func(id string) (fresh, kept float64) {
		ok, out := egressRun(bt, ctx, c, id, "bench", ti.fn.internet, "allowed.test", "50")
		f := strings.Fields(out)
		if !ok || len(f) != 3 {
			b.Fatalf("bench in %s: %q", id, out)
		}
		fr, _ := strconv.ParseFloat(f[1], 64)
		ka, _ := strconv.ParseFloat(f[2], 64)
		return fr, ka
	}
	var dfs, dks, efs, eks, ifs, iks []float64
	b.ResetTimer()
	for range b.N {
		f, k := round(direct.ID)
		dfs, dks = append(dfs, f), append(dks, k)
		f, k = round(egress.ID)
		efs, eks = append(efs, f), append(eks, k)
		f, k = round(intercept.ID)
		ifs, iks = append(ifs, f), append(iks, k)
	}
	b.StopTimer()
	med := func(xs []float64) float64 {
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	df, dk, ef, ek, inf, ik := med(dfs), med(dks), med(efs), med(eks), med(ifs), med(iks)
	b.ReportMetric(df, "direct-fresh-p50-µs")
	b.ReportMetric(ef, "egress-fresh-p50-µs")
	b.ReportMetric(ef/df, "fresh-egress/direct")
	b.ReportMetric(ef-df, "setup-cost-µs")
	b.ReportMetric(dk, "direct-keepalive-p50-µs")
	b.ReportMetric(ek, "egress-keepalive-p50-µs")
	b.ReportMetric(ek/dk, "keepalive-egress/direct")
	b.ReportMetric(inf, "intercept-fresh-p50-µs")
	b.ReportMetric(ik, "intercept-keepalive-p50-µs")
	b.ReportMetric(inf/ef, "fresh-intercept/passthrough")
	b.ReportMetric(ik/ek, "keepalive-intercept/passthrough")
	if got, ok := lastHeader(ti, "allowed.test", true, "Authorization"); !ok || got != "Bearer bench-value" {
		b.Fatalf("the intercepted requests arrived with Authorization %q", got)
	}
}
