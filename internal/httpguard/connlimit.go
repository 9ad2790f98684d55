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
	return &LimitedListener{Listener: ln, name: name, lim: lim, log: log, bySource: map[netip.Addr]int{}, conns: map[*limitedConn]struct{}{}}
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
	conns    map[*limitedConn]struct{}
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
		lc := &limitedConn{Conn: c, l: l, src: src, since: time.Now()}
		if l.admit(lc) {
			return lc, nil
		}
		if v := l.victim(src); v != nil {
			// The listener is full, many sources' idle connections
			// holding it: the oldest one that carries no request makes
			// room, so that a flood from many addresses cannot lock
			// everyone else out either.
			_ = v.Close()
			if l.admit(lc) {
				return lc, nil
			}
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

func (l *LimitedListener) admit(c *limitedConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lim.Total > 0 && l.total >= l.lim.Total {
		return false
	}
	if l.lim.PerSource > 0 && l.bySource[c.src] >= l.lim.PerSource {
		return false
	}
	l.total++
	l.bySource[c.src]++
	l.conns[c] = struct{}{}
	return true
}

// victim is the oldest connection that carries no request (new or idle,
// as the server's ConnState hook reports), of a source other than src,
// when the listener is full; nil when none may go.
func (l *LimitedListener) victim(src netip.Addr) *limitedConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lim.Total == 0 || l.total < l.lim.Total || (l.lim.PerSource > 0 && l.bySource[src] >= l.lim.PerSource) {
		return nil
	}
	var v *limitedConn
	for c := range l.conns {
		if c.src != src && c.evictable.Load() && (v == nil || c.since.Before(v.since)) {
			v = c
		}
	}
	return v
}

func (l *LimitedListener) release(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.bySource[c.src]--; l.bySource[c.src] <= 0 {
		delete(l.bySource, c.src)
	}
	delete(l.conns, c)
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
	l     *LimitedListener
	src   netip.Addr
	since time.Time
	// evictable: the server reports the connection new or idle (no
	// request on it), so closing it loses nothing a client cannot redo.
	evictable atomic.Bool
	once      sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
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

// ConnState is an http.Server's ConnState hook. It tells the listener
// which connections carry no request (new or idle), which may make room
// when the listener is full, and it closes a keep-alive connection as soon
// as it goes idle while its source holds more than half its share, or the
// listener more than three quarters of its total: under a flood, an idle
// connection is a descriptor held for nothing, and a client that comes
// back opens another. Below those marks idle connections stay for the
// server's IdleTimeout as usual.
func (l *LimitedListener) ConnState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	lc.evictable.Store(st == http.StateNew || st == http.StateIdle)
	if st != http.StateIdle {
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

// NetConn is the connection under the limit's wrapper.
func (c *limitedConn) NetConn() net.Conn { return c.Conn }
