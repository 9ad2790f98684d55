package agent

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
)

// postInit calls POST /init with the given token and body.
func postInit(t *testing.T, e *testEnv, token string, body agentapi.InitRequest) int {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+agentapi.InitPath, bytes.NewReader(b))
	req.Header.Set(agentapi.AccessTokenHeader, token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestInitReplacesTokenEnvAndWorkdir is the adoption of a pooled agent: init
// with the pool token sets the sandbox's environment, working directory and
// token; afterwards the pool token is refused and the new one works.
func TestInitReplacesTokenEnvAndWorkdir(t *testing.T) {
	e := newTestEnv(t)
	wd := t.TempDir()

	if got := postInit(t, e, "wrong", agentapi.InitRequest{AccessToken: "x"}); got != http.StatusUnauthorized {
		t.Fatalf("init with a wrong token: status %d, want 401", got)
	}
	if got := postInit(t, e, testToken, agentapi.InitRequest{DefaultWorkdir: "relative"}); got != http.StatusBadRequest {
		t.Fatalf("init with a relative workdir: status %d, want 400", got)
	}
	if got := postInit(t, e, testToken, agentapi.InitRequest{
		EnvVars: map[string]string{"GREETING": "hello"}, AccessToken: "sandbox-token", DefaultWorkdir: wd,
	}); got != http.StatusNoContent {
		t.Fatalf("init: status %d, want 204", got)
	}

	// The old token no longer works.
	_, err := e.proc.Start(t.Context(), connect.NewRequest(shell("true")))
	if err == nil {
		stream, _ := e.proc.Start(t.Context(), connect.NewRequest(shell("true")))
		err = drain(stream).err
	}
	wantCode(t, err, connect.CodeUnauthenticated)

	e.http.Transport = tokenTransport{token: "sandbox-token", base: e.srv.Client().Transport}
	r := e.run(t, shell(`echo "$GREETING"; pwd`))
	wantExit(t, r, 0)
	if want := "hello\n" + wd + "\n"; r.stdout != want {
		t.Fatalf("stdout %q, want %q", r.stdout, want)
	}
	if got := postInit(t, e, testToken, agentapi.InitRequest{}); got != http.StatusUnauthorized {
		t.Fatalf("init with the replaced token: status %d, want 401", got)
	}
}
