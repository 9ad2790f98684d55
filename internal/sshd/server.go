// Package sshd is the daemon's SSH endpoint (serve --ssh-listen): `ssh
// SANDBOX@HOST -p PORT` opens a shell in one of the caller's sandboxes, runs
// a command, serves SFTP (which scp and sftp use) and local port forwards
// (ssh -L) to the sandbox's ports. A login authenticates with a public key
// its owner registered (POST /v1/ssh-keys); the SSH user name is the
// sandbox, resolved among that owner's sandboxes only. Everything goes
// through the service, with the login's principal in the context, so the
// owner scoping and the checks of the HTTP surfaces apply unchanged.
package sshd

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
)

// Backend is what the SSH endpoint needs of the sandbox aggregate;
// *service.Service implements it.
type Backend interface {
	SSHTokenPrincipal(ctx context.Context, token string) (sandpit.Principal, string, error)
	ResolveSandbox(ctx context.Context, ref string) (sandpit.Sandbox, error)
	Agent(ctx context.Context, id string) (agentapi.Agent, error)
	AgentHTTP() *agentapi.Link
	DialSandbox(ctx context.Context, id string, port int) (net.Conn, error)
	ValidateEnv(env map[string]string) error
}

// Identity is what the SSH endpoint needs of the identity aggregate: whom a
// key logs in as, and the sessions its logins hold open; *identity.Service
// implements it.
type Identity interface {
	SSHKeyPrincipals(ctx context.Context, pk ssh.PublicKey) ([]sandpit.Principal, error)
	SSHKeyUsed(ctx context.Context, owner string, pk ssh.PublicKey)
	OpenSession(ctx context.Context) (context.Context, func(), error)
}

// HostKeyFile is the host key's file name inside the data directory.
const HostKeyFile = "ssh_host_ed25519_key"

// Config configures the server.
type Config struct {
	Backend  Backend
	Identity Identity
	// HostKey signs the handshakes (LoadHostKey).
	HostKey ssh.Signer
	// MaxFileBytes bounds one file an SFTP client writes, as the HTTP
	// surfaces bound an upload (0: no bound).
	MaxFileBytes int64
	Logger       *slog.Logger
}

// Server serves SSH connections until Close.
type Server struct {
	be      Backend
	ids     Identity
	log     *slog.Logger
	cfg     *ssh.ServerConfig
	maxFile int64

	// handshakes bounds the connections still authenticating, so that
	// clients that connect and stall (or guess) cannot pile up.
	handshakes chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	lns    []net.Listener
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// Extensions of ssh.Permissions through which the authentication hands
// the login to the connection.
const (
	extKey     = "sandpit-key"     // the public key, in wire form
	extOwner   = "sandpit-owner"   // whose registration of the key admitted the login
	extToken   = "sandpit-token"   // or the SSH access token
	extSandbox = "sandpit-sandbox" // the resolved sandbox's id
)

// maxHandshakes is how many connections may be in their handshake at once;
// one beyond is closed at once.
const maxHandshakes = 64

// New builds the server.
func New(cfg Config) (*Server, error) {
	if cfg.Backend == nil || cfg.Identity == nil || cfg.HostKey == nil {
		return nil, errors.New("sshd: a backend, an identity and a host key are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{be: cfg.Backend, ids: cfg.Identity, log: cfg.Logger, maxFile: cfg.MaxFileBytes, conns: map[net.Conn]struct{}{},
		handshakes: make(chan struct{}, maxHandshakes)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.cfg = &ssh.ServerConfig{
		PublicKeyCallback: s.authenticate,
		// An SSH access token logs in as the user name (Daytona's `ssh
		// TOKEN@HOST`), asked through the "none" method every client
		// tries first, or as the password of the sandbox's user name.
		NoClientAuth:         true,
		NoClientAuthCallback: s.tokenAsUser,
		PasswordCallback:     s.tokenAsPassword,
		ServerVersion:        "SSH-2.0-sandpit",
		MaxAuthTries:         6,
	}
	s.cfg.AddHostKey(cfg.HostKey)
	return s, nil
}

// authenticate accepts a registered key if the sandbox the user name names
// is one of the key's owners' (several owners may register one public key;
// each registration opens only its owner's sandboxes). A key nobody
// registered, a sandbox none of its owners has (another owner's included:
// it is never said to exist), and a name that two of its owners' sandboxes
// answer to, are refused the same way, as OpenSSH refuses a wrong key.
func (s *Server) authenticate(meta ssh.ConnMetadata, pk ssh.PublicKey) (*ssh.Permissions, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	ps, err := s.ids.SSHKeyPrincipals(ctx, pk)
	if err != nil {
		s.log.Info("ssh: key refused", "remote", meta.RemoteAddr().String(), "user", meta.User(), "fingerprint", ssh.FingerprintSHA256(pk), "err", err)
		return nil, errors.New("key refused")
	}
	var (
		owner string
		sb    sandpit.Sandbox
		found int
	)
	for _, p := range ps {
		got, err := s.be.ResolveSandbox(sandpit.WithPrincipal(ctx, p), meta.User())
		if err == nil {
			owner, sb, found = p.Owner, got, found+1
		}
	}
	switch found {
	case 0:
		s.log.Info("ssh: no such sandbox for the key's owners", "remote", meta.RemoteAddr().String(), "user", meta.User(), "owners", len(ps))
		return nil, errors.New("key refused")
	case 1:
	default:
		s.log.Info("ssh: the user name names sandboxes of several of the key's owners; use the sandbox id", "remote", meta.RemoteAddr().String(), "user", meta.User())
		return nil, errors.New("key refused")
	}
	s.ids.SSHKeyUsed(ctx, owner, pk)
	return &ssh.Permissions{Extensions: map[string]string{extKey: string(pk.Marshal()), extOwner: owner, extSandbox: sb.ID}}, nil
}

// tokenAsUser accepts a user name that is a live SSH access token.
func (s *Server) tokenAsUser(meta ssh.ConnMetadata) (*ssh.Permissions, error) {
	return s.token(meta, meta.User(), "")
}

// tokenAsPassword accepts a live SSH access token as the password of the
// sandbox it was minted for, named by the user name.
func (s *Server) tokenAsPassword(meta ssh.ConnMetadata, password []byte) (*ssh.Permissions, error) {
	return s.token(meta, string(password), meta.User())
}

// token checks an SSH access token; ref, when set, must name the token's
// sandbox among its owner's.
func (s *Server) token(meta ssh.ConnMetadata, token, ref string) (*ssh.Permissions, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	p, id, err := s.be.SSHTokenPrincipal(ctx, token)
	if err != nil {
		// Every key login tries "none" first, with a sandbox as its
		// user name: a refusal there is the rule, not news.
		level := slog.LevelDebug
		if ref != "" {
			level = slog.LevelInfo
		}
		s.log.Log(ctx, level, "ssh: token refused", "remote", meta.RemoteAddr().String(), "err", err)
		return nil, errors.New("token refused")
	}
	if ref != "" {
		sb, err := s.be.ResolveSandbox(sandpit.WithPrincipal(ctx, p), ref)
		if err != nil || sb.ID != id {
			s.log.Info("ssh: token for another sandbox", "remote", meta.RemoteAddr().String(), "user", ref)
			return nil, errors.New("token refused")
		}
	}
	return &ssh.Permissions{Extensions: map[string]string{extToken: token, extSandbox: id}}, nil
}

// principal reads the login's principal again once the handshake is done:
// the key or token may have gone since the authentication's look.
func (s *Server) principal(perms *ssh.Permissions) (sandpit.Principal, error) {
	if tok, ok := perms.Extensions[extToken]; ok {
		p, _, err := s.be.SSHTokenPrincipal(s.ctx, tok)
		return p, err
	}
	pk, err := ssh.ParsePublicKey([]byte(perms.Extensions[extKey]))
	if err != nil {
		return sandpit.Principal{}, err
	}
	ps, err := s.ids.SSHKeyPrincipals(s.ctx, pk)
	if err != nil {
		return sandpit.Principal{}, err
	}
	for _, p := range ps {
		if p.Owner == perms.Extensions[extOwner] {
			return p, nil
		}
	}
	return sandpit.Principal{}, errors.New("the key was removed")
}

// Serve accepts connections on ln until Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return err
		}
		s.mu.Lock()
		if s.ctx.Err() != nil {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, nc)
				s.mu.Unlock()
				nc.Close()
			}()
			s.handle(nc)
		}()
	}
}

// Close stops accepting, ends every connection and waits for their
// handlers.
func (s *Server) Close() error {
	s.cancel()
	s.mu.Lock()
	for _, ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// handle runs one connection: the handshake, then its channels.
func (s *Server) handle(nc net.Conn) {
	// The handshake must finish in bounded time: a client that connects
	// and says nothing holds no goroutine for ever.
	select {
	case s.handshakes <- struct{}{}:
	default:
		s.log.Warn("ssh: too many connections in their handshake; one refused", "remote", nc.RemoteAddr().String())
		return
	}
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	sc, chans, reqs, err := ssh.NewServerConn(nc, s.cfg)
	<-s.handshakes
	if err != nil {
		s.log.Debug("ssh: handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
		return
	}
	_ = nc.SetDeadline(time.Time{})
	defer sc.Close()
	p, err := s.principal(sc.Permissions)
	if err != nil {
		return
	}
	ctx, release, err := s.ids.OpenSession(sandpit.WithPrincipal(s.ctx, p))
	if err != nil {
		s.log.Info("ssh: session refused", "owner", p.Owner, "err", err)
		return
	}
	defer release()
	// When the key is removed (or the daemon stops) the session's context
	// ends, and with it the connection.
	stop := context.AfterFunc(ctx, func() { sc.Close() })
	defer stop()
	id := sc.Permissions.Extensions[extSandbox]
	s.log.Info("ssh: login", "remote", nc.RemoteAddr().String(), "owner", p.Owner, "key", p.TokenName, "sandbox", id)
	go globalRequests(reqs)
	var wg sync.WaitGroup
	for nch := range chans {
		switch nch.ChannelType() {
		case "session":
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.session(ctx, id, nch)
			}()
		case "direct-tcpip":
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.directTCPIP(ctx, id, nch)
			}()
		default:
			_ = nch.Reject(ssh.UnknownChannelType, "sandpit serves session and direct-tcpip (ssh -L) channels only")
		}
	}
	wg.Wait()
}

// globalRequests refuses what the connection asks outside its channels:
// remote forwards (ssh -R, tcpip-forward) are not offered, since a
// sandbox's ports are reached from outside, not the other way round; the
// client's keepalives get their answer.
func globalRequests(reqs <-chan *ssh.Request) {
	for r := range reqs {
		if r.WantReply {
			_ = r.Reply(false, nil)
		}
	}
}

// LoadHostKey reads the ed25519 host key at path, generating it (mode
// 0600) on first use, so that clients see the same host key after every
// restart.
func LoadHostKey(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		_, priv, gerr := ed25519.GenerateKey(rand.Reader)
		if gerr != nil {
			return nil, gerr
		}
		blk, merr := ssh.MarshalPrivateKey(priv, "sandpit host key")
		if merr != nil {
			return nil, merr
		}
		b = pem.EncodeToMemory(blk)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		// Written aside and renamed, so that a crash mid-write never
		// leaves a truncated key in its place.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			return nil, fmt.Errorf("write ssh host key: %w", err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return nil, fmt.Errorf("write ssh host key: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("read ssh host key: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, fmt.Errorf("ssh host key: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("ssh host key %s: %w", path, err)
	}
	return signer, nil
}
