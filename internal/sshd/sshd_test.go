package sshd_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/sshd"
)

// fake is a backend with one registered key of owner alice, who has one
// sandbox, "demo", whose port 80 is the echo server at echo.
type fake struct {
	key  ssh.PublicKey
	echo string
}

var errNope = errors.New("not found")

func (f *fake) SSHKeyPrincipals(_ context.Context, pk ssh.PublicKey) ([]sandpit.Principal, error) {
	if !bytes.Equal(pk.Marshal(), f.key.Marshal()) {
		return nil, errNope
	}
	return []sandpit.Principal{{Owner: "alice", Scopes: []string{sandpit.ScopeSandboxesWrite}}}, nil
}

func (f *fake) SSHKeyUsed(context.Context, string, ssh.PublicKey) {}

func (f *fake) SSHTokenPrincipal(context.Context, string) (sandpit.Principal, string, error) {
	return sandpit.Principal{}, "", errNope
}

func (f *fake) ResolveSandbox(ctx context.Context, ref string) (sandpit.Sandbox, error) {
	if p, _ := sandpit.PrincipalFrom(ctx); p.Owner != "alice" || ref != "demo" {
		return sandpit.Sandbox{}, errNope
	}
	return sandpit.Sandbox{ID: "sbdemo", Name: "demo", Owner: "alice"}, nil
}

func (f *fake) OpenSession(ctx context.Context) (context.Context, func(), error) {
	return ctx, func() {}, nil
}

func (f *fake) Agent(context.Context, string) (agentapi.Agent, error) {
	return agentapi.Agent{}, errors.New("no agent in this test")
}

func (f *fake) AgentHTTP() *agentapi.Link { return agentapi.NewLink() }

func (f *fake) DialSandbox(ctx context.Context, id string, port int) (net.Conn, error) {
	if id != "sbdemo" || port != 80 {
		return nil, errors.New("connection refused")
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", f.echo)
}

func (f *fake) ValidateEnv(map[string]string) error { return nil }

func signer(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve starts a server over the fake on loopback and returns its address.
func serve(t *testing.T, f *fake) string {
	t.Helper()
	host, err := sshd.LoadHostKey(filepath.Join(t.TempDir(), sshd.HostKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sshd.New(sshd.Config{Backend: f, Identity: f, HostKey: host, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// echoServer answers each connection with what it reads.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(addr, user string, key ssh.Signer) (*ssh.Client, error) {
	return ssh.Dial("tcp", addr, &ssh.ClientConfig{User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
}

// TestLogins: the registered key enters its owner's sandbox; another key,
// or a sandbox the owner lacks, is refused at authentication.
func TestLogins(t *testing.T) {
	alice, stranger := signer(t), signer(t)
	addr := serve(t, &fake{key: alice.PublicKey(), echo: echoServer(t)})
	for _, c := range []struct {
		what, user string
		key        ssh.Signer
		ok         bool
	}{
		{"alice into demo", "demo", alice, true},
		{"alice into a sandbox she lacks", "other", alice, false},
		{"a key nobody registered", "demo", stranger, false},
	} {
		cl, err := dial(addr, c.user, c.key)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.what, err, c.ok)
		}
		if cl != nil {
			cl.Close()
		}
	}
}

// TestForwards: a direct-tcpip channel to localhost reaches the sandbox's
// port; another host, a port the sandbox does not serve and a remote
// forward are refused.
func TestForwards(t *testing.T) {
	alice := signer(t)
	addr := serve(t, &fake{key: alice.PublicKey(), echo: echoServer(t)})
	cl, err := dial(addr, "demo", alice)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c, err := cl.Dial("tcp", "localhost:80")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the forward: %q %v", buf, err)
	}
	c.Close()
	for _, dest := range []string{"192.0.2.1:80", "localhost:81"} {
		if c, err := cl.Dial("tcp", dest); err == nil {
			c.Close()
			t.Errorf("forward to %s was accepted", dest)
		}
	}
	if ln, err := cl.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close()
		t.Error("a remote forward was accepted")
	}
	// A session whose sandbox has no agent says so and exits 255.
	sess, err := cl.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	sess.Stderr = &stderr
	err = sess.Run("true")
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 255 || !bytes.Contains(stderr.Bytes(), []byte("no agent")) {
		t.Fatalf("session without an agent: %v %q", err, stderr.String())
	}
}

// TestHostKeyKept: the host key is made once, mode 0600, and read back the
// same; a file that is no key is an error, not replaced.
func TestHostKeyKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", sshd.HostKeyFile)
	a, err := sshd.LoadHostKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("host key file: %v %v", fi.Mode(), err)
	}
	b, err := sshd.LoadHostKey(path)
	if err != nil || !bytes.Equal(a.PublicKey().Marshal(), b.PublicKey().Marshal()) {
		t.Fatalf("the host key changed on reload (%v)", err)
	}
	if a.PublicKey().Type() != ssh.KeyAlgoED25519 {
		t.Fatalf("host key type %s", a.PublicKey().Type())
	}
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sshd.LoadHostKey(path); err == nil {
		t.Fatal("a garbage host key file was accepted")
	}
}
