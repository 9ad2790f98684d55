package daemon

import (
	"log/slog"
	"net"
	"sync"
	"time"
)

// tlsRecordHandshake is the first byte of every TLS connection (a
// handshake record), never the first byte of an HTTP request.
const tlsRecordHandshake = 0x16

// tlsOnPlainListener watches a plain-HTTP listener for clients that speak
// TLS to it and logs why that fails, at most once a minute. The common
// case is an E2B SDK run without E2B_SANDBOX_URL: it reaches each
// sandbox's agent at https://49983-<id>.<domain>, which only a proxy with
// --tls serves; the SDK itself reports no more than "fetch failed".
type tlsOnPlainListener struct {
	net.Listener
	hint string
	log  *slog.Logger

	mu     sync.Mutex
	logged time.Time
}

func (l *tlsOnPlainListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, l: l}, nil
}

func (l *tlsOnPlainListener) saw(remote net.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.logged) < time.Minute {
		return
	}
	l.logged = time.Now()
	l.log.Warn("a client spoke TLS (https) to the preview proxy, which serves plain HTTP (--tls off): "+l.hint, "client", remote.String())
}

// sniffConn looks at the first byte read from the connection.
type sniffConn struct {
	net.Conn
	l       *tlsOnPlainListener
	checked bool
}

func (c *sniffConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if !c.checked && n > 0 {
		c.checked = true
		if b[0] == tlsRecordHandshake {
			c.l.saw(c.RemoteAddr())
		}
	}
	return n, err
}
