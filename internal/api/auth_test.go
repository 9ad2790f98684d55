package api_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
)

const adminToken = "sp_admin_for_tests"

// newAuth returns an authenticator over a real store and a minted token.
func newAuth(t testing.TB, req identity.TokenRequest) (*api.Auth, *service.Service, string) {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	svc := service.New(service.Config{Logger: slog.New(slog.DiscardHandler)}, st, nil, nil)
	ctx := sandpit.WithPrincipal(context.Background(), api.AdminPrincipal())
	ct, err := svc.Identity().CreateToken(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return api.NewAuth(svc.Identity(), adminToken), svc, ct.Secret
}

func TestAuthResolvesAndRefuses(t *testing.T) {
	a, svc, tok := newAuth(t, identity.TokenRequest{Name: "ci", Owner: "team", Scopes: []string{sandpit.ScopeSandboxesRead}})
	ctx := context.Background()
	p, err := a.Principal(ctx, tok)
	if err != nil || p.Owner != "team" || p.TokenName != "ci" || p.Admin {
		t.Fatalf("principal %+v %v", p, err)
	}
	if p, err := a.Principal(ctx, adminToken); err != nil || !p.Admin {
		t.Fatalf("admin principal %+v %v", p, err)
	}
	// The right prefix with a wrong secret, a truncated token, garbage and
	// nothing are all the same refusal, which never quotes the credential.
	prefix := tok[:strings.LastIndex(tok, "_")+1]
	for _, bad := range []string{prefix + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", tok[:len(tok)-1], "spt_", "garbage", ""} {
		_, err := a.Principal(ctx, bad)
		if !errors.Is(err, sandpit.ErrUnauthorized) {
			t.Errorf("%q: %v, want ErrUnauthorized", bad, err)
		}
		if p := api.Classify(err); p.Status != 401 || (bad != "" && strings.Contains(p.Message, bad)) {
			t.Errorf("%q: %+v", bad, p)
		}
	}
	// Authorize only authenticates: the route decides what the token
	// may do, whatever the method.
	r, err := a.Authorize(httptest.NewRequest("GET", "/v1/sandboxes", nil), tok)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := sandpit.PrincipalFrom(r.Context()); !ok || got.Owner != "team" {
		t.Fatalf("principal in context: %+v %v", got, ok)
	}
	mux := http.NewServeMux()
	rs := api.NewRoutes(mux, func(w http.ResponseWriter, _ *http.Request, err error) {
		if !errors.Is(err, sandpit.ErrForbidden) {
			t.Errorf("refusal %v, want ErrForbidden", err)
		}
		w.WriteHeader(api.Classify(err).Status)
	}, nil)
	ran := 0
	ok := func(w http.ResponseWriter, _ *http.Request) { ran++ }
	rs.Handle("GET /read", sandpit.ActionRead, ok)
	rs.Handle("GET /shell", sandpit.ActionExecute, ok)
	rs.Handle("POST /upload", sandpit.ActionWriteFiles, ok)
	for _, c := range []struct {
		method, path string
		status       int
	}{{"GET", "/read", 200}, {"GET", "/shell", 403}, {"POST", "/upload", 403}} {
		req, _ := a.Authorize(httptest.NewRequest(c.method, c.path, nil), tok)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		if w.Code != c.status {
			t.Errorf("read-only token, %s %s: %d, want %d", c.method, c.path, w.Code, c.status)
		}
	}
	if ran != 1 {
		t.Errorf("%d handlers ran, want only the read", ran)
	}
	if got := len(rs.List()); got != 3 {
		t.Errorf("%d routes listed, want 3", got)
	}
	// Revocation is effective on the next call.
	if _, err := svc.Identity().RevokeToken(sandpit.WithPrincipal(ctx, api.AdminPrincipal()), "ci"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Principal(ctx, tok); !errors.Is(err, sandpit.ErrUnauthorized) {
		t.Fatalf("revoked: %v", err)
	}
}

// TestScopeGrants is the scope table: read reads metadata and files, write
// does everything on the owner's sandboxes, admin everything.
func TestScopeGrants(t *testing.T) {
	want := map[string][]sandpit.Action{
		sandpit.ScopeSandboxesRead:  {sandpit.ActionRead, sandpit.ActionReadFiles},
		sandpit.ScopeSandboxesWrite: {sandpit.ActionRead, sandpit.ActionReadFiles, sandpit.ActionWriteFiles, sandpit.ActionExecute, sandpit.ActionExpose, sandpit.ActionManage},
		sandpit.ScopeAdmin:          sandpit.Actions(),
		"no-such-scope":             nil,
	}
	for scope, allowed := range want {
		for _, a := range sandpit.Actions() {
			if got := sandpit.ScopeGrants(scope, a); got != slices.Contains(allowed, a) {
				t.Errorf("ScopeGrants(%q, %q) = %v", scope, a, got)
			}
		}
	}
	p := sandpit.Principal{Owner: "team", Scopes: []string{sandpit.ScopeSandboxesRead}}
	ctx := sandpit.WithPrincipal(context.Background(), p)
	env := map[string]string{"SECRET": "hunter2"}
	if got := sandpit.RedactEnv(ctx, env); got["SECRET"] != sandpit.Redacted || env["SECRET"] != "hunter2" {
		t.Errorf("redacted for a read token: %v (input now %v)", got, env)
	}
	p.Scopes = []string{sandpit.ScopeSandboxesWrite}
	if got := sandpit.RedactEnv(sandpit.WithPrincipal(context.Background(), p), env); got["SECRET"] != "hunter2" {
		t.Errorf("for a write token: %v", got)
	}
}

func TestAuthRefusesExpiredToken(t *testing.T) {
	a, _, tok := newAuth(t, identity.TokenRequest{Name: "short", ExpiresIn: time.Second})
	if _, err := a.Principal(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := a.Principal(context.Background(), tok); !errors.Is(err, sandpit.ErrUnauthorized) {
		t.Fatalf("expired: %v", err)
	}
}

// BenchmarkAuth compares resolving the admin token (a constant-time compare
// in memory) with a personal access token (an indexed lookup by prefix and a
// SHA-256), the per-request cost tokens add.
func BenchmarkAuth(b *testing.B) {
	a, _, tok := newAuth(b, identity.TokenRequest{Name: "bench"})
	ctx := context.Background()
	for _, c := range []struct{ name, tok string }{{"admin", adminToken}, {"personal", tok}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := a.Principal(ctx, c.tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
