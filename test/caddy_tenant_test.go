package sandpit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// askStatus is the on-demand TLS ask endpoint's answer for host.
func askStatus(t *testing.T, ctx context.Context, d *harness.Daemon, host string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/caddy/ask?domain="+host, nil)
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// operatorRoute is a route an operator writes into sandpit's Caddy server
// by hand.
func operatorRoute(match map[string]any, body string) map[string]any {
	return map[string]any{
		"match":    []any{match},
		"handle":   []any{map[string]any{"handler": "static_response", "status_code": 200, "body": body}},
		"terminal": true,
	}
}

// sandpitServerRoutes lists the @ids (or "operator") of the routes in
// sandpit's Caddy server, in order.
func sandpitServerRoutes(t *testing.T, cd *harness.Caddy) []string {
	t.Helper()
	var routes []map[string]any
	if _, err := cd.Admin(http.MethodGet, "/config/apps/http/servers/sandpit/routes", nil, &routes); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range routes {
		id, _ := r["@id"].(string)
		if id == "" {
			id = "operator"
		}
		out = append(out, id)
	}
	return out
}

// TestCaddyTenantCannotShadowOperator reproduces the Caddy hijack: the
// operator serves its API hostname from a route of its own in sandpit's
// Caddy server, and a tenant binds that hostname. The bind is a 400 and
// binds nothing, the ask endpoint keeps refusing the name, and the name keeps
// serving the operator's route. A hostname the tenant may bind goes in after
// the operator's routes (an operator route matching by path still wins on
// it), and a bound hostname the operator takes over later gets no
// certificate.
func TestCaddyTenantCannotShadowOperator(t *testing.T) {
	t.Parallel()
	for _, rc := range routerCases[1:] {
		t.Run("router="+rc.name, func(t *testing.T) {
			t.Parallel()
			d, cd := startRouted(t, rc, harness.Options{})
			ctx := ctxFor(t, 3*time.Minute)
			const api = "api.operator.test"
			for _, r := range []map[string]any{
				operatorRoute(map[string]any{"host": []any{api}}, "operator api"),
				operatorRoute(map[string]any{"path": []any{"/operator/*"}}, "operator path"),
			} {
				if _, err := cd.Admin(http.MethodPut, "/config/apps/http/servers/sandpit/routes/0", r, nil); err != nil {
					t.Fatal(err)
				}
			}
			port := proxyPort(t, d)
			if st, body := hostGet(t, ctx, d.ProxyAddr, api+":"+port); st != http.StatusOK || body != "operator api" {
				t.Fatalf("the operator's route before the attempt: %d %q", st, body)
			}

			tc, tok := tenant(t, ctx, d, "mallory", nil)
			sb, err := tc.Create(ctx, client.CreateRequest{})
			if err != nil {
				t.Fatal(err)
			}
			startHTTPD(t, ctx, d.Client(), sb.ID, 8080, "tenant page")
			if _, err := tc.ExposePort(ctx, sb.ID, 8080, "http"); err != nil {
				t.Fatal(err)
			}

			if st, code, msg := bindAs(t, ctx, d, tok, sb.ID, api, 8080); st != http.StatusBadRequest {
				t.Fatalf("tenant binds the operator's API hostname: %d %s %s, want 400", st, code, msg)
			}
			if ds, err := tc.ListDomains(ctx, sb.ID); err != nil || len(ds) != 0 {
				t.Fatalf("domains after the refusal: %+v %v", ds, err)
			}
			if got := askStatus(t, ctx, d, api); got != http.StatusForbidden {
				t.Fatalf("ask for the operator's hostname: %d, want 403", got)
			}
			if st, body := hostGet(t, ctx, d.ProxyAddr, api+":"+port); st != http.StatusOK || body != "operator api" {
				t.Fatalf("the operator's hostname after the attempt: %d %q", st, body)
			}

			const shop = "shop.example.test"
			if st, code, msg := bindAs(t, ctx, d, tok, sb.ID, shop, 8080); st != http.StatusCreated {
				t.Fatalf("bind %s: %d %s %s", shop, st, code, msg)
			}
			testkit.Eventually(t, 10*time.Second, "the tenant's hostname", func() error {
				if st, body := hostGet(t, ctx, d.ProxyAddr, shop+":"+port); st != http.StatusOK || body != "tenant page" {
					return fmt.Errorf("%d %q", st, body)
				}
				return nil
			})
			// The operator's path route comes first on the tenant's
			// hostname too.
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.ProxyAddr+"/operator/x", nil)
			req.Host = shop + ":" + port
			resp, err := noKeepAlive.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(b) != "operator path" {
				t.Fatalf("the operator's path route on a tenant's hostname: %d %q, want the operator's answer", resp.StatusCode, b)
			}
			order := sandpitServerRoutes(t, cd)
			lastOperator, firstSandpit := -1, len(order)
			for i, id := range order {
				if id == "operator" {
					lastOperator = i
				} else if i < firstSandpit {
					firstSandpit = i
				}
			}
			if lastOperator > firstSandpit {
				t.Fatalf("sandpit's routes stand before the operator's: %v", order)
			}
			if got := askStatus(t, ctx, d, shop); got != http.StatusOK {
				t.Fatalf("ask for a bound hostname: %d, want 200", got)
			}

			// The operator takes the name over: no certificate for the
			// tenant's binding from then on.
			if _, err := cd.Admin(http.MethodPut, "/config/apps/http/servers/sandpit/routes/0", operatorRoute(map[string]any{"host": []any{shop}}, "operator shop"), nil); err != nil {
				t.Fatal(err)
			}
			if got := askStatus(t, ctx, d, shop); got != http.StatusForbidden {
				t.Fatalf("ask for a hostname the operator took over: %d, want 403", got)
			}
		})
	}
}

// TestCaddyE2BPortRoutes: under Caddy an E2B sandbox's every-port route
// reaches the port the host names, on both host forms (it dialled port 0),
// and one created with allowPublicTraffic false serves only requests with its
// traffic token (it served everyone); the agent's own route needs no
// traffic token, as with the builtin router.
func TestCaddyE2BPortRoutes(t *testing.T) {
	t.Parallel()
	for _, rc := range routerCases[1:] {
		t.Run("router="+rc.name, func(t *testing.T) {
			t.Parallel()
			d, _ := startRouted(t, rc, harness.Options{})
			c := d.Client()
			ctx := ctxFor(t, 3*time.Minute)
			port := proxyPort(t, d)
			for _, tc := range []struct {
				name    string
				body    string
				private bool
			}{
				{"public", `{"templateID":"base","metadata":{"t":"public"}}`, false},
				{"private", `{"templateID":"base","metadata":{"t":"private"},"network":{"allowPublicTraffic":false}}`, true},
			} {
				status, body := e2bCreate(t, ctx, d, tc.body)
				if status != http.StatusCreated {
					t.Fatalf("%s create: %d %s", tc.name, status, body)
				}
				var created struct {
					SandboxID          string `json:"sandboxID"`
					TrafficAccessToken string `json:"trafficAccessToken"`
				}
				if err := json.Unmarshal(body, &created); err != nil {
					t.Fatal(err)
				}
				id, tok := created.SandboxID, created.TrafficAccessToken
				startHTTPD(t, ctx, c, id, 8000, "e2b "+tc.name)
				hosts := []string{"8000-" + id + ".localhost:" + port, id + "-8000.localhost:" + port}
				for _, h := range hosts {
					testkit.Eventually(t, 10*time.Second, tc.name+" "+h+" with the token", func() error {
						if st, body := hostGet(t, ctx, d.ProxyAddr, h, "E2b-Traffic-Access-Token", tok); st != http.StatusOK || body != "e2b "+tc.name {
							return fmt.Errorf("%d %q", st, body)
						}
						return nil
					})
					want := http.StatusOK
					if tc.private {
						want = http.StatusForbidden
					}
					if st, body := hostGet(t, ctx, d.ProxyAddr, h); st != want {
						t.Fatalf("%s %s without a traffic token: %d %q, want %d", tc.name, h, st, body, want)
					}
					if tc.private {
						if st, _ := hostGet(t, ctx, d.ProxyAddr, h, "E2b-Traffic-Access-Token", "wrong"); st != http.StatusForbidden {
							t.Fatalf("%s with a wrong traffic token: %d, want 403", h, st)
						}
					}
				}
				// The agent's port has its own route, ahead of the
				// every-port one.
				if st, body := hostGet(t, ctx, d.ProxyAddr, "49983-"+id+".localhost:"+port); st == http.StatusForbidden || st == http.StatusBadGateway {
					t.Fatalf("%s agent route without a traffic token: %d %q, want the agent's own answer", tc.name, st, body)
				}
			}
		})
	}
}
