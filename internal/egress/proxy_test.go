package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// recordingConn keeps a copy of everything written through it, so a test
// can compare what the proxy's reader holds with what the client sent.
type recordingConn struct {
	net.Conn
	mu      sync.Mutex
	written bytes.Buffer
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.written.Write(p)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *recordingConn) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.written.Bytes())
}

// clientHello runs a real crypto/tls client with cfg over a net.Pipe and
// hands the server end, wrapped in a reader as the proxy wraps it, to
// inspect. inspect runs while the client waits for a ServerHello that
// never comes; clientHello then ends the handshake and returns the bytes
// the client wrote, which are its ClientHello.
func clientHello(t *testing.T, cfg *tls.Config, inspect func(br *bufio.Reader)) []byte {
	t.Helper()
	server, client := net.Pipe()
	rc := &recordingConn{Conn: client}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The handshake fails when the server end closes; only the
		// ClientHello it wrote first matters here.
		_ = tls.Client(rc, cfg).Handshake()
	}()
	br := bufio.NewReaderSize(server, maxPeek)
	inspect(br)
	server.Close()
	client.Close()
	<-done
	return rc.bytes()
}

func TestServerNameTLS(t *testing.T) {
	tests := []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"SNI", &tls.Config{ServerName: "allowed.test"}, "allowed.test"},
		// Names in a ClientHello are compared with rules in lower case.
		{"SNI upper case", &tls.Config{ServerName: "Allowed.TEST"}, "allowed.test"},
		{"no SNI", &tls.Config{InsecureSkipVerify: true}, ""},
		// crypto/tls sends no SNI for an address (RFC 6066 forbids it).
		{"address", &tls.Config{ServerName: "203.0.113.1"}, ""},
		{"TLS 1.2 only", &tls.Config{ServerName: "allowed.test", MaxVersion: tls.VersionTLS12}, "allowed.test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got string
			var held []byte
			sent := clientHello(t, tt.cfg, func(br *bufio.Reader) {
				got = serverName(br)
				// serverName only peeks: the whole ClientHello must still
				// be there to pass on to the real server.
				hdr, err := br.Peek(5)
				if err != nil {
					t.Fatalf("Peek after serverName: %v", err)
				}
				held = make([]byte, 5+(int(hdr[3])<<8|int(hdr[4])))
				if _, err := io.ReadFull(br, held); err != nil {
					t.Fatalf("reading the ClientHello after serverName: %v", err)
				}
			})
			if got != tt.want {
				t.Errorf("serverName = %q, want %q", got, tt.want)
			}
			if len(held) < 6 || held[0] != 0x16 || held[5] != 1 {
				t.Fatalf("reader after serverName starts % x, want a handshake record holding a ClientHello", held[:min(len(held), 6)])
			}
			if !bytes.Equal(held, sent) {
				t.Errorf("reader after serverName holds %d bytes that differ from the %d bytes the client sent", len(held), len(sent))
			}
		})
	}
}

// TestServerNameTLSMalformed feeds serverName every truncation of a real
// ClientHello, with the record length both left as sent (so the record is
// incomplete) and patched to the truncated length (so the parser walks a
// short message). It must never panic, and must name the server only when
// the SNI extension is whole.
func TestServerNameTLSMalformed(t *testing.T) {
	hello := clientHello(t, &tls.Config{ServerName: "allowed.test"}, func(br *bufio.Reader) {
		// Let the client finish writing its record before the pipe
		// closes.
		if hdr, err := br.Peek(5); err == nil {
			_, _ = br.Peek(5 + (int(hdr[3])<<8 | int(hdr[4])))
		}
	})
	if len(hello) < 50 || hello[0] != 0x16 {
		t.Fatalf("captured ClientHello % x is not a handshake record", hello[:min(len(hello), 8)])
	}
	for k := range len(hello) {
		cut := hello[:k]
		if got := serverName(bufio.NewReaderSize(bytes.NewReader(cut), maxPeek)); got != "" {
			t.Errorf("truncated to %d bytes: serverName = %q, want \"\"", k, got)
		}
		if k < 5 {
			continue
		}
		patched := bytes.Clone(cut)
		patched[3], patched[4] = byte((k-5)>>8), byte(k-5)
		if got := serverName(bufio.NewReaderSize(bytes.NewReader(patched), maxPeek)); got != "" && got != "allowed.test" {
			t.Errorf("patched to %d bytes: serverName = %q", k, got)
		}
	}
	if got := serverName(bufio.NewReaderSize(bytes.NewReader(hello), maxPeek)); got != "allowed.test" {
		t.Errorf("whole ClientHello: serverName = %q, want allowed.test", got)
	}
	// A record longer than the reader can hold is given up on, not read
	// past maxPeek.
	long := bytes.Clone(hello[:5])
	long[3], long[4] = 0xff, 0xff
	long = append(long, make([]byte, 0xffff)...)
	if got := serverName(bufio.NewReaderSize(bytes.NewReader(long), maxPeek)); got != "" {
		t.Errorf("oversized record: serverName = %q, want \"\"", got)
	}
}

func TestServerNameHTTP(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"host with port", "GET / HTTP/1.1\r\nHost: Example.com:8080\r\n\r\n", "example.com"},
		{"host", "GET / HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n", "example.com"},
		{"lower-case header", "GET / HTTP/1.1\r\nhost:example.com\r\n\r\n", "example.com"},
		{"header after others", "POST /x HTTP/1.1\r\nUser-Agent: t\r\nHOST:  Example.com.  \r\n\r\nbody", "example.com"},
		{"IPv6 with port", "GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", "2001:db8::1"},
		{"IPv6", "GET / HTTP/1.1\r\nHost: [2001:db8::1]\r\n\r\n", "2001:db8::1"},
		{"no host", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", ""},
		{"HTTP/1.0", "GET / HTTP/1.0\r\n\r\n", ""},
		// Only header lines count, not the request line, not a header
		// whose name merely ends in "host", and not the body.
		{"host in request line", "GET /Host:evil.test HTTP/1.1\r\n\r\n", ""},
		{"other header", "GET / HTTP/1.1\r\nX-Forwarded-Host: evil.test\r\n\r\n", ""},
		{"host in body", "POST / HTTP/1.1\r\nContent-Length: 20\r\n\r\nHost: evil.test\r\n\r\n", ""},
		// A head cut short by the end of the stream is still read.
		{"no blank line before EOF", "GET / HTTP/1.1\r\nHost: example.com\r\n", "example.com"},
		{"empty", "", ""},
		{"not HTTP", "SSH-2.0-OpenSSH_9.6\r\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReaderSize(bytes.NewReader([]byte(tt.in)), maxPeek)
			if got := serverName(br); got != tt.want {
				t.Errorf("serverName = %q, want %q", got, tt.want)
			}
			// Nothing may be consumed: the request goes on to the server.
			rest, _ := io.ReadAll(br)
			if string(rest) != tt.in {
				t.Errorf("reader after serverName holds %q, want %q", rest, tt.in)
			}
		})
	}
}

// TestServerNameHTTPHeadInPieces writes a request head in two parts with a
// pause between and then keeps the connection open, as a client waiting for
// its response does. serverName must wait for the second part but not for
// anything after the head.
func TestServerNameHTTPHeadInPieces(t *testing.T) {
	const head = "GET / HTTP/1.1\r\nHost: Example.com:8080\r\n\r\n"
	tests := []struct {
		name string
		cut  int
	}{
		{"split in the request line", 5},
		{"split in the Host header", 22},
		{"split in the final blank line", len(head) - 2},
		{"split before the final newline", len(head) - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server, client := net.Pipe()
			t.Cleanup(func() {
				server.Close()
				client.Close()
			})
			go func() {
				// Errors only mean the test is over and the pipe closed.
				if _, err := client.Write([]byte(head[:tt.cut])); err != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
				_, _ = client.Write([]byte(head[tt.cut:]))
				// The client now waits for a response and never closes.
			}()
			br := bufio.NewReaderSize(server, maxPeek)
			got := make(chan string, 1)
			go func() { got <- serverName(br) }()
			select {
			case name := <-got:
				if name != "example.com" {
					t.Errorf("serverName = %q, want example.com", name)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("serverName waited for more than the request head")
			}
			if n := br.Buffered(); n != len(head) {
				t.Errorf("reader holds %d bytes after serverName, want the %d of the head", n, len(head))
			}
			if b, _ := br.Peek(len(head)); string(b) != head {
				t.Errorf("reader holds %q, want %q", b, head)
			}
		})
	}
}

// FuzzServerName checks that no input makes serverName panic or consume
// what it read.
func FuzzServerName(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0x00, 0x00, 0x00})
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x00})
	f.Add([]byte{0x16})
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), maxPeek)
		_ = serverName(br)
		rest, _ := io.ReadAll(br)
		if !bytes.Equal(rest, in) {
			t.Errorf("serverName consumed input: %d bytes left of %d", len(rest), len(in))
		}
	})
}
