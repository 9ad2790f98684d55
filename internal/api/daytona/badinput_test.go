package daytona

import (
	"net/http"
	"testing"
)

// TestNewEndpointsRefuseBadInput: each refusal is a clear 4xx in Daytona's
// error shape and changes nothing.
func TestNewEndpointsRefuseBadInput(t *testing.T) {
	e := newEnv(t)
	sb := e.create(map[string]any{"name": "bad-input", "autoStopInterval": 7})
	tb := "/daytona/toolbox/" + sb.ID
	for _, tc := range []struct {
		name, method, path string
		body               any
		want               int
	}{
		{"interval not a number", "POST", "/daytona/sandbox/" + sb.ID + "/autostop/x", nil, http.StatusBadRequest},
		{"negative autostop", "POST", "/daytona/sandbox/" + sb.ID + "/autostop/-1", nil, http.StatusBadRequest},
		{"autostop past 30 days", "POST", "/daytona/sandbox/" + sb.ID + "/autostop/50000", nil, http.StatusBadRequest},
		{"interval of a missing sandbox", "POST", "/daytona/sandbox/nope/autostop/1", nil, http.StatusNotFound},
		{"last-activity of a missing sandbox", "POST", "/daytona/sandbox/nope/last-activity", nil, http.StatusNotFound},
		{"session id with a slash", "POST", tb + "/process/session", map[string]any{"sessionId": "a/b"}, http.StatusBadRequest},
		{"session id quote", "POST", tb + "/process/session", map[string]any{"sessionId": "a'b"}, http.StatusBadRequest},
		{"exec in a missing session", "POST", tb + "/process/session/none/exec", map[string]any{"command": "true"}, http.StatusNotFound},
		{"empty session command", "POST", tb + "/process/session/none/exec", map[string]any{"command": " "}, http.StatusBadRequest},
		{"pty too large", "POST", tb + "/process/pty", map[string]any{"id": "p", "cols": 5000, "rows": 10}, http.StatusBadRequest},
		{"pty bad env name", "POST", tb + "/process/pty", map[string]any{"id": "p", "envs": map[string]string{"A B": "x"}}, http.StatusBadRequest},
		{"resize a missing pty", "POST", tb + "/process/pty/none/resize", map[string]any{"cols": 10, "rows": 10}, http.StatusNotFound},
		{"permissions bad mode", "POST", tb + "/files/permissions?path=/tmp&mode=rwx", nil, http.StatusBadRequest},
		{"permissions bad owner", "POST", tb + "/files/permissions?path=/tmp&owner=a%3Bb", nil, http.StatusBadRequest},
		{"permissions with nothing to set", "POST", tb + "/files/permissions?path=/tmp", nil, http.StatusBadRequest},
		{"find without pattern", "GET", tb + "/files/find?path=/tmp", nil, http.StatusBadRequest},
		{"replace without files", "POST", tb + "/files/replace", map[string]any{"pattern": "a", "newValue": "b"}, http.StatusBadRequest},
		{"git without path", "GET", tb + "/git/status", nil, http.StatusBadRequest},
		{"git option as a branch", "POST", tb + "/git/checkout", map[string]any{"path": "/tmp", "branch": "--orphan"}, http.StatusBadRequest},
		{"codeRun unknown language", "POST", tb + "/process/code-run", map[string]any{"code": "1", "language": "cobol"}, http.StatusBadRequest},
		{"signed url bad expiry", "GET", "/daytona/sandbox/" + sb.ID + "/ports/3000/signed-preview-url?expiresInSeconds=0", nil, http.StatusBadRequest},
		{"missing snapshot", "GET", "/daytona/snapshots/nope", nil, http.StatusNotFound},
		{"ssh access without an ssh endpoint", "POST", "/daytona/sandbox/" + sb.ID + "/ssh-access?expiresInMinutes=5", nil, http.StatusNotImplemented},
		{"validate ssh access without a token", "GET", "/daytona/sandbox/ssh-access/validate", nil, http.StatusBadRequest},
		{"expire a made-up token", "POST", "/daytona/sandbox/" + sb.ID + "/ports/3000/signed-preview-url/abc/expire", nil, http.StatusBadRequest},
		{"expire on a bad port", "POST", "/daytona/sandbox/" + sb.ID + "/ports/0/signed-preview-url/abc/expire", nil, http.StatusBadRequest},
		{"expire for a missing sandbox", "POST", "/daytona/sandbox/nope/ports/3000/signed-preview-url/abc/expire", nil, http.StatusNotFound},
		{"input to a missing session", "POST", tb + "/process/session/none/command/abc/input", map[string]any{"data": "x"}, http.StatusNotFound},
		{"input with NUL", "POST", tb + "/process/session/none/command/abc/input", map[string]any{"data": "a\x00b"}, http.StatusBadRequest},
		{"input bad command id", "POST", tb + "/process/session/none/command/a'b/input", map[string]any{"data": "x"}, http.StatusBadRequest},
		{"context of another language", "POST", tb + "/process/interpreter/context", map[string]any{"language": "ruby"}, http.StatusBadRequest},
		{"delete a missing context", "DELETE", tb + "/process/interpreter/context/none", nil, http.StatusNotFound},
		{"git reset bad mode", "POST", tb + "/git/reset", map[string]any{"path": "/tmp", "mode": "sideways"}, http.StatusBadRequest},
		{"git restore without files", "POST", tb + "/git/restore", map[string]any{"path": "/tmp"}, http.StatusBadRequest},
		{"git config bad scope", "POST", tb + "/git/config", map[string]any{"key": "a.b", "value": "c", "scope": "planet"}, http.StatusBadRequest},
		{"git config local without path", "GET", tb + "/git/config?key=a.b&scope=local", nil, http.StatusBadRequest},
		{"git remote url as an option", "POST", tb + "/git/remotes", map[string]any{"path": "/tmp", "name": "x", "url": "--upload-pack=x"}, http.StatusBadRequest},
		{"git credentials with a newline", "POST", tb + "/git/credentials", map[string]any{"username": "u", "password": "a\nb"}, http.StatusBadRequest},
		{"lsp for typescript without its server", "POST", tb + "/lsp/start", map[string]any{"languageId": "typescript", "pathToProject": "/tmp"}, http.StatusNotImplemented},
		{"lsp unknown language", "POST", tb + "/lsp/start", map[string]any{"languageId": "cobol", "pathToProject": "/tmp"}, http.StatusBadRequest},
		{"lsp without project", "POST", tb + "/lsp/start", map[string]any{"languageId": "python"}, http.StatusBadRequest},
		{"lsp symbols before start", "GET", tb + "/lsp/document-symbols?languageId=python&pathToProject=/tmp&uri=file:///tmp/x.py", nil, http.StatusBadRequest},
		{"lsp completions without position", "POST", tb + "/lsp/completions", map[string]any{"languageId": "python", "pathToProject": "/tmp", "uri": "file:///tmp/x.py"}, http.StatusBadRequest},
	} {
		code, b := e.do(tc.method, tc.path, tc.body)
		if code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, b, tc.want)
			continue
		}
		if eb := decode[ErrorBody](t, b); eb.StatusCode != code || eb.Message == "" {
			t.Errorf("%s: error body %s", tc.name, b)
		}
	}
	code, b := e.do("GET", "/daytona/sandbox/"+sb.ID, nil)
	if got := decode[Sandbox](t, b); code != 200 || got.AutoStopInterval != 7 {
		t.Errorf("after refusals: %d autoStopInterval %d, want 7", code, got.AutoStopInterval)
	}
}
