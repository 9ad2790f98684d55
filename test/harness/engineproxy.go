package harness

import (
	"bytes"
	"net"
	"path/filepath"
	"sync"
	"testing"
)

// EngineProxy sits on a Unix socket in front of the Docker engine's socket
// and can stop answering: paused, it accepts connections and holds every
// byte in both directions until resumed, which is what a hung engine looks
// like to its clients. Point a daemon at it with DOCKER_HOST=EngineProxy.Host.
type EngineProxy struct {
	Host string // unix:///... for DOCKER_HOST

	ln       net.Listener
	upstream string

	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	hold   []byte // requests whose bytes contain it wait (see Hold)
	conns  map[net.Conn]struct{}
}

// NewEngineProxy starts a proxy to the engine at /var/run/docker.sock and
// stops it when the test ends.
func NewEngineProxy(t testing.TB) *EngineProxy {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &EngineProxy{Host: "unix://" + sock, ln: ln, upstream: "/var/run/docker.sock", conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Pause makes the engine stop answering.
func (p *EngineProxy) Pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// Resume lets the held bytes through and answers again.
func (p *EngineProxy) Resume() {
	p.mu.Lock()
	p.paused = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Hold makes the engine stop answering one kind of request: a request
// whose bytes (request line, headers) contain substr, such as
// "/containers/json" for the container listing, waits until Release; the
// others pass. It stands for an engine whose listing hangs (thousands of
// containers, a stuck container holding the engine's lock on them).
func (p *EngineProxy) Hold(substr string) {
	p.mu.Lock()
	p.hold = []byte(substr)
	p.mu.Unlock()
}

// Release lets the held requests through.
func (p *EngineProxy) Release() {
	p.mu.Lock()
	p.hold = nil
	p.cond.Broadcast()
	p.mu.Unlock()
}

// gateRequest blocks while the proxy is paused, or while chunk (bytes
// from the client) holds a request Hold names.
func (p *EngineProxy) gateRequest(chunk []byte) {
	p.mu.Lock()
	for p.paused || (p.hold != nil && bytes.Contains(chunk, p.hold)) {
		p.cond.Wait()
	}
	p.mu.Unlock()
}

// gate blocks while the proxy is paused.
func (p *EngineProxy) gate() {
	p.mu.Lock()
	for p.paused {
		p.cond.Wait()
	}
	p.mu.Unlock()
}

func (p *EngineProxy) close() {
	p.ln.Close()
	p.Release()
	p.Resume()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

func (p *EngineProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *EngineProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		go p.splice(c)
	}
}

func (p *EngineProxy) splice(c net.Conn) {
	defer c.Close()
	p.gate()
	up, err := net.Dial("unix", p.upstream)
	if err != nil {
		return
	}
	p.track(up)
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if src == c {
					p.gateRequest(buf[:n])
				} else {
					p.gate()
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		if uc, ok := dst.(*net.UnixConn); ok {
			_ = uc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}
