package httpguard_test

import (
	"net"
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
	dial := func(src string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var first []net.Conn
	for range 2 {
		dial("127.0.0.1")
		first = append(first, <-accepted)
	}
	over := dial("127.0.0.1")
	_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err == nil {
		t.Fatal("a third connection from one source was served")
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
