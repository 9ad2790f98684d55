package httpguard_test

import (
	"net"
	"net/http"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// emfileListener fails its first n Accepts as a process out of
// descriptors does (a fault a real listener cannot be made to produce on
// demand), then accepts from the real listener under it.
type emfileListener struct {
	net.Listener
	n int
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.n > 0 {
		l.n--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestLimitListenerOutlivesEMFILE: running out of descriptors is waited
// out; the next connection is accepted.
func TestLimitListenerOutlivesEMFILE(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l := httpguard.LimitListener(&emfileListener{Listener: ln, n: 5}, "test", httpguard.ConnLimits{}, nil)
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			time.Sleep(time.Second)
			c.Close()
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept after EMFILE: %v", err)
	}
	c.Close()
}

// TestLimitListenerPerSource: a source past its share has its next
// connection closed at once; another source is accepted; a closed
// connection gives its place back.
func TestLimitListenerPerSource(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := httpguard.LimitListener(ln, "test", httpguard.ConnLimits{PerSource: 2, Total: 10}, nil)
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	// A refused connection may be reset before the dial returns.
	dial := func(src string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			return nil
		}
		return c
	}
	var first []net.Conn
	for range 2 {
		dial("127.0.0.1")
		first = append(first, <-accepted)
	}
	if over := dial("127.0.0.1"); over != nil {
		_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := over.Read(make([]byte, 1)); err == nil {
			t.Fatal("a third connection from one source was served")
		}
	}
	// The refusal is counted once the listener has seen it.
	for deadline := time.Now().Add(5 * time.Second); l.Refused() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	dial("127.0.0.2")
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("another source's connection was not accepted")
	}
	first[0].Close()
	dial("127.0.0.1")
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("a place given back was not reused")
	}
	if l.Refused() != 1 {
		t.Fatalf("refused %d, want 1", l.Refused())
	}
}

// TestLimitListenerFullMakesRoom: a listener full of connections that carry
// no request (many sources' idle flood) closes the oldest of them for a
// newcomer; one whose connections carry requests refuses the newcomer.
func TestLimitListenerFullMakesRoom(t *testing.T) {
	for _, tc := range []struct {
		state  http.ConnState
		admits bool
	}{{http.StateNew, true}, {http.StateIdle, true}, {http.StateActive, false}} {
		t.Run(tc.state.String(), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			l := httpguard.LimitListener(ln, "test", httpguard.ConnLimits{Total: 2}, nil)
			defer l.Close()
			accepted := make(chan net.Conn, 10)
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					accepted <- c
				}
			}()
			// A refused connection may be reset before the dial returns.
			dial := func(src string) {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
				if c, err := d.Dial("tcp", ln.Addr().String()); err == nil {
					t.Cleanup(func() { c.Close() })
				}
			}
			for _, src := range []string{"127.0.0.3", "127.0.0.4"} {
				dial(src)
				l.ConnState(<-accepted, tc.state)
			}
			dial("127.0.0.2")
			select {
			case <-accepted:
				if !tc.admits {
					t.Fatal("a full listener of active connections took another")
				}
				if total, _ := l.Open(netip.Addr{}); total != 2 {
					t.Fatalf("%d connections held, want 2", total)
				}
			case <-time.After(2 * time.Second):
				if tc.admits {
					t.Fatal("a full listener of connections without requests refused a newcomer")
				}
			}
		})
	}
}
