package cluster

import (
	"log"
	"log/slog"
	"net"
	"sync"

	"github.com/hashicorp/memberlist"

	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// cappedTransport is memberlist's own TCP and UDP transport with its stream
// connections held to httpguard's limits. memberlist accepts anyone's TCP on
// the gossip port and reads it before the keyring tells a node from a
// stranger, so without a bound a flood of idle connections there takes the
// daemon's descriptors, as it did on the other ports. Packets (UDP) hold no
// descriptor and pass as they are.
type cappedTransport struct {
	*memberlist.NetTransport
	in      *streamListener
	limited *httpguard.LimitedListener
	streams chan net.Conn
}

var _ memberlist.NodeAwareTransport = (*cappedTransport)(nil)

func newCappedTransport(host string, port int, lim httpguard.ConnLimits, logger *log.Logger, slogger *slog.Logger) (*cappedTransport, error) {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: logger})
	if err != nil {
		return nil, err
	}
	in := &streamListener{conns: nt.StreamCh(), addr: &net.TCPAddr{IP: net.ParseIP(host), Port: nt.GetAutoBindPort()}, done: make(chan struct{})}
	t := &cappedTransport{NetTransport: nt, in: in, limited: httpguard.LimitListener(in, "gossip port", lim, slogger), streams: make(chan net.Conn)}
	go t.pass()
	return t, nil
}

// pass hands memberlist the connections the limits admit, until Shutdown.
func (t *cappedTransport) pass() {
	for {
		c, err := t.limited.Accept()
		if err != nil {
			return
		}
		select {
		case t.streams <- c:
		case <-t.in.done:
			c.Close()
			return
		}
	}
}

// StreamCh is where memberlist takes its incoming stream connections from.
func (t *cappedTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown closes the listeners and stops passing connections on.
func (t *cappedTransport) Shutdown() error {
	t.in.Close()
	return t.NetTransport.Shutdown()
}

// streamListener presents memberlist's stream channel as a net.Listener, so
// that httpguard's listener limits apply to it unchanged.
type streamListener struct {
	conns <-chan net.Conn
	addr  net.Addr
	once  sync.Once
	done  chan struct{}
}

func (l *streamListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *streamListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *streamListener) Addr() net.Addr { return l.addr }
