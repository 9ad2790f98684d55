package identity_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/store"
)

func newIdentity(t *testing.T, maxStreams int) *identity.Service {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return identity.New(identity.Config{Store: st, Log: slog.New(slog.DiscardHandler), MaxStreamsPerToken: maxStreams})
}

var admin = sandpit.Principal{TokenName: "admin", Owner: sandpit.AdminOwner, Scopes: []string{sandpit.ScopeAdmin}, Admin: true}

func asAdmin() context.Context { return sandpit.WithPrincipal(context.Background(), admin) }

// A minted token authenticates as its owner until it is revoked; revoking
// it ends the sessions it holds open, with ErrTokenRevoked as their cause,
// and refuses new ones.
func TestTokenLifecycleEndsSessions(t *testing.T) {
	ids := newIdentity(t, 0)
	ct, err := ids.CreateToken(asAdmin(), identity.TokenRequest{Name: "ci", Owner: "team"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ct.Secret, identity.TokenMarker) {
		t.Fatalf("secret %q does not start with %q", ct.Secret, identity.TokenMarker)
	}
	p, err := ids.AuthenticateToken(context.Background(), ct.Secret)
	if err != nil || p.Owner != "team" || p.Admin {
		t.Fatalf("authenticate: %+v %v", p, err)
	}
	sess, release, err := ids.OpenSession(sandpit.WithPrincipal(context.Background(), p))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if n := ids.OpenSessions(p.TokenPrefix); n != 1 {
		t.Fatalf("open sessions: %d, want 1", n)
	}
	if _, err := ids.RevokeToken(asAdmin(), "ci"); err != nil {
		t.Fatal(err)
	}
	<-sess.Done()
	if cause := context.Cause(sess); !errors.Is(cause, identity.ErrTokenRevoked) {
		t.Fatalf("session cause: %v, want ErrTokenRevoked", cause)
	}
	if _, err := ids.AuthenticateToken(context.Background(), ct.Secret); !errors.Is(err, sandpit.ErrUnauthorized) {
		t.Fatalf("revoked token authenticates: %v", err)
	}
	if _, _, err := ids.OpenSession(sandpit.WithPrincipal(context.Background(), p)); !errors.Is(err, sandpit.ErrUnauthorized) {
		t.Fatalf("session of a revoked token: %v, want unauthorized", err)
	}
}

// Bad input is refused with ErrInvalid and mints nothing; a non-admin is
// refused with ErrForbidden.
func TestCreateTokenRefusals(t *testing.T) {
	ids := newIdentity(t, 0)
	user := sandpit.WithPrincipal(context.Background(), sandpit.Principal{TokenName: "u", Owner: "u", Scopes: []string{sandpit.ScopeSandboxesWrite}})
	for _, tc := range []struct {
		name string
		ctx  context.Context
		req  identity.TokenRequest
		want error
	}{
		{"not admin", user, identity.TokenRequest{Name: "x"}, sandpit.ErrForbidden},
		{"bad name", asAdmin(), identity.TokenRequest{Name: "-x"}, sandpit.ErrInvalid},
		{"reserved owner", asAdmin(), identity.TokenRequest{Name: "x", Owner: sandpit.AdminOwner}, sandpit.ErrInvalid},
		{"unknown scope", asAdmin(), identity.TokenRequest{Name: "x", Scopes: []string{"root"}}, sandpit.ErrInvalid},
		{"negative limit", asAdmin(), identity.TokenRequest{Name: "x", Limits: sandpit.OwnerLimits{MaxSandboxes: -1}}, sandpit.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ids.CreateToken(tc.ctx, tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
	ts, err := ids.ListTokens(asAdmin(), true)
	if err != nil || len(ts) != 0 {
		t.Fatalf("tokens after refusals: %v %v, want none", ts, err)
	}
}

// A session beyond the token's cap is refused as a quota.
func TestSessionCap(t *testing.T) {
	ids := newIdentity(t, 1)
	p := sandpit.Principal{TokenName: "t", Owner: "o", TokenPrefix: "abc"}
	ctx := sandpit.WithPrincipal(context.Background(), p)
	_, release, err := ids.OpenSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ids.OpenSession(ctx); !errors.Is(err, identity.ErrTooManyStreams) {
		t.Fatalf("second session: %v, want ErrTooManyStreams", err)
	}
	release()
	_, release, err = ids.OpenSession(ctx)
	if err != nil {
		t.Fatalf("session after release: %v", err)
	}
	release()
}

// An SSH key logs in as the owner who registered it; removing it ends the
// sessions of its logins with ErrSSHKeyRemoved.
func TestSSHKeyRemovalEndsLogins(t *testing.T) {
	ids := newIdentity(t, 0)
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	spk, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	bob := sandpit.WithPrincipal(context.Background(), sandpit.Principal{TokenName: "bob", Owner: "bob", Scopes: []string{sandpit.ScopeSandboxesWrite}})
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(spk))) + " bob@laptop"
	k, outcome, err := ids.AddSSHKey(bob, "", line)
	if err != nil || k.Owner != "bob" || k.Name != "bob@laptop" || outcome != sandpit.Added {
		t.Fatalf("add: %+v %v %v", k, outcome, err)
	}
	if _, outcome, err := ids.AddSSHKey(bob, "", line); err != nil || outcome != sandpit.AlreadyBound {
		t.Fatalf("re-add: %v %v, want the same key", outcome, err)
	}
	ps, err := ids.SSHKeyPrincipals(context.Background(), spk)
	if err != nil || len(ps) != 1 || ps[0].Owner != "bob" || ps[0].Admin {
		t.Fatalf("principals: %+v %v", ps, err)
	}
	sess, release, err := ids.OpenSession(sandpit.WithPrincipal(context.Background(), ps[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := ids.DeleteSSHKey(bob, "bob@laptop"); err != nil {
		t.Fatal(err)
	}
	<-sess.Done()
	if cause := context.Cause(sess); !errors.Is(cause, identity.ErrSSHKeyRemoved) {
		t.Fatalf("session cause: %v, want ErrSSHKeyRemoved", cause)
	}
	if _, err := ids.SSHKeyPrincipals(context.Background(), spk); !errors.Is(err, sandpit.ErrUnauthorized) {
		t.Fatalf("removed key: %v, want unauthorized", err)
	}
}

// A nil aggregate (a facade's unit tests over a fake) registers nothing.
func TestNilOpenSession(t *testing.T) {
	var ids *identity.Service
	ctx, release, err := ids.OpenSession(context.Background())
	if err != nil || ctx == nil {
		t.Fatalf("nil: %v", err)
	}
	release()
}
