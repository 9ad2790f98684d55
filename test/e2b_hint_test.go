package sandpit_test

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestTLSToPlainProxyIsExplained: an E2B SDK run with E2B_API_URL and
// without E2B_SANDBOX_URL reaches sandboxes at https://49983-<id>.<domain>,
// on the preview proxy, which serves plain HTTP without --tls. The SDK says
// only "fetch failed"; the daemon's log says why and what to set.
func TestTLSToPlainProxyIsExplained(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", d.ProxyAddr,
		&tls.Config{ServerName: "49983-sbexample.localhost", InsecureSkipVerify: true}) // the handshake is meant to fail
	if err == nil {
		conn.Close()
		t.Fatal("a TLS handshake with the plain-HTTP proxy succeeded")
	}
	want := "set E2B_SANDBOX_URL=http://" + d.Addr + "/e2b/envd"
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(d.Logs(), want); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon's log does not say %q", want)
		}
	}
}
