package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// Reasons an intercepted request is refused, as users read them.
const (
	ReasonSecret     = "a rule names a secret its owner does not have"
	ReasonNoCA       = "the daemon has no egress CA to intercept with"
	ReasonMisdirect  = "request for another host on a connection to a host with rules"
	upstreamDialWait = 10 * time.Second
)

// intercept serves a connection to a host whose requests a rule
// transforms: it terminates the sandbox's TLS with a certificate of the
// daemon's egress CA (or reads plain HTTP), sets the rule's headers with
// their placeholders filled, and sends each request on to the original
// destination, over TLS verified against the upstream roots for name when
// the sandbox spoke TLS. The destination was already judged by decide: the
// interception changes what is sent, never where.
func (s *Server) intercept(c *net.TCPConn, br *bufio.Reader, dst netip.AddrPort, target string, roots *x509.CertPool, name string, t HostTransform, r Rules) {
	first, err := br.Peek(1)
	if err != nil {
		reset(c)
		return
	}
	secure := first[0] == 0x16
	var conn net.Conn = &peekedConn{TCPConn: c, r: br}
	if secure {
		if s.cfg.CA == nil {
			s.deny(Denial{SandboxID: r.SandboxID, Kind: KindTCP, Name: name, Addr: dst.Addr().String(), Port: int(dst.Port()), Reason: ReasonNoCA})
			reset(c)
			return
		}
		leaf, err := s.cfg.CA.Leaf(name)
		if err != nil {
			s.log.Error("egress proxy: make a certificate", "name", name, "err", err)
			reset(c)
			return
		}
		tc := tls.Server(conn, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
		_ = c.SetDeadline(time.Now().Add(helloTimeout))
		if err := tc.Handshake(); err != nil {
			// The sandbox does not trust the CA (or gave up): nothing was
			// sent, so there is nothing to forward.
			s.log.Debug("egress proxy: intercepted handshake failed", "sandbox", r.SandboxID, "name", name, "err", err)
			_ = c.Close()
			return
		}
		_ = c.SetDeadline(time.Time{})
		conn = tc
	}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: upstreamDialWait}
			return d.DialContext(ctx, "tcp4", target)
		},
		TLSClientConfig:     &tls.Config{ServerName: name, RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: upstreamDialWait,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     s.cfg.IdleTimeout,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	scheme := "http"
	if secure {
		scheme = "https"
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = pr.In.Host
			pr.Out.Host = pr.In.Host
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			s.log.Debug("egress proxy: upstream of an intercepted request", "sandbox", r.SandboxID, "name", name, "err", err)
			http.Error(w, "sandpit egress proxy: the upstream did not answer: "+upstreamError(err), http.StatusBadGateway)
		},
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		host := req.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if canonical(host) != name {
			// The connection was judged, and its upstream's certificate
			// is checked, for name: a request for another host on it gets
			// neither that host nor this host's headers.
			s.deny(Denial{SandboxID: r.SandboxID, Kind: KindTCP, Name: canonical(host), Addr: dst.Addr().String(), Port: int(dst.Port()), Reason: ReasonMisdirect})
			http.Error(w, "sandpit egress proxy: this connection is for "+name, http.StatusMisdirectedRequest)
			return
		}
		for _, h := range t.Headers {
			v, err := sandpit.FillSecrets(h.Value, func(n string) (string, error) {
				if s.cfg.Secrets == nil {
					return "", ErrNoSecret
				}
				return s.cfg.Secrets.Reveal(req.Context(), r.Owner, n)
			})
			if err != nil {
				s.deny(Denial{SandboxID: r.SandboxID, Kind: KindTCP, Name: name, Addr: dst.Addr().String(), Port: int(dst.Port()), Reason: ReasonSecret})
				s.log.Warn("egress proxy: a rule's placeholder was not filled; the request is refused", "sandbox", r.SandboxID, "name", name, "header", h.Name, "err", err)
				http.Error(w, fmt.Sprintf("sandpit egress proxy: header %s: %v", h.Name, err), http.StatusBadGateway)
				return
			}
			req.Header.Set(h.Name, v)
		}
		rp.ServeHTTP(w, req)
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: helloTimeout, IdleTimeout: s.cfg.IdleTimeout,
		ErrorLog: log.New(io.Discard, "", 0)}
	_ = srv.Serve(newOneConnListener(conn))
}

// upstreamError is what a sandbox is told of a failed upstream: the kind
// of failure, never more of the daemon's view than that.
func upstreamError(err error) string {
	var cv *tls.CertificateVerificationError
	switch {
	case errors.As(err, &cv):
		return "its certificate is not trusted (the host's trust store and --egress-ca)"
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	}
	return "connection failed"
}

// peekedConn is a connection whose first bytes were read into r.
type peekedConn struct {
	*net.TCPConn
	r *bufio.Reader
}

func (p *peekedConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// oneConnListener hands out one connection, then waits for it to close, so
// that http.Server serves exactly that connection and Serve returns after.
type oneConnListener struct {
	mu   sync.Mutex
	conn net.Conn
	addr net.Addr
	done chan struct{}
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{addr: c.LocalAddr(), done: make(chan struct{})}
	l.conn = &closeNotifyConn{Conn: c, done: l.done}
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.addr }

// closeNotifyConn closes done when it is closed.
type closeNotifyConn struct {
	net.Conn
	once sync.Once
	done chan struct{}
}

func (c *closeNotifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.done) })
	return err
}
