package caddy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
)

// ErrAdmin wraps every answer of the admin API that is not a success, and
// every failure to reach it, so callers can tell "Caddy refused or is down"
// from a bug in sandpit.
var ErrAdmin = errors.New("caddy admin API")

// errUnreachable is a request that got no answer: Caddy is down, or it was
// restarting its admin endpoint, which it does after every config change.
var errUnreachable = errors.New("no answer")

// errMissing is an admin API answer that names a path or @id that does not
// exist: the object is absent, which is an answer, not a failure.
var errMissing = errors.New("not in caddy's config")

// admin is a small client of Caddy's admin API: /config/<path> and
// /id/<@id>, with JSON bodies.
type admin struct {
	base string
	hc   *http.Client
}

// do sends one request and decodes a JSON answer into out (when not nil).
// A 404 and Caddy's "does not exist" answers become errMissing.
func (a *admin) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// Caddy restarts its admin endpoint after every config change, closing
	// kept-alive connections. Marking every request replayable lets the
	// transport resend one that met such a closed connection before Caddy
	// read it; each operation reads before it writes, so a resend is safe.
	// Kept-alive connections matter: without them every admin call takes a
	// new loopback port, and thousands of them in a burst can collide with
	// the host ports TCP forwards are about to listen on.
	req.Header.Set("Idempotency-Key", "sandpit")
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w: %s %s: %v", ErrAdmin, errUnreachable, method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%w: %s %s: read answer: %v", ErrAdmin, method, path, err)
	}
	if resp.StatusCode >= 300 {
		msg := strings.TrimSpace(string(b))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		// Caddy answers a missing @id with 404 and, depending on the
		// version, a missing key with 404 or with an error naming it.
		if resp.StatusCode == http.StatusNotFound || strings.Contains(msg, "does not exist") ||
			strings.Contains(msg, "unknown object ID") || strings.Contains(msg, "invalid traversal path") {
			return fmt.Errorf("%w: %s %s: %s", errMissing, method, path, msg)
		}
		return fmt.Errorf("%w: %s %s: %d %s", ErrAdmin, method, path, resp.StatusCode, msg)
	}
	if out != nil && len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%w: %s %s: decode answer: %v", ErrAdmin, method, path, err)
		}
	}
	return nil
}

// get reads one object; found is false when it does not exist.
func (a *admin) get(ctx context.Context, path string) (v any, found bool, err error) {
	err = a.do(ctx, http.MethodGet, path, nil, &v)
	if errors.Is(err, errMissing) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return v, v != nil, nil
}

// sameJSON reports whether a value read back from Caddy equals the one sandpit
// would write, comparing both as decoded JSON.
func sameJSON(have, want any) bool {
	b, err := json.Marshal(want)
	if err != nil {
		return false
	}
	var w any
	if err := json.Unmarshal(b, &w); err != nil {
		return false
	}
	return reflect.DeepEqual(have, w)
}

// lookup walks a decoded config along path; ok is false when a key is missing.
func lookup(root any, path ...string) (v any, depth int, ok bool) {
	v = root
	for i, k := range path {
		m, isMap := v.(map[string]any)
		if !isMap {
			return nil, i, false
		}
		next, has := m[k]
		if !has || next == nil {
			return nil, i, false
		}
		v = next
	}
	return v, len(path), true
}

// nest wraps value in one object per key: nest(v, "a", "b") is {"a":{"b":v}}.
func nest(value any, keys ...string) any {
	for i := len(keys) - 1; i >= 0; i-- {
		value = map[string]any{keys[i]: value}
	}
	return value
}

// setPath writes value at path in Caddy's config, creating the missing
// parents: Caddy cannot traverse a path whose parents do not exist, so the
// value is wrapped in the missing levels and set at the deepest existing one.
// root is the config as last read.
func (a *admin) setPath(ctx context.Context, root any, value any, path ...string) error {
	if root == nil {
		return a.do(ctx, http.MethodPost, "/config/", nest(value, path...), nil)
	}
	_, depth, _ := lookup(root, path...)
	if depth == len(path) {
		depth = len(path) - 1
	}
	return a.do(ctx, http.MethodPost, "/config/"+strings.Join(path[:depth+1], "/"), nest(value, path[depth+1:]...), nil)
}
