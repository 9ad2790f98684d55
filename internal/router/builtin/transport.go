package builtin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"time"
)

// maxResponseHeader bounds what an upstream may send before its response
// body, the limit http.Transport applies by default: the sandbox's server
// is untrusted and must not grow the daemon's memory with endless headers.
const maxResponseHeader = 10 << 20

// max1xx is how many informational responses one request may get before
// its final one, as in http.Transport.
const max1xx = 5

// upstreamTransport carries proxied requests to sandbox servers.
//
// Requests go through a pooled http.Transport, which keeps connections to
// upstreams that keep them open. Many servers run in sandboxes (busybox
// httpd, one-shot scripts, CGI-style servers) close the connection after
// every response instead. For those the pooled transport buys nothing and
// costs much: each request dials in a goroutine of its own and starts a
// read and a write goroutine for a connection that then carries one
// response, and each handoff between them wakes another thread. Once an
// upstream has answered with a closed connection, its body-less requests
// are made on the request's own goroutine instead (oneShot): dial, write,
// read, close. An answer that keeps the connection open sends the upstream
// back to the pool. Requests with a body (which may stream both ways at
// once) and upgrades always take the pooled transport.
type upstreamTransport struct {
	pooled *http.Transport
	dialer net.Dialer
	// closing holds the upstream addresses whose last answer closed the
	// connection. Entries are cleared with the idle connections, when a
	// route goes away.
	closing sync.Map // string -> struct{}

	readers sync.Pool // *bufio.Reader
	writers sync.Pool // *bufio.Writer
}

func newUpstreamTransport() *upstreamTransport {
	return &upstreamTransport{
		pooled: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 32,
			IdleConnTimeout:     90 * time.Second,
			// A proxy passes the encoding the client asked for; it
			// neither asks for gzip itself nor decompresses.
			DisableCompression: true,
		},
		// A one-shot connection lives for one response: keep-alive
		// probes would never fire, but setting them up costs syscalls.
		dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: -1},
	}
}

// CloseIdleConnections closes the pooled idle connections and forgets which
// upstreams close theirs: the next server at an address starts afresh.
func (t *upstreamTransport) CloseIdleConnections() {
	t.pooled.CloseIdleConnections()
	t.closing.Clear()
}

func (t *upstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.oneShotFits(req) {
		resp, err := t.pooled.RoundTrip(req)
		if err == nil && resp.Close && req.URL.Scheme == "http" {
			t.closing.Store(req.URL.Host, struct{}{})
		}
		return resp, err
	}
	return t.oneShot(req)
}

// oneShotFits reports whether req may take the one-shot path: a plain HTTP
// request without a body, not an upgrade, to an upstream known to close
// its connections.
func (t *upstreamTransport) oneShotFits(req *http.Request) bool {
	if req.URL.Scheme != "http" || (req.Body != nil && req.Body != http.NoBody) || req.Header.Get("Upgrade") != "" {
		return false
	}
	_, ok := t.closing.Load(req.URL.Host)
	return ok
}

// oneShot makes the request on a connection of its own, on the calling
// goroutine, and closes the connection when the body is closed.
func (t *upstreamTransport) oneShot(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	conn, err := t.dialer.DialContext(ctx, "tcp", req.URL.Host)
	if err != nil {
		return nil, err
	}
	// A request the client gave up on ends its connection, whatever the
	// upstream is doing; no goroutine waits for that until it happens.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	lc := &limitedConn{Conn: conn, left: maxResponseHeader}
	bw := t.writer(conn)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	t.putWriter(bw)
	if err != nil {
		stop()
		_ = conn.Close()
		return nil, err
	}
	br := t.reader(lc)
	fail := func(err error) (*http.Response, error) {
		stop()
		_ = conn.Close()
		t.putReader(br)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	for n1xx := 0; ; n1xx++ {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return fail(err)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				return fail(errors.New("upstream switched protocols on a request that asked for no upgrade"))
			}
			if n1xx == max1xx {
				return fail(fmt.Errorf("upstream sent more than %d informational responses", max1xx))
			}
			// The reverse proxy passes informational answers (103
			// Early Hints) on through the request's trace, as
			// http.Transport calls it.
			if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
				if err := trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
					return fail(err)
				}
			}
			continue
		}
		lc.unlimit()
		if !resp.Close {
			// This server keeps connections: pool them again.
			t.closing.Delete(req.URL.Host)
		}
		resp.Body = &oneShotBody{ReadCloser: resp.Body, conn: conn, stop: stop, release: func() { t.putReader(br) }}
		return resp, nil
	}
}

func (t *upstreamTransport) reader(r io.Reader) *bufio.Reader {
	if br, ok := t.readers.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReaderSize(r, 4<<10)
}

func (t *upstreamTransport) putReader(br *bufio.Reader) {
	br.Reset(nil)
	t.readers.Put(br)
}

func (t *upstreamTransport) writer(w io.Writer) *bufio.Writer {
	if bw, ok := t.writers.Get().(*bufio.Writer); ok {
		bw.Reset(w)
		return bw
	}
	return bufio.NewWriterSize(w, 4<<10)
}

func (t *upstreamTransport) putWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	t.writers.Put(bw)
}

// oneShotBody is a one-shot response's body; closing it closes the
// connection.
type oneShotBody struct {
	io.ReadCloser
	conn    net.Conn
	stop    func() bool
	release func()
	once    sync.Once
}

func (b *oneShotBody) Close() error {
	b.once.Do(func() {
		b.stop()
		// The connection goes first: closing a body not read to its end
		// would otherwise read the rest of it.
		_ = b.conn.Close()
		_ = b.ReadCloser.Close()
		b.release()
	})
	return nil
}

// limitedConn reads at most left bytes while left is positive, then fails;
// unlimit lifts the bound once the response's headers are read.
type limitedConn struct {
	net.Conn
	left int64 // < 0: no limit
}

var errHeaderTooLarge = errors.New("upstream response headers too large")

func (c *limitedConn) Read(p []byte) (int, error) {
	if c.left < 0 {
		return c.Conn.Read(p)
	}
	if c.left == 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.Conn.Read(p)
	c.left -= int64(n)
	return n, err
}

func (c *limitedConn) unlimit() { c.left = -1 }

// bufferPool lends the reverse proxy its copy buffers, which it would
// otherwise allocate, 32 KiB each, for every request.
type bufferPool struct{ p sync.Pool }

const copyBufferSize = 32 << 10

func (bp *bufferPool) Get() []byte {
	if b, ok := bp.p.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, copyBufferSize)
}

func (bp *bufferPool) Put(b []byte) {
	if cap(b) != copyBufferSize {
		return
	}
	b = b[:copyBufferSize]
	bp.p.Put(&b)
}
