package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/client"
)

// The resources' URIs: the caller's sandboxes, one sandbox, and a file of
// one (its absolute path after files/, as in
// sandpit://sandboxes/sb123/files/home/user/notes.txt).
const (
	sandboxesURI     = "sandpit://sandboxes"
	sandboxTemplate  = "sandpit://sandboxes/{id}"
	fileTemplate     = "sandpit://sandboxes/{id}/files/{+path}"
	sandboxURIPrefix = sandboxesURI + "/"
)

func (s *server) addResources(srv *sdk.Server) {
	srv.AddResource(&sdk.Resource{URI: sandboxesURI, Name: "sandboxes", Title: "Your sandboxes", MIMEType: "application/json",
		Description: "The sandboxes the token's owner has, as JSON."}, s.readSandboxes)
	srv.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: sandboxTemplate, Name: "sandbox", MIMEType: "application/json",
		Description: "One sandbox, as JSON."}, s.readSandboxResource)
	srv.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: fileTemplate, Name: "sandbox-file",
		Description: "A file of a sandbox, by its absolute path: text when it is UTF-8, else a blob."}, s.readSandboxResource)
}

func (s *server) resourceClient(req *sdk.ReadResourceRequest) (*client.Client, error) {
	var header http.Header
	if req != nil && req.Extra != nil {
		header = req.Extra.Header
	}
	return s.cfg.Client(header)
}

func (s *server) readSandboxes(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	c, err := s.resourceClient(req)
	if err != nil {
		return nil, err
	}
	out, err := s.list(ctx, c, nil)
	if err != nil {
		return nil, toolError("list sandboxes", err)
	}
	b, _ := json.Marshal(out)
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: sandboxesURI, MIMEType: "application/json", Text: string(b)}}}, nil
}

// parseResourceURI splits a sandbox or file URI into the sandbox and the
// file's path ("" for the sandbox itself).
func parseResourceURI(uri string) (id, path string, err error) {
	rest, ok := strings.CutPrefix(uri, sandboxURIPrefix)
	if !ok {
		return "", "", badInput("not a sandbox resource: %s", uri)
	}
	id, file, hasFile := strings.Cut(rest, "/")
	if id, err = url.PathUnescape(id); err != nil || id == "" {
		return "", "", badInput("no sandbox id in %s", uri)
	}
	if !hasFile {
		return id, "", nil
	}
	file, ok = strings.CutPrefix(file, "files/")
	if !ok || file == "" {
		return "", "", badInput("a file resource is sandpit://sandboxes/{id}/files/{path}, not %s", uri)
	}
	if path, err = url.PathUnescape(file); err != nil {
		return "", "", badInput("bad path in %s: %v", uri, err)
	}
	return id, "/" + strings.TrimPrefix(path, "/"), nil
}

func (s *server) readSandboxResource(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	id, path, err := parseResourceURI(uri)
	if err != nil {
		return nil, err
	}
	c, err := s.resourceClient(req)
	if err != nil {
		return nil, err
	}
	if path == "" {
		sb, err := c.Get(ctx, id)
		if err != nil {
			return nil, resourceError(uri, err)
		}
		b, _ := json.Marshal(sandboxOutput(sb))
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(b)}}}, nil
	}
	data, err := readBytes(ctx, c, id, path)
	if err != nil {
		return nil, resourceError(uri, err)
	}
	rc := &sdk.ResourceContents{URI: uri}
	if utf8.Valid(data) {
		rc.MIMEType, rc.Text = "text/plain", string(data)
	} else {
		rc.MIMEType, rc.Blob = "application/octet-stream", data
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{rc}}, nil
}

// resourceError is the protocol's not-found error for a sandbox or file
// that is not there (or is another owner's), else a plain error.
func resourceError(uri string, err error) error {
	var ae *client.Error
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return sdk.ResourceNotFoundError(uri)
	}
	return toolError("read "+uri, err)
}
