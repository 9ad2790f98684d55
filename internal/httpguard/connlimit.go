package httpguard

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// ConnLimits bound the connections one listener holds open: each is a file
// descriptor, and a process that runs out of them can no longer open its
// store, reach the engine or accept anyone. Zero means no bound.
type ConnLimits struct {
	// Total is the most connections the listener holds at once.
	Total int
	// PerSource is the most one source address holds at once, so a flood
	// from one client uses up its own share and nobody else's.
	PerSource int
}

// LimitListener wraps ln so that a connection beyond lim is closed as soon
// as it is accepted, before any byte is read: a flood degrades its source
// (or, past Total, new connections) while the connections already held, and
// every other source below its share, are served as before. Accept errors
// that are temporary (the process or the system out of descriptors) are
// waited out with a back-off instead of ending the server's accept loop.
func LimitListener(ln net.Listener, name string, lim ConnLimits, log *slog.Logger) *LimitedListener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &LimitedListener{Listener: ln, name: name, lim: lim, log: log, bySource: map[netip.Addr]int{}}
}

// LimitedListener is a listener under ConnLimits (see LimitListener).
type LimitedListener struct {
	net.Listener
	name string
	lim  ConnLimits
	log  *slog.Logger

	mu       sync.Mutex
	total    int
	bySource map[netip.Addr]int
	refused  atomic.Uint64
	lastLog  time.Time
}

// Accept returns the next connection within the limits.
func (l *LimitedListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !temporary(err) {
				return nil, err
			}
			// Out of descriptors (EMFILE, ENFILE) or a connection aborted
			// before it was accepted: wait and try again, as net/http
			// does, but never give up.
			delay = backoff(delay)
			l.note("accept failed; retrying", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		src := sourceOf(c.RemoteAddr())
		if l.admit(src) {
			return &limitedConn{Conn: c, l: l, src: src}, nil
		}
		// Closed with a reset: the client learns at once, and the socket
		// leaves no TIME_WAIT behind on this side.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
		l.refused.Add(1)
		l.note("connection limit reached; connections refused", "source", src.String(),
			"per_source", l.lim.PerSource, "total", l.lim.Total, "refused_so_far", l.refused.Load())
	}
}

// Refused is how many connections the limits have closed so far.
func (l *LimitedListener) Refused() uint64 { return l.refused.Load() }

// Open is how many connections are held now, in all and from src.
func (l *LimitedListener) Open(src netip.Addr) (total, fromSource int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, l.bySource[src.Unmap()]
}

func (l *LimitedListener) admit(src netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lim.Total > 0 && l.total >= l.lim.Total {
		return false
	}
	if l.lim.PerSource > 0 && l.bySource[src] >= l.lim.PerSource {
		return false
	}
	l.total++
	l.bySource[src]++
	return true
}

func (l *LimitedListener) release(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.bySource[src]--; l.bySource[src] <= 0 {
		delete(l.bySource, src)
	}
}

// note logs at most once a second per listener: a flood must not become a
// flood of log lines.
func (l *LimitedListener) note(msg string, args ...any) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.lastLog) < time.Second {
		l.mu.Unlock()
		return
	}
	l.lastLog = now
	l.mu.Unlock()
	l.log.Warn(l.name+": "+msg, args...)
}

type limitedConn struct {
	net.Conn
	l    *LimitedListener
	src  netip.Addr
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.src) })
	return err
}

// sourceOf is a connection's source address, IPv4 in its 4-byte form.
func sourceOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// temporary reports whether an Accept error is worth waiting out.
func temporary(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	var ne interface{ Temporary() bool }
	return errors.As(err, &ne) && ne.Temporary()
}

// backoff doubles a retry delay from 5 ms up to one second.
func backoff(d time.Duration) time.Duration {
	if d == 0 {
		return 5 * time.Millisecond
	}
	if d *= 2; d > time.Second {
		d = time.Second
	}
	return d
}

// Backoff is the delay before the next try of an operation that failed
// after waiting d (0 the first time): 5 ms doubling up to one second.
func Backoff(d time.Duration) time.Duration { return backoff(d) }

// TemporaryAcceptError reports whether an Accept error is worth waiting out
// (out of descriptors, a connection aborted) rather than ending the loop.
func TemporaryAcceptError(err error) bool { return temporary(err) }

// NetConn is the connection under the limit's wrapper.
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

// ConnState is an http.Server's ConnState hook that closes a keep-alive
// connection as soon as it goes idle while its source holds more than half
// its share, or the listener more than three quarters of its total: under a
// flood, an idle connection is a descriptor held for nothing, and a client
// that comes back opens another. Below those marks idle connections stay
// for the server's IdleTimeout as usual.
func (l *LimitedListener) ConnState(c net.Conn, st http.ConnState) {
	if st != http.StateIdle {
		return
	}
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	crowded := (l.lim.PerSource > 0 && 2*l.bySource[lc.src] > l.lim.PerSource) ||
		(l.lim.Total > 0 && 4*l.total > 3*l.lim.Total)
	l.mu.Unlock()
	if crowded {
		_ = lc.Close()
	}
}
