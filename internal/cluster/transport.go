package cluster

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// ErrBadClusterKey is returned for a cluster key file that is missing, empty
// or too short to be a secret.
var ErrBadClusterKey = errors.New("bad cluster key")

// minKeyBytes is the shortest cluster secret accepted.
const minKeyBytes = 16

// Keys are the secrets every node-to-node channel derives from the one
// shared cluster key: the gossip keyring's key, and one TLS identity that
// every node presents and expects to see. Holding the identity's private
// key, which only the cluster key yields, is what authenticates a peer.
type Keys struct {
	Gossip []byte // 32 bytes, memberlist's AES-256-GCM key
	// Preview signs Daytona's signed preview URLs on every node alike, so
	// that a URL one node signed verifies on any other, and still does
	// after its sandbox was re-created elsewhere.
	Preview []byte
	cert    tls.Certificate
	pub     ed25519.PublicKey
}

// LoadKeyFile reads a cluster key file: any secret of at least 16 bytes,
// surrounding white space ignored (`openssl rand -base64 32` makes one).
func LoadKeyFile(path string) (Keys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Keys{}, fmt.Errorf("%w: %v", ErrBadClusterKey, err)
	}
	return DeriveKeys([]byte(strings.TrimSpace(string(b))))
}

// DeriveKeys derives the gossip key and the TLS identity from secret.
func DeriveKeys(secret []byte) (Keys, error) {
	if len(secret) < minKeyBytes {
		return Keys{}, fmt.Errorf("%w: want at least %d bytes", ErrBadClusterKey, minKeyBytes)
	}
	gossip, err := hkdf.Key(sha256.New, secret, nil, "sandpit cluster gossip v1", 32)
	if err != nil {
		return Keys{}, err
	}
	preview, err := hkdf.Key(sha256.New, secret, nil, "sandpit cluster preview v1", 32)
	if err != nil {
		return Keys{}, err
	}
	seed, err := hkdf.Key(sha256.New, secret, nil, "sandpit cluster tls v1", ed25519.SeedSize)
	if err != nil {
		return Keys{}, err
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	// The certificate only carries the public key through the handshake;
	// peers check the key, not names or dates, so its fields are fixed.
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sandpit-cluster"},
		NotBefore:    time.Unix(0, 0),
		NotAfter:     time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"sandpit-cluster"},
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, pub, priv)
	if err != nil {
		return Keys{}, fmt.Errorf("cluster certificate: %w", err)
	}
	return Keys{
		Gossip:  gossip,
		Preview: preview,
		cert:    tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv},
		pub:     pub,
	}, nil
}

// verifyPeer accepts a peer whose certificate carries the cluster's public
// key. The TLS handshake has already proved the peer holds the matching
// private key, so nobody without the cluster key gets past it.
func (k Keys) verifyPeer(rawCerts [][]byte, _ [][]*x509.Certificate) error {
	if len(rawCerts) == 0 {
		return errors.New("cluster peer presented no certificate")
	}
	c, err := x509.ParseCertificate(rawCerts[0])
	if err != nil {
		return fmt.Errorf("cluster peer certificate: %w", err)
	}
	pub, ok := c.PublicKey.(ed25519.PublicKey)
	if !ok || !pub.Equal(k.pub) {
		return errors.New("cluster peer does not hold the cluster key")
	}
	return nil
}

func (k Keys) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion:            tls.VersionTLS13,
		Certificates:          []tls.Certificate{k.cert},
		ClientAuth:            tls.RequireAnyClientCert,
		VerifyPeerCertificate: k.verifyPeer,
	}
}

func (k Keys) clientTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{k.cert},
		// The chain is checked by verifyPeer against the cluster key
		// instead of against a CA and a host name.
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: k.verifyPeer,
	}
}

// Channel bytes: the first byte a dialer writes after the TLS handshake
// says which service of the node it wants.
const (
	chanRaft    byte = 'R'
	chanForward byte = 'F'
	chanHTTP    byte = 'H'
)

// Mux is a node's cluster port: one TLS listener carrying Raft, forwarded
// log entries and forwarded API requests.
type Mux struct {
	ln     net.Listener
	keys   Keys
	adv    net.Addr
	log    *slog.Logger
	raft   *connQueue
	http   *connQueue
	mu     sync.Mutex
	apply  func(data []byte) (Result, error)
	closed chan struct{}
	once   sync.Once
}

// Listen opens the cluster port on addr. advertise, when non-empty, is the
// address other nodes dial (for a listener on 0.0.0.0 or behind NAT). lim
// bounds the connections the port holds, in all and per source: the port
// accepts anyone's TCP before the TLS handshake tells a node from a
// stranger, so a flood must use up its own share, not the daemon's
// descriptors. Connections are never evicted to make room (a Raft stream
// is idle most of the time and must stay).
func Listen(addr, advertise string, keys Keys, lim httpguard.ConnLimits, log *slog.Logger) (*Mux, error) {
	if log == nil {
		log = slog.Default()
	}
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cluster listen %s: %w", addr, err)
	}
	ln := net.Listener(httpguard.LimitListener(raw, "cluster port", lim, log))
	adv := ln.Addr()
	if advertise != "" {
		a, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("cluster advertise %s: %w", advertise, err)
		}
		adv = a
	}
	m := &Mux{ln: ln, keys: keys, adv: adv, log: log, closed: make(chan struct{})}
	m.raft = newConnQueue(m)
	m.http = newConnQueue(m)
	go m.serve()
	return m, nil
}

// Addr is the advertised address of the cluster port.
func (m *Mux) Addr() net.Addr { return m.adv }

// SetApply installs the function that applies forwarded entries (the
// replica's ApplyLocal); until then forwards are refused as not-leader.
func (m *Mux) SetApply(f func(data []byte) (Result, error)) {
	m.mu.Lock()
	m.apply = f
	m.mu.Unlock()
}

// Close stops the listener.
func (m *Mux) Close() error {
	var err error
	// Raft closes its stream layer on shutdown and the node closes the port
	// again; only the first close acts.
	m.once.Do(func() {
		close(m.closed)
		err = m.ln.Close()
	})
	return err
}

func (m *Mux) serve() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.closed:
				return
			default:
			}
			// The limited listener waits out what is temporary (out of
			// descriptors) itself; what reaches here ends the port.
			m.log.Error("cluster port: accept failed; the port is closed", "err", err)
			return
		}
		go m.handshake(c)
	}
}

func (m *Mux) handshake(raw net.Conn) {
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	c := tls.Server(raw, m.keys.serverTLS())
	if err := c.Handshake(); err != nil {
		m.log.Warn("cluster: refused connection", "remote", raw.RemoteAddr().String(), "err", err)
		raw.Close()
		return
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		c.Close()
		return
	}
	_ = raw.SetDeadline(time.Time{})
	switch b[0] {
	case chanRaft:
		m.raft.push(c)
	case chanHTTP:
		m.http.push(c)
	case chanForward:
		m.serveForward(c)
	default:
		c.Close()
	}
}

// dial opens an authenticated channel to a node's cluster port.
func (m *Mux) dial(ctx context.Context, addr string, ch byte) (net.Conn, error) {
	d := &net.Dialer{}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, m.keys.clientTLS())
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	if _, err := c.Write([]byte{ch}); err != nil {
		raw.Close()
		return nil, err
	}
	_ = raw.SetDeadline(time.Time{})
	return c, nil
}

// RaftLayer is the raft.StreamLayer over the cluster port.
func (m *Mux) RaftLayer() raft.StreamLayer { return raftLayer{m} }

type raftLayer struct{ m *Mux }

func (l raftLayer) Accept() (net.Conn, error) { return l.m.raft.accept() }
func (l raftLayer) Close() error              { return l.m.Close() }
func (l raftLayer) Addr() net.Addr            { return l.m.adv }
func (l raftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.m.dial(ctx, string(addr), chanRaft)
}

// HTTPListener is a net.Listener of the API requests other nodes forward
// here over the cluster port.
func (m *Mux) HTTPListener() net.Listener { return httpListener{m} }

type httpListener struct{ m *Mux }

func (l httpListener) Accept() (net.Conn, error) { return l.m.http.accept() }
func (l httpListener) Close() error              { return nil }
func (l httpListener) Addr() net.Addr            { return l.m.adv }

// DialHTTP opens a channel to another node's forwarded-API server.
func (m *Mux) DialHTTP(ctx context.Context, addr string) (net.Conn, error) {
	return m.dial(ctx, addr, chanHTTP)
}

// connQueue hands accepted, authenticated connections to one consumer.
type connQueue struct {
	m  *Mux
	ch chan net.Conn
}

func newConnQueue(m *Mux) *connQueue { return &connQueue{m: m, ch: make(chan net.Conn, 16)} }

func (q *connQueue) push(c net.Conn) {
	select {
	case q.ch <- c:
	case <-q.m.closed:
		c.Close()
	}
}

func (q *connQueue) accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.m.closed:
		return nil, net.ErrClosed
	}
}

// forwardReply is the wire form of a forwarded entry's Result.
type forwardReply struct {
	Claim    sandpit.Claim   `json:"claim"`
	Template *TemplateRecord `json:"template,omitempty"`
	ErrCode  string          `json:"err_code,omitempty"`
	ErrText  string          `json:"err_text,omitempty"`
	NotApply string          `json:"not_applied,omitempty"` // the entry was not committed here
}

const maxFrame = 16 << 20

func writeFrame(w io.Writer, b []byte) error {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return nil, fmt.Errorf("cluster frame of %d bytes is too large", size)
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return b, err
}

// serveForward applies entries a follower forwards, one frame each, until
// the follower closes the channel.
func (m *Mux) serveForward(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		data, err := readFrame(br)
		if err != nil {
			return
		}
		m.mu.Lock()
		apply := m.apply
		m.mu.Unlock()
		var rep forwardReply
		if apply == nil {
			rep.NotApply = raft.ErrNotLeader.Error()
		} else if res, err := apply(data); err != nil {
			rep.NotApply = err.Error()
		} else {
			rep.Claim, rep.Template = res.Claim, res.Template
			if res.Err != nil {
				rep.ErrCode, rep.ErrText = errCode(res.Err), res.Err.Error()
			}
		}
		b, _ := json.Marshal(rep)
		if err := writeFrame(c, b); err != nil {
			return
		}
	}
}

// Forwarder returns a Forwarder that sends entries to the leader over its
// cluster port, keeping one channel per leader open between calls.
func (m *Mux) Forwarder() Forwarder {
	f := &forwarder{m: m, idle: map[raft.ServerAddress][]net.Conn{}}
	return f.forward
}

type forwarder struct {
	m    *Mux
	mu   sync.Mutex
	idle map[raft.ServerAddress][]net.Conn
}

func (f *forwarder) get(ctx context.Context, addr raft.ServerAddress) (net.Conn, error) {
	f.mu.Lock()
	if cs := f.idle[addr]; len(cs) > 0 {
		c := cs[len(cs)-1]
		f.idle[addr] = cs[:len(cs)-1]
		f.mu.Unlock()
		return c, nil
	}
	f.mu.Unlock()
	return f.m.dial(ctx, string(addr), chanForward)
}

func (f *forwarder) put(addr raft.ServerAddress, c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.idle[addr]) >= 8 {
		c.Close()
		return
	}
	f.idle[addr] = append(f.idle[addr], c)
}

func (f *forwarder) forward(ctx context.Context, addr raft.ServerAddress, data []byte) (Result, error) {
	c, err := f.get(ctx, addr)
	if err != nil {
		return Result{}, fmt.Errorf("%w: dial %s: %v", errForward, addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if err := writeFrame(c, data); err != nil {
		c.Close()
		return Result{}, fmt.Errorf("%w: %v", errForward, err)
	}
	b, err := readFrame(c)
	if err != nil {
		c.Close()
		return Result{}, fmt.Errorf("%w: %v", errForward, err)
	}
	_ = c.SetDeadline(time.Time{})
	f.put(addr, c)
	var rep forwardReply
	if err := json.Unmarshal(b, &rep); err != nil {
		return Result{}, fmt.Errorf("%w: %v", errForward, err)
	}
	if rep.NotApply != "" {
		// Whatever stopped the leader from committing (it lost leadership,
		// is shutting down), the proposal is tried again after the election.
		return Result{}, fmt.Errorf("%w: leader %s: %s", raft.ErrNotLeader, addr, rep.NotApply)
	}
	res := Result{Claim: rep.Claim, Template: rep.Template}
	if rep.ErrCode != "" {
		res.Err = fmt.Errorf("%w (on the leader: %s)", errCodes[rep.ErrCode], rep.ErrText)
	}
	return res, nil
}
