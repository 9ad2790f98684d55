package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// requestIDMeta is the _meta key under which the server hands a tool call
// its own JSON-RPC request id. The SDK keeps the id to itself (a tool
// handler sees only the params), so the transports copy it into the params
// as each tools/call arrives; whatever a client put under this key is
// overwritten.
const requestIDMeta = "dev.sandpit/request-id"

// methodCallTool is the JSON-RPC method of a tool call.
const methodCallTool = "tools/call"

// idText is the canonical text of a JSON-RPC request id: the number 7 and
// the string "7" are different ids, so their texts differ.
func idText(id jsonrpc.ID) string {
	switch v := id.Raw().(type) {
	case int64:
		return fmt.Sprintf("n:%d", v)
	case string:
		return "s:" + v
	}
	return ""
}

// IdempotencyKey is the Idempotency-Key of the daemon call a mutating tool
// call makes: a digest of the MCP session, the tool and the call's JSON-RPC
// request id. JSON-RPC lets a client send the same id again only to repeat
// the same request, so within one session the id names one logical call,
// and a client that re-sends a tools/call (after a lost answer, or after
// reconnecting to its session) gets the same key, and the daemon answers
// with what the first attempt made. The session is in the key because
// clients number their requests from 0 or 1 in every session: the third
// call of today's session is not yesterday's. The owner is not: the
// daemon scopes every key by the owner of the token already, so two
// owners' equal keys never meet.
func IdempotencyKey(session, tool, requestID string) string {
	h := sha256.New()
	for _, part := range []string{"sandpit-mcp", session, tool, requestID} {
		// Length-prefixed, so that no two different triples hash alike.
		fmt.Fprintf(h, "%d:%s;", len(part), part)
	}
	return "mcp-" + hex.EncodeToString(h.Sum(nil)[:20])
}

// tagParams returns a tools/call's params with the request id put under
// requestIDMeta in their _meta. Params it cannot read are returned as they
// are, for the SDK to refuse.
func tagParams(params json.RawMessage, id string) json.RawMessage {
	var p map[string]json.RawMessage
	if len(params) == 0 {
		p = map[string]json.RawMessage{}
	} else if err := json.Unmarshal(params, &p); err != nil || p == nil {
		return params
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := p["_meta"]; ok {
		if err := json.Unmarshal(raw, &meta); err != nil || meta == nil {
			return params
		}
	}
	idJSON, _ := json.Marshal(id)
	meta[requestIDMeta] = idJSON
	metaJSON, _ := json.Marshal(meta)
	p["_meta"] = metaJSON
	out, err := json.Marshal(p)
	if err != nil {
		return params
	}
	return out
}

// tagMessage tags msg in place when it is a tools/call.
func tagMessage(msg jsonrpc.Message) {
	if r, ok := msg.(*jsonrpc.Request); ok && r.Method == methodCallTool && r.ID.IsValid() {
		r.Params = tagParams(r.Params, idText(r.ID))
	}
}

// tagBody tags a Streamable HTTP POST body holding one JSON-RPC message
// (the protocol sends one per POST); any other body is returned unchanged.
func tagBody(body []byte) []byte {
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return body
	}
	r, ok := msg.(*jsonrpc.Request)
	if !ok || r.Method != methodCallTool || !r.ID.IsValid() {
		return body
	}
	tagMessage(r)
	out, err := jsonrpc.EncodeMessage(r)
	if err != nil {
		return body
	}
	return out
}

// requestID is the request id the transport put in a tool call's params.
func requestID(req *sdk.CallToolRequest) string {
	if req == nil || req.Params == nil {
		return ""
	}
	id, _ := req.Params.Meta[requestIDMeta].(string)
	return id
}

// taggingTransport is a transport whose tools/call requests carry their
// request id in their params (see requestIDMeta).
type taggingTransport struct{ sdk.Transport }

func (t taggingTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return taggingConn{c}, nil
}

type taggingConn struct{ sdk.Connection }

func (c taggingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err == nil {
		tagMessage(msg)
	}
	return msg, err
}
