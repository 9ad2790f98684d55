package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestWireFormatMatchesE2BSDK posts exactly what the E2B JS SDK posts for
// commands.run("echo hello") and decodes the Connect envelopes by hand, so
// that the wire format (camelCase JSON, base64 bytes, end-stream flag) is
// pinned independently of connect-go's own client.
func TestWireFormatMatchesE2BSDK(t *testing.T) {
	e := newTestEnv(t)
	payload := []byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hello"]},"stdin":false}`)
	var body bytes.Buffer
	body.WriteByte(0)
	_ = binary.Write(&body, binary.BigEndian, uint32(len(payload)))
	body.Write(payload)

	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/process.Process/Start", &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Timeout-Ms", "60000")
	req.Header.Set("Keepalive-Ping-Interval", "50")
	req.SetBasicAuth("user", "")
	res, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d, content type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}

	type frame struct {
		flags byte
		data  string
	}
	var frames []frame
	for {
		var prefix [5]byte
		if _, err := io.ReadFull(res.Body, prefix[:]); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("read envelope prefix: %v", err)
		}
		data := make([]byte, binary.BigEndian.Uint32(prefix[1:]))
		if _, err := io.ReadFull(res.Body, data); err != nil {
			t.Fatalf("read envelope: %v", err)
		}
		frames = append(frames, frame{prefix[0], string(data)})
	}
	if len(frames) < 4 {
		t.Fatalf("want start, data, end and end-stream frames, got %v", frames)
	}
	for _, f := range frames[:len(frames)-1] {
		if f.flags != 0 {
			t.Fatalf("message frame with flags %#x: %v", f.flags, frames)
		}
	}
	last := frames[len(frames)-1]
	if last.flags != 0x02 || last.data != "{}" {
		t.Fatalf("end-stream frame %#x %q, want 0x02 {}", last.flags, last.data)
	}

	type event struct {
		Event map[string]json.RawMessage `json:"event"`
	}
	decode := func(s string) map[string]json.RawMessage {
		var ev event
		if err := json.Unmarshal([]byte(s), &ev); err != nil {
			t.Fatalf("frame %q: %v", s, err)
		}
		return ev.Event
	}

	var start struct {
		Pid uint32 `json:"pid"`
	}
	if raw, ok := decode(frames[0].data)["start"]; !ok || json.Unmarshal(raw, &start) != nil || start.Pid == 0 {
		t.Fatalf("first frame is not start{pid}: %s", frames[0].data)
	}

	var stdout strings.Builder
	for _, f := range frames[1 : len(frames)-2] {
		var data struct {
			Stdout string `json:"stdout"`
		}
		raw, ok := decode(f.data)["data"]
		if !ok || json.Unmarshal(raw, &data) != nil {
			t.Fatalf("unexpected frame %s", f.data)
		}
		b, err := base64.StdEncoding.DecodeString(data.Stdout)
		if err != nil {
			t.Fatalf("stdout is not base64: %s", f.data)
		}
		stdout.Write(b)
	}
	if stdout.String() != "hello\n" {
		t.Fatalf("stdout %q", stdout.String())
	}

	endFrame := frames[len(frames)-2].data
	var end map[string]any
	if raw, ok := decode(endFrame)["end"]; !ok || json.Unmarshal(raw, &end) != nil {
		t.Fatalf("frame before end-stream is not end: %s", endFrame)
	}
	// Proto3 JSON omits zero values, so a zero exit code is absent, which
	// the SDK reads as 0; exited and status are camelCase and present.
	if end["exited"] != true || end["status"] != "exit status 0" {
		t.Fatalf("end %s", endFrame)
	}
	if _, snake := end["exit_code"]; snake {
		t.Fatalf("snake_case field on the wire: %s", endFrame)
	}
}

// TestWireUnaryJSON checks a unary call the way the SDK makes it, including
// camelCase field names and the Connect error body.
func TestWireUnaryJSON(t *testing.T) {
	e := newTestEnv(t)
	dir := t.TempDir()
	post := func(path, body string) (int, map[string]any) {
		res, err := e.http.Post(e.srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		var out map[string]any
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return res.StatusCode, out
	}

	status, out := post("/filesystem.Filesystem/Stat", `{"path":"`+dir+`"}`)
	entry, _ := out["entry"].(map[string]any)
	if status != http.StatusOK || entry["type"] != "FILE_TYPE_DIRECTORY" || entry["modifiedTime"] == nil || entry["path"] != dir {
		t.Fatalf("Stat: %d %v", status, out)
	}

	status, out = post("/filesystem.Filesystem/Stat", `{"path":"`+dir+`/missing"}`)
	if status != http.StatusNotFound || out["code"] != "not_found" {
		t.Fatalf("Stat missing: %d %v", status, out)
	}

	status, out = post("/filesystem.Filesystem/MakeDir", `{"path":"`+dir+`"}`)
	if status != http.StatusConflict || out["code"] != "already_exists" {
		t.Fatalf("MakeDir existing: %d %v", status, out)
	}
}
