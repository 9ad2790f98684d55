package daytona

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExecute(t *testing.T) {
	e := newEnv(t)
	sb := e.create(map[string]any{"name": "exec"})
	run := func(body map[string]any) (int, ExecuteResponse, []byte) {
		code, b := e.do("POST", "/daytona/toolbox/"+sb.ID+"/process/execute", body)
		var res ExecuteResponse
		if code == 200 {
			res = decode[ExecuteResponse](t, b)
		}
		return code, res, b
	}
	if code, res, b := run(map[string]any{"command": "echo hello"}); code != 200 || res.ExitCode != 0 || res.Result != "hello\n" {
		t.Fatalf("echo hello: %d %s", code, b)
	}
	// A failing command is still a 200; stdout and stderr keep their order.
	if code, res, b := run(map[string]any{"command": "echo out; echo err >&2; echo out2; exit 3"}); code != 200 || res.ExitCode != 3 || res.Result != "out\nerr\nout2\n" {
		t.Fatalf("failing command: %d %s", code, b)
	}
	dir := "/tmp/work"
	if code, _, b := run(map[string]any{"command": "mkdir -p " + dir}); code != 200 {
		t.Fatalf("mkdir: %d %s", code, b)
	}
	if code, res, b := run(map[string]any{"command": `echo "$X" && pwd`, "cwd": dir, "envs": map[string]string{"X": "a b"}}); code != 200 || res.Result != "a b\n"+dir+"\n" {
		t.Fatalf("env and cwd: %d %s", code, b)
	}
	// By name too.
	if code, _ := e.do("POST", "/daytona/toolbox/exec/process/execute", map[string]any{"command": "true"}); code != 200 {
		t.Fatalf("execute by name: %d", code)
	}
	start := time.Now()
	code, b := e.do("POST", "/daytona/toolbox/"+sb.ID+"/process/execute", map[string]any{"command": "sleep 20", "timeout": 1})
	body := decode[ErrorBody](t, b)
	if code != http.StatusRequestTimeout || body.Code != codeExecTimeout || body.Source != sourceDaemon {
		t.Fatalf("timeout: %d %s", code, b)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the timeout took %s", d)
	}
	for _, bad := range []map[string]any{
		{"command": ""}, {"command": "x", "timeout": -1}, {"command": "x", "envs": map[string]string{"A-B": "1"}},
		{"command": "true", "cwd": filepath.Join(dir, "missing")},
	} {
		if code, b := e.do("POST", "/daytona/toolbox/"+sb.ID+"/process/execute", bad); code != 400 {
			t.Errorf("execute %v: %d %s", bad, code, b)
		}
	}
	if code, b := e.do("POST", "/daytona/toolbox/nope/process/execute", map[string]any{"command": "true"}); code != 404 {
		t.Fatalf("unknown sandbox: %d %s", code, b)
	}
	// A stopped sandbox has no agent to run anything: 409.
	if code, b := e.do("POST", "/daytona/sandbox/exec/stop", nil); code != 200 {
		t.Fatalf("stop: %d %s", code, b)
	}
	if code, b := e.do("POST", "/daytona/toolbox/exec/process/execute", map[string]any{"command": "true"}); code != 409 {
		t.Fatalf("execute on a stopped sandbox: %d %s", code, b)
	}
}

// upload sends a bulk upload the way the SDK builds it.
func (e *env) upload(id string, files map[string][]byte, order []string) (int, []byte) {
	e.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for i, p := range order {
		_ = mw.WriteField(fmt.Sprintf("files[%d].path", i), p)
		h := partHeader(fmt.Sprintf("files[%d].file", i), p, "application/octet-stream")
		w, _ := mw.CreatePart(h)
		_, _ = w.Write(files[p])
	}
	_ = mw.Close()
	req, _ := http.NewRequest("POST", e.srv.URL+"/daytona/toolbox/"+id+"/files/bulk-upload", &buf)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// downloaded is one part of a bulk download.
type downloaded struct {
	field, filename string
	body            []byte
	contentType     string
}

func (e *env) download(id string, paths ...string) []downloaded {
	e.t.Helper()
	j, _ := json.Marshal(DownloadRequest{Paths: paths})
	req, _ := http.NewRequest("POST", e.srv.URL+"/daytona/toolbox/"+id+"/files/bulk-download", bytes.NewReader(j))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "multipart/form-data")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != 200 || err != nil || mt != "multipart/form-data" {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("download: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	mr := multipart.NewReader(resp.Body, params["boundary"])
	var out []downloaded
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			e.t.Fatal(err)
		}
		_, dp, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		b, _ := io.ReadAll(p)
		out = append(out, downloaded{field: p.FormName(), filename: dp["filename"], body: b, contentType: p.Header.Get("Content-Type")})
	}
	return out
}

func TestFiles(t *testing.T) {
	e := newEnv(t)
	sb := e.create(map[string]any{"name": "files"})
	dir := "/tmp/files" // a path inside the sandbox
	big := make([]byte, 5<<20+3)
	_, _ = rand.Read(big)
	files := map[string][]byte{
		filepath.Join(dir, "sub", "big.bin"):       big,
		filepath.Join(dir, "sub", "ünï \"q\".txt"): []byte("unicode"),
		filepath.Join(dir, "empty"):                {},
	}
	order := []string{filepath.Join(dir, "sub", "big.bin"), filepath.Join(dir, "sub", "ünï \"q\".txt"), filepath.Join(dir, "empty")}
	if code, b := e.upload(sb.ID, files, order); code != 200 {
		t.Fatalf("upload: %d %s", code, b)
	}

	missing := filepath.Join(dir, "missing")
	parts := e.download(sb.ID, append(order, missing)...)
	if len(parts) != 4 {
		t.Fatalf("%d parts", len(parts))
	}
	for i, p := range order {
		if parts[i].field != "file" || parts[i].filename != p || !bytes.Equal(parts[i].body, files[p]) {
			t.Fatalf("part %d: field %q filename %q, %d bytes; want %q, %d bytes", i, parts[i].field, parts[i].filename, len(parts[i].body), p, len(files[p]))
		}
	}
	errPart := parts[3]
	var de downloadError
	if err := json.Unmarshal(errPart.body, &de); err != nil || errPart.field != "error" || errPart.filename != missing ||
		errPart.contentType != "application/json" || de.StatusCode != 404 || de.Code != codeFileNotFound || !strings.Contains(de.Message, "missing") {
		t.Fatalf("error part: %+v %s", errPart, errPart.body)
	}

	// Listing, info, folder, move, delete.
	code, b := e.do("GET", "/daytona/toolbox/"+sb.ID+"/files?path="+url.QueryEscape(filepath.Join(dir, "sub")), nil)
	list := decode[[]FileInfo](t, b)
	if code != 200 || len(list) != 2 {
		t.Fatalf("list: %d %s", code, b)
	}
	byName := map[string]FileInfo{}
	for _, f := range list {
		byName[f.Name] = f
	}
	if f := byName["big.bin"]; f.IsDir || f.Size != int64(len(big)) || f.Permissions == "" || f.Mode == "" || f.ModTime == "" {
		t.Fatalf("big.bin = %+v", f)
	}
	code, b = e.do("GET", "/daytona/toolbox/"+sb.ID+"/files?path="+url.QueryEscape(dir), nil)
	if l := decode[[]FileInfo](t, b); code != 200 || len(l) != 2 {
		t.Fatalf("list dir: %d %s", code, b)
	}
	code, b = e.do("GET", "/daytona/toolbox/"+sb.ID+"/files?path="+url.QueryEscape(dir)+"&depth=2", nil)
	if l := decode[[]FileInfo](t, b); code != 200 || len(l) != 4 {
		t.Fatalf("list depth 2: %d %s", code, b)
	}
	code, b = e.do("GET", "/daytona/toolbox/"+sb.ID+"/files?path="+url.QueryEscape(missing), nil)
	if body := decode[ErrorBody](t, b); code != 404 || body.Code != codeFileNotFound || body.Source != sourceDaemon {
		t.Fatalf("list missing: %d %s", code, b)
	}
	code, b = e.do("GET", "/daytona/toolbox/"+sb.ID+"/files/info?path="+url.QueryEscape(filepath.Join(dir, "sub")), nil)
	if f := decode[FileInfo](t, b); code != 200 || !f.IsDir || f.Name != "sub" {
		t.Fatalf("info: %d %s", code, b)
	}
	newDir := filepath.Join(dir, "a", "b")
	for range 2 { // creating an existing folder succeeds, as mkdir -p does
		if code, b := e.do("POST", "/daytona/toolbox/"+sb.ID+"/files/folder?path="+url.QueryEscape(newDir)+"&mode=755", nil); code != 200 {
			t.Fatalf("folder: %d %s", code, b)
		}
	}
	moved := filepath.Join(newDir, "moved")
	if code, b := e.do("POST", "/daytona/toolbox/"+sb.ID+"/files/move?source="+url.QueryEscape(filepath.Join(dir, "empty"))+"&destination="+url.QueryEscape(moved), nil); code != 200 {
		t.Fatalf("move: %d %s", code, b)
	}
	if code, b := e.do("DELETE", "/daytona/toolbox/"+sb.ID+"/files?path="+url.QueryEscape(filepath.Join(dir, "a")), nil); code != 400 {
		t.Fatalf("delete a directory without recursive: %d %s", code, b)
	}
	if code, b := e.do("DELETE", "/daytona/toolbox/"+sb.ID+"/files?path="+url.QueryEscape(filepath.Join(dir, "a"))+"&recursive=true", nil); code != 200 {
		t.Fatalf("delete: %d %s", code, b)
	}
	if code, _ := e.do("GET", "/daytona/toolbox/"+sb.ID+"/files/info?path="+url.QueryEscape(moved), nil); code != 404 {
		t.Fatalf("info after delete: %d", code)
	}

	for _, p := range []string{"user-home-dir", "work-dir"} {
		code, b := e.do("GET", "/daytona/toolbox/"+sb.ID+"/"+p, nil)
		if d := decode[map[string]string](t, b); code != 200 || !strings.HasPrefix(d["dir"], "/") {
			t.Fatalf("%s: %d %s", p, code, b)
		}
	}

	// Bad uploads.
	if code, b := e.do("POST", "/daytona/toolbox/"+sb.ID+"/files/bulk-upload", map[string]any{}); code != 400 {
		t.Fatalf("non-multipart upload: %d %s", code, b)
	}
	if code, b := e.do("POST", "/daytona/toolbox/"+sb.ID+"/files/bulk-download", map[string]any{"paths": []string{}}); code != 400 {
		t.Fatalf("empty download: %d %s", code, b)
	}
}

func TestContentDisposition(t *testing.T) {
	cases := map[string]string{
		"/tmp/a.txt":       `form-data; name="file"; filename="/tmp/a.txt"`,
		`/tmp/q"u\o.txt`:   `form-data; name="file"; filename="/tmp/q\"u\\o.txt"`,
		"/tmp/ü b'(x).txt": `form-data; name="file"; filename*=UTF-8''%2Ftmp%2F%C3%BC%20b%27%28x%29.txt`,
		"/tmp/new\nline":   `form-data; name="file"; filename*=UTF-8''%2Ftmp%2Fnew%0Aline`,
	}
	for in, want := range cases {
		got := contentDisposition("file", in)
		if got != want {
			t.Errorf("contentDisposition(%q) = %s; want %s", in, got, want)
		}
		// Whatever the form, a standard parser recovers the exact name.
		_, params, err := mime.ParseMediaType(got)
		if err != nil || params["filename"] != in {
			t.Errorf("parse %s: %q, %v; want %q", got, params["filename"], err, in)
		}
	}
}
