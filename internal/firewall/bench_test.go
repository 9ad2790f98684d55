package firewall_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/firewall"
)

// BenchmarkApplyRemove times what a sandbox's start and stop add: installing
// its policy chain and dispatch rule, then removing them, with the real
// iptables, beside `others` sandboxes whose rules are already in place. The
// chains hang off a bridge name no interface has, so no packet meets them;
// they are uninstalled at the end.
func BenchmarkApplyRemove(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		b.Skip("no iptables")
	}
	for _, others := range []int{0, 200} {
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			var r [4]byte
			_, _ = rand.Read(r[:])
			fw, err := firewall.New(firewall.Config{Network: "sandpit-bench-" + hex.EncodeToString(r[:]), Bridge: "spb" + hex.EncodeToString(r[:3])})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.Cleanup(func() {
				if err := fw.Uninstall(context.Background()); err != nil {
					b.Errorf("uninstall: %v", err)
				}
			})
			if err := fw.Ensure(ctx); err != nil {
				b.Fatal(err)
			}
			policy := firewall.Policy{Egress: firewall.EgressNone, Allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}
			for i := range others {
				ip := netip.AddrFrom4([4]byte{10, 99, byte(i / 250), byte(1 + i%250)})
				if err := fw.Apply(ctx, fmt.Sprintf("other%d", i), ip, policy); err != nil {
					b.Fatal(err)
				}
			}
			ip := netip.MustParseAddr("10.98.0.2")
			b.ResetTimer()
			for range b.N {
				if err := fw.Apply(ctx, "bench", ip, policy); err != nil {
					b.Fatal(err)
				}
				if err := fw.Remove(ctx, "bench"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
