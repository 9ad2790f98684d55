package sshd

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
)

// directTCPIP is the payload of a direct-tcpip channel open (RFC 4254
// 7.2): what ssh -L asks for each connection it forwards.
type directTCPIP struct {
	DestAddr string
	DestPort uint32
	OrigAddr string
	OrigPort uint32
}

// localNames are the destinations a forward may name: the sandbox itself.
// A forward to anywhere else is refused rather than silently sent to the
// sandbox, and the daemon never dials out on a client's behalf.
var localNames = map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true, "0.0.0.0": true, "": true}

// directTCPIP connects a forwarded connection to a port of the sandbox.
func (s *Server) directTCPIP(ctx context.Context, id string, nch ssh.NewChannel) {
	var d directTCPIP
	if err := ssh.Unmarshal(nch.ExtraData(), &d); err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	if !localNames[strings.ToLower(d.DestAddr)] && d.DestAddr != id {
		_ = nch.Reject(ssh.Prohibited, fmt.Sprintf("sandpit forwards to the sandbox's own ports only (localhost:PORT), not to %s", d.DestAddr))
		return
	}
	if d.DestPort > 65535 {
		_ = nch.Reject(ssh.ConnectionFailed, "port out of range")
		return
	}
	conn, err := s.be.DialSandbox(ctx, id, int(d.DestPort))
	if err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	defer conn.Close()
	ch, reqs, err := nch.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	go ssh.DiscardRequests(reqs)
	stop := context.AfterFunc(ctx, func() {
		conn.Close()
		ch.Close()
	})
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(conn, ch)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(ch, conn)
		_ = ch.CloseWrite()
	}()
	wg.Wait()
}
