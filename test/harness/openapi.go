package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/sandpit-dev/sandpit/api/openapi"
)

// Contract checks /v1 exchanges against the OpenAPI document
// (api/openapi/openapi.yaml). Its Transport validates every request a test
// sends under /v1/ and every response it gets, so the daemon and the document
// cannot drift apart without a test failing.
//
// The rules:
//   - every response must match the document (status, content type, body);
//   - a request the document refuses must be refused by the daemon too
//     (4xx): tests send invalid requests on purpose, and the two must agree
//     that they are invalid;
//   - a request to a path the document does not describe must get the
//     daemon's 404 or 405 error body (tests probe unknown endpoints);
//   - /v1/sandboxes/{id}/agent/... forwards the agent's own protocol and is
//     not validated.
type Contract struct {
	router routers.Router

	mu         sync.Mutex
	violations []string
}

// LoadContract loads and validates the document.
func LoadContract() (*Contract, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapi.YAML())
	if err != nil {
		return nil, fmt.Errorf("load openapi document: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi document is invalid: %w", err)
	}
	r, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi router: %w", err)
	}
	return &Contract{router: r}, nil
}

// Violations returns every violation seen so far.
func (c *Contract) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.violations...)
}

func (c *Contract) violate(req *http.Request, format string, args ...any) error {
	msg := req.Method + " " + req.URL.Path + ": " + fmt.Sprintf(format, args...)
	c.mu.Lock()
	c.violations = append(c.violations, msg)
	c.mu.Unlock()
	return fmt.Errorf("openapi contract violation: %s", msg)
}

// Transport wraps base with the validation.
func (c *Contract) Transport(base http.RoundTripper) http.RoundTripper {
	return &validating{c: c, base: base}
}

type validating struct {
	c    *Contract
	base http.RoundTripper
}

// isJSON reports whether a Content-Type names JSON.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// validated are the requests under the contract.
func validated(req *http.Request) bool {
	p := req.URL.Path
	if !strings.HasPrefix(p, "/v1/") {
		return false
	}
	// The agent passthrough: /v1/sandboxes/{id}/agent/...
	parts := strings.SplitN(strings.TrimPrefix(p, "/v1/sandboxes/"), "/", 3)
	return !(strings.HasPrefix(p, "/v1/sandboxes/") && len(parts) >= 2 && parts[1] == "agent")
}

func (v *validating) RoundTrip(req *http.Request) (*http.Response, error) {
	if !validated(req) {
		return v.base.RoundTrip(req)
	}
	ctx := req.Context()
	route, params, findErr := v.c.router.FindRoute(req)

	// Buffer a JSON body so both the validator and the daemon read it;
	// other bodies (file uploads) stream and are not validated.
	var body []byte
	jsonBody := req.Body != nil && req.Body != http.NoBody && isJSON(req.Header.Get("Content-Type"))
	if jsonBody {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req = req.Clone(ctx)
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}

	var reqErr error
	if findErr == nil {
		check := req.Clone(ctx)
		opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}
		if jsonBody {
			check.Body = io.NopCloser(bytes.NewReader(body))
		} else {
			check.Body = http.NoBody
			opts.ExcludeRequestBody = true
		}
		reqErr = openapi3filter.ValidateRequest(ctx, &openapi3filter.RequestValidationInput{
			Request: check, PathParams: params, Route: route, Options: opts,
		})
	}

	resp, err := v.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if findErr != nil {
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
			return resp, nil
		}
		resp.Body.Close()
		return nil, v.c.violate(req, "the document describes no such operation, yet the daemon answered %d", resp.StatusCode)
	}
	if reqErr != nil && resp.StatusCode < 400 {
		resp.Body.Close()
		return nil, v.c.violate(req, "the daemon accepted (%d) a request the document refuses: %v", resp.StatusCode, reqErr)
	}

	// Validate the response. A JSON body is buffered (control-plane
	// answers are small) and handed back; a stream (events, file reads)
	// is checked for its status and content type only.
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true, IncludeResponseStatus: true}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                opts,
	}
	if isJSON(resp.Header.Get("Content-Type")) {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		in.SetBodyBytes(b)
	} else {
		opts.ExcludeResponseBody = true
	}
	if err := openapi3filter.ValidateResponse(ctx, in); err != nil {
		resp.Body.Close()
		return nil, v.c.violate(req, "response %d does not match the document: %v", resp.StatusCode, err)
	}
	return resp, nil
}
