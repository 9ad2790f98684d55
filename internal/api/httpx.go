package api

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/api/route"
)

// MaxBodyBytes bounds control-plane JSON bodies; file uploads have their own.
const MaxBodyBytes = 1 << 20

// DecodeJSON reads a bounded JSON body into v, refusing unknown fields only
// when strict is set (the facades must accept fields their SDKs add later).
// An empty body decodes as {}.
func DecodeJSON(r *http.Request, v any, strict bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: limit is %d bytes", ErrBodyTooLarge, MaxBodyBytes)
		}
		return fmt.Errorf("%w: %v", ErrBadJSON, err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadJSON, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON value", ErrBadJSON)
	}
	return nil
}

// WriteJSON writes v as a JSON answer with status (route.WriteJSON, which
// the gateway shares).
func WriteJSON(w http.ResponseWriter, status int, v any) { route.WriteJSON(w, status, v) }

// TokenEqual compares a presented token with the daemon's in constant time.
func TokenEqual(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// BearerToken extracts the token of an "Authorization: Bearer" header.
func BearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// WebSocketBearerPrefix starts the WebSocket subprotocol that carries a
// token: a browser cannot put an Authorization header on a WebSocket, and a
// token in the URL would be written to access logs and browser history.
const WebSocketBearerPrefix = "bearer."

// IsWebSocket reports whether r asks to be upgraded to a WebSocket.
func IsWebSocket(r *http.Request) bool {
	return headerHas(r.Header, "Connection", "upgrade") && headerHas(r.Header, "Upgrade", "websocket")
}

// WebSocketBearer returns the token a WebSocket upgrade carries as the
// subprotocol "bearer.<token>", or "" when it carries none.
func WebSocketBearer(r *http.Request) string {
	if !IsWebSocket(r) {
		return ""
	}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if tok, ok := strings.CutPrefix(strings.TrimSpace(p), WebSocketBearerPrefix); ok && tok != "" {
				return tok
			}
		}
	}
	return ""
}

// headerHas reports whether a comma-separated header lists token (in any
// case).
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, p := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(p), token) {
				return true
			}
		}
	}
	return false
}
