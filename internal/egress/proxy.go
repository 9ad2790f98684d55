package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// helloTimeout bounds how long a connection may take to say which server it
// wants; a client that says nothing is dropped.
const helloTimeout = 10 * time.Second

// maxPeek is the most the proxy reads before deciding: a ClientHello record
// (at most 16 KiB plus its header) or an HTTP request head.
const maxPeek = 16<<10 + 5

// acceptLoop serves the proxy until Close. It never gives up while the
// server runs: every sandbox with domain rules depends on it, so an error
// (the process out of descriptors, which the listener's own back-off waits
// out too) is logged, waited out with a back-off, and the loop goes on.
func (s *Server) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-s.closed:
				return
			default:
			}
			delay = httpguard.Backoff(delay)
			s.log.Warn("egress proxy: accept failed; retrying", "err", err, "retry_in", delay)
			select {
			case <-s.closed:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		go s.handle(c)
	}
}

// reset closes a connection with a TCP reset, so the client fails at once
// rather than waiting for an answer that never comes.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// originalDst is where a redirected connection was going before the
// firewall's DNAT sent it here.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var (
		mreq *unix.IPv6Mreq
		gerr error
	)
	if err := raw.Control(func(fd uintptr) {
		// SO_ORIGINAL_DST answers a struct sockaddr_in, which fits in the
		// 20 bytes of an ipv6_mreq: the family, the port (big endian),
		// then the address.
		mreq, gerr = unix.GetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IP, unix.SO_ORIGINAL_DST)
	}); err != nil {
		return netip.AddrPort{}, err
	}
	if gerr != nil {
		return netip.AddrPort{}, gerr
	}
	b := mreq.Multiaddr
	port := uint16(b[2])<<8 | uint16(b[3])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), port), nil
}

// handle decides one redirected connection and splices it if allowed. The
// connection comes from the limited listener; its TCP side is what the
// socket options and the splice use, and closing the wrapper releases its
// place under the limits.
func (s *Server) handle(lc net.Conn) {
	defer lc.Close()
	c, ok := underlyingTCP(lc)
	if !ok {
		return
	}
	src := srcAddr(c.RemoteAddr())
	r, ok := s.rulesFor(src)
	if !ok {
		reset(c)
		return
	}
	dst, err := originalDst(c)
	if err != nil || dst == localAddrPort(c) {
		// Not redirected: someone dialled the proxy itself. (A connection
		// to another port of the proxy's address, the preview proxy's,
		// is redirected here too.)
		reset(c)
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	br := bufio.NewReaderSize(c, maxPeek)
	name := serverName(br)
	_ = c.SetReadDeadline(time.Time{})
	target, roots := dst.String(), s.cfg.UpstreamRoots
	if p, ok := s.previewTarget(name, dst); ok {
		// A preview host the sandbox's DNS sent to the daemon: the
		// daemon's proxy serves it, as it serves anyone.
		target, roots = p.Upstream, p.Roots
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		why := s.decide(ctx, r, name, dst)
		cancel()
		if why != "" {
			s.deny(Denial{SandboxID: r.SandboxID, Kind: KindTCP, Name: name, Addr: dst.Addr().String(), Port: int(dst.Port()), Reason: why})
			reset(c)
			return
		}
	}
	if t, ok := r.transformFor(name); ok {
		s.intercept(c, br, dst, target, roots, name, t, r)
		return
	}
	up, err := net.DialTimeout("tcp4", target, 10*time.Second)
	if err != nil {
		reset(c)
		return
	}
	splice(c, br, up.(*net.TCPConn), s.cfg.IdleTimeout)
}

// localAddrPort is the address and port a connection was accepted on.
func localAddrPort(c *net.TCPConn) netip.AddrPort {
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// underlyingTCP is the TCP connection under a listener's wrapper.
func underlyingTCP(c net.Conn) (*net.TCPConn, bool) {
	for {
		switch v := c.(type) {
		case *net.TCPConn:
			return v, true
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil, false
		}
	}
}

// decide returns why a connection to dst presenting name is refused, or ""
// to allow it.
func (s *Server) decide(ctx context.Context, r Rules, name string, dst netip.AddrPort) string {
	a := dst.Addr()
	if name != "" && r.Learn {
		s.learn(r.SandboxID, name)
	}
	verdict := nameUnlisted
	if name != "" {
		verdict = r.name(name)
	}
	switch verdict {
	case nameDenied:
		return ReasonDenied
	case nameAllowed:
		// The name must lead to this address, or any allowed name would
		// open every address (a client chooses its SNI freely).
		if r.private(a, s.cfg.Operator) {
			return ReasonPrivate
		}
		if inAny(r.AllowCIDRs, a) || s.resolvesTo(ctx, name, a) {
			return ""
		}
		return ReasonSpoofed
	}
	if r.address(a, s.cfg.Operator) {
		return ""
	}
	if name == "" && len(r.AllowDomains) > 0 {
		return ReasonNoName
	}
	if len(r.AllowDomains) > 0 || name != "" {
		return ReasonNotAllowed
	}
	return ReasonAddress
}

// splice copies both ways until both sides are done, passing on each
// side's end of stream as a half close. A connection through which nothing
// passes, either way, for idle is closed: an idle connection holds two
// descriptors of the daemon's.
func splice(c *net.TCPConn, br *bufio.Reader, up *net.TCPConn, idle time.Duration) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	quiet := func() bool { return time.Since(time.Unix(0, last.Load())) >= idle }
	pipe := func(dst *net.TCPConn, src io.Reader, srcConn *net.TCPConn) {
		buf := make([]byte, 32<<10)
		for {
			_ = srcConn.SetReadDeadline(time.Now().Add(idle))
			n, err := src.Read(buf)
			if n > 0 {
				last.Store(time.Now().UnixNano())
				_ = dst.SetWriteDeadline(time.Now().Add(idle))
				if _, werr := dst.Write(buf[:n]); werr != nil {
					_ = c.Close()
					_ = up.Close()
					return
				}
			}
			var ne net.Error
			switch {
			case err == nil:
			case errors.As(err, &ne) && ne.Timeout() && !quiet():
				// This way was silent, the other was not: the
				// connection is in use.
			case errors.As(err, &ne) && ne.Timeout():
				_ = c.Close()
				_ = up.Close()
				return
			default:
				_ = dst.CloseWrite()
				return
			}
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		pipe(up, br, c)
	}()
	go func() {
		defer wg.Done()
		pipe(c, up, up)
	}()
	wg.Wait()
	_ = c.Close()
	_ = up.Close()
}

// serverName reads, without consuming, the name a connection asks for: the
// SNI of a TLS ClientHello, or the Host of an HTTP request. "" when there is
// none or it cannot be read.
func serverName(br *bufio.Reader) string {
	first, err := br.Peek(1)
	if err != nil {
		return ""
	}
	if first[0] == 0x16 {
		return sniOf(br)
	}
	return hostOf(br)
}

// sniOf parses the server_name extension of a ClientHello held in one TLS
// record (RFC 8446 4.1.2, RFC 6066 3).
func sniOf(br *bufio.Reader) string {
	hdr, err := br.Peek(5)
	if err != nil {
		return ""
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	rec, err := br.Peek(5 + n)
	if err != nil {
		return ""
	}
	p := rec[5:]
	// Handshake header: type 1 (client_hello), 3-byte length.
	if len(p) < 4 || p[0] != 1 {
		return ""
	}
	p = p[4:]
	skip := func(k int) bool {
		if len(p) < k {
			return false
		}
		p = p[k:]
		return true
	}
	vec := func(lenBytes int) bool {
		if len(p) < lenBytes {
			return false
		}
		l := 0
		for i := range lenBytes {
			l = l<<8 | int(p[i])
		}
		return skip(lenBytes + l)
	}
	// legacy_version, random, session id, cipher suites, compression.
	if !skip(2+32) || !vec(1) || !vec(2) || !vec(1) || len(p) < 2 {
		return ""
	}
	ext := p[2:]
	for len(ext) >= 4 {
		typ := int(ext[0])<<8 | int(ext[1])
		l := int(ext[2])<<8 | int(ext[3])
		if len(ext) < 4+l {
			return ""
		}
		body := ext[4 : 4+l]
		ext = ext[4+l:]
		if typ != 0 {
			continue
		}
		// server_name_list: 2-byte length, then entries of type(1) len(2).
		if len(body) < 2 {
			return ""
		}
		body = body[2:]
		for len(body) >= 3 {
			nt := body[0]
			nl := int(body[1])<<8 | int(body[2])
			if len(body) < 3+nl {
				return ""
			}
			if nt == 0 {
				return canonical(string(body[3 : 3+nl]))
			}
			body = body[3+nl:]
		}
		return ""
	}
	return ""
}

// hostOf reads the Host header of an HTTP/1 request head.
func hostOf(br *bufio.Reader) string {
	// Peek only ever waits for one more byte than is buffered, so a short
	// request head is read as soon as it has arrived.
	var head []byte
	for want := 1; ; {
		_, err := br.Peek(want)
		b, _ := br.Peek(br.Buffered())
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			head = b[:i]
			break
		}
		if err != nil || len(b) >= maxPeek {
			head = b
			break
		}
		want = min(len(b)+1, maxPeek)
	}
	if len(head) == 0 {
		return ""
	}
	lines := strings.Split(string(head), "\r\n")
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), "host") {
			h := strings.TrimSpace(v)
			if host, _, err := net.SplitHostPort(h); err == nil {
				h = host
			}
			return canonical(strings.Trim(h, "[]"))
		}
	}
	return ""
}
