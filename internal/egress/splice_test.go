package egress

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		a.Close()
	})
	return d.(*net.TCPConn), a.(*net.TCPConn)
}

// TestSplice checks that a spliced connection passes on what the proxy
// peeked before deciding, copies both ways, and passes on each side's end
// of stream as a half close, so a request-then-response exchange ends.
func TestSplice(t *testing.T) {
	client, proxySide := tcpPair(t)
	upProxy, server := tcpPair(t)
	for _, c := range []net.Conn{client, server} {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	}

	const request = "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
	const response = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
	if _, err := client.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(proxySide, maxPeek)
	if got := serverName(br); got != "allowed.test" {
		t.Fatalf("serverName = %q, want allowed.test", got)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		splice(proxySide, br, upProxy, time.Minute)
	}()

	// The client is done sending: the server must see the request and
	// then the end of stream.
	if err := client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(server)
	if err != nil || string(got) != request {
		t.Fatalf("server read %q, %v, want %q", got, err, request)
	}
	if _, err := server.Write([]byte(response)); err != nil {
		t.Fatal(err)
	}
	if err := server.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(client)
	if err != nil || string(got) != response {
		t.Fatalf("client read %q, %v, want %q", got, err, response)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("splice did not return after both sides closed")
	}
}
