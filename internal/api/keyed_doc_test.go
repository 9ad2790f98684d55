package api_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/api/daytona"
	"github.com/sandpit-dev/sandpit/internal/api/e2b"
	v1 "github.com/sandpit-dev/sandpit/internal/api/v1"
	"github.com/sandpit-dev/sandpit/internal/secrets"
	"github.com/sandpit-dev/sandpit/internal/templates"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// keyedRoutes are the keyed routes the three wires register, as their
// handlers hold them (Routes.HandleKeyed), with the mount each is served
// under: the declarations themselves, not a reading of their source.
func keyedRoutes(t *testing.T) map[string]api.KeyMode {
	svc, st := testenv.FuzzService(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tpl := templates.New(templates.Config{}, st, svc.Idempotency(), svc.Events(), svc)
	auth := api.NewAuth(svc.Identity(), "tok")
	idem := api.NewIdempotency(svc.Idempotency(), api.IdempotencyConfig{})
	native := v1.New(svc, tpl, auth, nil, idem)
	sec := secrets.New(secrets.Config{Store: st})
	native.ServeSecrets(sec)
	surfaces := []struct {
		mount  string
		routes []api.Route
	}{
		{"", native.Routes()},
		{e2b.Prefix, e2b.New(svc, svc.Idempotency(), e2b.Config{Auth: auth, Keys: idem, Templates: tpl, Secrets: sec}).Routes()},
		{daytona.DefaultPrefix, daytona.New(ctx, svc, auth, daytona.Options{Idempotency: idem, Templates: tpl}).Routes()},
	}
	keyed := map[string]api.KeyMode{}
	for _, s := range surfaces {
		for _, rt := range s.routes {
			if rt.Keying.Mode == api.NotKeyed {
				continue
			}
			method, path, _ := strings.Cut(rt.Pattern, " ")
			keyed[method+" "+s.mount+path] = rt.Keying.Mode
		}
	}
	return keyed
}

// TestKeyedRoutesDocumented: docs/idempotency.md's table of keyed routes is
// exactly the keyed routes the three wires declare, so a route cannot take a
// key undocumented, nor the document promise one a route ignores.
func TestKeyedRoutesDocumented(t *testing.T) {
	declared := keyedRoutes(t)
	if len(declared) < 30 {
		t.Fatalf("found only %d keyed routes: has a wire stopped declaring its keyed routes?", len(declared))
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "idempotency.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok1 := strings.Cut(string(doc), "<!-- keyed-routes:begin -->")
	table, _, ok2 := strings.Cut(rest, "<!-- keyed-routes:end -->")
	if !ok1 || !ok2 {
		t.Fatal("docs/idempotency.md has no keyed-routes table")
	}
	// Each row says what a retry gets: a create's row says so, every other
	// row that the stored answer is replayed.
	documented := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| [^|]+ \\| `([^`]+)` \\| ([^|]+) \\|").FindAllStringSubmatch(table, -1) {
		documented[m[1]] = m[2]
	}
	var missing, extra []string
	for r, mode := range declared {
		retry, ok := documented[r]
		if !ok {
			missing = append(missing, r)
			continue
		}
		if create := mode == api.KeyedCreate || mode == api.KeyedByHandler; create != strings.HasPrefix(retry, "create:") {
			t.Errorf("%s: docs/idempotency.md says a retry gets %q, but the route is declared with key mode %d", r, retry, mode)
		}
	}
	for r := range documented {
		if _, ok := declared[r]; !ok {
			extra = append(extra, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	for _, r := range missing {
		t.Errorf("%s is keyed but not in docs/idempotency.md's table", r)
	}
	for _, r := range extra {
		t.Errorf("docs/idempotency.md lists %s, which no wire declares keyed", r)
	}
}
