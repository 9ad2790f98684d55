package firewall

import (
	"context"
	"strings"
	"testing"
)

// Without ip6tables the daemon refuses to start while the bridge has IPv6
// (sandboxes would reach the host over link-local IPv6 unfiltered), and
// starts, saying so, when it has none.
func TestEnsureWithoutIP6tables(t *testing.T) {
	run := func(_ context.Context, _ []byte, name string, args ...string) ([]byte, error) {
		if strings.HasPrefix(name, "ip6tables") {
			t.Errorf("ran %s without ip6tables", name)
		}
		return nil, nil
	}
	for _, enabled := range []bool{true, false} {
		f, err := NewWithRunner(Config{Network: "n", Bridge: "br0"}, run)
		if err != nil {
			t.Fatal(err)
		}
		f.ipv6 = false
		f.bridgeIPv6 = func(string) bool { return enabled }
		err = f.Ensure(context.Background())
		switch {
		case enabled && (err == nil || !strings.Contains(err.Error(), "ip6tables-restore not found and IPv6 is enabled")):
			t.Errorf("IPv6 on the bridge: Ensure = %v, want a refusal naming ip6tables", err)
		case !enabled && err != nil:
			t.Errorf("IPv6 off on the bridge: Ensure = %v", err)
		}
	}
}
