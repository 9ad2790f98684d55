package mcp

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestIdempotencyKey(t *testing.T) {
	base := IdempotencyKey("http-S1", "create_sandbox", "n:7")
	if again := IdempotencyKey("http-S1", "create_sandbox", "n:7"); again != base {
		t.Fatalf("the same call gave %q and %q", base, again)
	}
	if !validHeaderKey(base) {
		t.Fatalf("%q is not a valid Idempotency-Key", base)
	}
	for _, tc := range []struct {
		name                 string
		session, tool, reqID string
	}{
		{"another session", "http-S2", "create_sandbox", "n:7"},
		{"the stdio session", "stdio-x", "create_sandbox", "n:7"},
		{"another tool", "http-S1", "delete_sandbox", "n:7"},
		{"another id", "http-S1", "create_sandbox", "n:8"},
		{"the string id 7", "http-S1", "create_sandbox", "s:7"},
		// Length-prefixed parts: moving a boundary changes the key.
		{"a shifted boundary", "http-S1c", "reate_sandbox", "n:7"},
	} {
		if k := IdempotencyKey(tc.session, tc.tool, tc.reqID); k == base {
			t.Errorf("%s: same key %q", tc.name, k)
		}
	}
}

// validHeaderKey is the daemon's rule for an Idempotency-Key.
func validHeaderKey(k string) bool {
	if len(k) < 1 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

func TestIDText(t *testing.T) {
	for _, tc := range []struct {
		id   any
		want string
	}{
		{float64(7), "n:7"}, // a decoded JSON number
		{"7", "s:7"},
		{"abc", "s:abc"},
	} {
		id, err := jsonrpc.MakeID(tc.id)
		if err != nil {
			t.Fatal(err)
		}
		if got := idText(id); got != tc.want {
			t.Errorf("idText(%v) = %q, want %q", tc.id, got, tc.want)
		}
	}
}

// metaOf decodes a tagged tools/call body's _meta.
func metaOf(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var msg struct {
		Params struct {
			Meta      map[string]any `json:"_meta"`
			Name      string         `json:"name"`
			Arguments map[string]any `json:"arguments"`
		} `json:"params"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	if msg.Params.Name != "create_sandbox" {
		t.Fatalf("name lost: %s", body)
	}
	return msg.Params.Meta
}

func TestTagBody(t *testing.T) {
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_sandbox","arguments":{"name":"a"},"_meta":{"progressToken":1,"` + requestIDMeta + `":"forged"}}}`
	meta := metaOf(t, tagBody([]byte(call)))
	if meta[requestIDMeta] != "n:7" {
		t.Errorf("request id %v, want n:7 (a client's own value is overwritten)", meta[requestIDMeta])
	}
	if meta["progressToken"] != float64(1) {
		t.Errorf("the client's own _meta was lost: %v", meta)
	}
	noMeta := metaOf(t, tagBody([]byte(`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"create_sandbox"}}`)))
	if noMeta[requestIDMeta] != "s:x" {
		t.Errorf("request id %v, want s:x", noMeta[requestIDMeta])
	}
	// Everything else passes unchanged.
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`not json`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}]`,
	} {
		if got := string(tagBody([]byte(body))); got != body {
			t.Errorf("%s was changed to %s", body, got)
		}
	}
}

func TestRequestIDFromParams(t *testing.T) {
	req := &sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Meta: sdk.Meta{requestIDMeta: "n:3"}}}
	if got := requestID(req); got != "n:3" {
		t.Errorf("requestID = %q", got)
	}
	if got := requestID(&sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{}}); got != "" {
		t.Errorf("untagged requestID = %q", got)
	}
}
