package sandpit_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestExecOutputCap: output over the 16 MiB cap is cut at the cap, flagged
// truncated, and the exit code is still the command's.
func TestExecOutputCap(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := d.Client()
	id := newSandbox(t, ctx, c)
	const limit = 16 << 20
	cases := []struct {
		name      string
		script    string
		wantLen   int
		truncated bool
	}{
		{"under the cap", "head -c 1000 /dev/zero | tr '\\0' y", 1000, false},
		{"over the cap", "head -c 17000000 /dev/zero | tr '\\0' y; exit 3", limit, true},
	}
	for _, tc := range cases {
		res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", tc.script}, TimeoutS: 120})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(res.Stdout) != tc.wantLen || res.Truncated != tc.truncated || strings.Trim(res.Stdout, "y") != "" {
			t.Errorf("%s: %d bytes, truncated %v; want %d bytes of y, truncated %v", tc.name, len(res.Stdout), res.Truncated, tc.wantLen, tc.truncated)
		}
		if tc.truncated && res.ExitCode != 3 {
			t.Errorf("%s: exit code %d, want 3", tc.name, res.ExitCode)
		}
	}
}

// TestBadInputIs4xx: input a client controls never yields a 5xx.
func TestBadInputIs4xx(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	many := url.Values{}
	for i := range 5000 {
		many.Add("label", "k"+strconv.Itoa(i)+"=v")
	}
	manyStates := url.Values{"state": {strings.Repeat("running,", 2000) + "running"}}
	cases := []struct {
		name, method, path, body string
		want                     int
	}{
		{"thousands of label filters", http.MethodGet, "/v1/sandboxes?" + many.Encode(), "", http.StatusBadRequest},
		{"thousands of state filters", http.MethodGet, "/v1/sandboxes?" + manyStates.Encode(), "", http.StatusBadRequest},
		{"unknown state", http.MethodGet, "/v1/sandboxes?state=bogus", "", http.StatusBadRequest},
		{"bad page token", http.MethodGet, "/v1/sandboxes?page_token=bm9wZQ", "", http.StatusBadRequest},
		{"huge cpu", http.MethodPost, "/v1/sandboxes", `{"cpu":1e308}`, http.StatusBadRequest},
		{"negative memory", http.MethodPost, "/v1/sandboxes", `{"memory_mb":-1}`, http.StatusBadRequest},
		{"bad image", http.MethodPost, "/v1/sandboxes", `{"image":"-x"}`, http.StatusBadRequest},
		{"unknown image", http.MethodPost, "/v1/sandboxes", `{"image":"sandpit/no-such-image:none"}`, http.StatusBadRequest},
		{"env with NUL", http.MethodPost, "/v1/sandboxes", `{"env":{"A":"x\u0000y"}}`, http.StatusBadRequest},
		{"label key too long", http.MethodPost, "/v1/sandboxes", `{"labels":{"` + strings.Repeat("k", 200) + `":"v"}}`, http.StatusBadRequest},
		{"port out of range", http.MethodPost, "/v1/sandboxes/nope/ports", `{"port":70000}`, http.StatusBadRequest},
		{"bad hostname", http.MethodPost, "/v1/sandboxes/nope/custom-domains", `{"hostname":"*.x","port":80}`, http.StatusBadRequest},
		{"exec on a missing sandbox", http.MethodPost, "/v1/sandboxes/nope/exec", `{"cmd":"true"}`, http.StatusNotFound},
	}
	for _, tc := range cases {
		st, code, msg, err := postJSON(ctx, d, tc.method, tc.path, tc.body, nil)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if st != tc.want {
			t.Errorf("%s: %d %s %q, want %d", tc.name, st, code, msg, tc.want)
		}
	}
	d.CheckConsistent(t)
}
