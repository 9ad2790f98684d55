// Package openapi holds the contract of the native API (/v1): an OpenAPI 3.1
// document written by hand, embedded in the binary and served at
// /v1/openapi.json. The black-box tests validate every /v1 exchange against
// it (test/harness), so the document is checked, not merely published.
package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"

	"go.yaml.in/yaml/v3"
)

//go:embed openapi.yaml
var document []byte

// YAML returns the document as written.
func YAML() []byte { return document }

// JSON returns the document converted to JSON, as /v1/openapi.json serves it.
func JSON() ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(document, &v); err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	return json.Marshal(jsonable(v))
}

// jsonable turns YAML's map[any]any (keys that are not all strings) into
// JSON objects.
func jsonable(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = jsonable(e)
		}
		return t
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range t {
			t[i] = jsonable(e)
		}
		return t
	default:
		return v
	}
}
