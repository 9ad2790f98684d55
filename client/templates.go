package client

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit/apitypes"
)

type (
	// Template is a template as the API returns it.
	Template = apitypes.Template
	// TemplateBuild is one build of a template.
	TemplateBuild = apitypes.TemplateBuild
	// BuildTemplateRequest builds a template from a Dockerfile and its
	// uploaded context.
	BuildTemplateRequest = apitypes.BuildTemplateRequest
	// BuildTemplateResponse is the template and the build a build request
	// started (or joined, or replayed).
	BuildTemplateResponse = apitypes.BuildTemplateResponse
	// BuildLogEntry is one line of a build's log.
	BuildLogEntry = apitypes.BuildLogEntry
	// TemplateFiles places an uploaded archive in a build's context.
	TemplateFiles = apitypes.TemplateFiles
)

// FilesHash is the name an archive is uploaded under: the hex SHA-256 of its
// bytes, which the daemon checks.
func FilesHash(archive []byte) string {
	h := sha256.Sum256(archive)
	return hex.EncodeToString(h[:])
}

// UploadTemplateFiles uploads a tar archive (gzipped or not) of build
// context files and returns its hash, to name in BuildTemplateRequest.Context
// or Files. An archive the daemon already holds is not sent again. The upload
// is named by its content, so sending it twice changes nothing and it is
// retried like a read.
func (c *Client) UploadTemplateFiles(ctx context.Context, archive []byte) (string, error) {
	hash := FilesHash(archive)
	p := "/v1/templates/files/" + hash
	_, err := c.do(ctx, request{method: http.MethodGet, path: p, idempotent: true}, nil)
	if err == nil {
		return hash, nil
	}
	if !IsCode(err, apitypes.CodeNotFound) {
		return "", err
	}
	_, err = c.do(ctx, request{method: http.MethodPut, path: p, raw: archive, idempotent: true,
		header: http.Header{"Content-Type": {"application/octet-stream"}}}, nil)
	return hash, err
}

// BuildTemplate starts a build of the caller's template req.Name (made on
// its first build) and returns at once, with the build running. It is safe to
// retry: the call carries an Idempotency-Key, and a second request with the
// same definition joins the running build or replays the finished one
// anyway.
func (c *Client) BuildTemplate(ctx context.Context, req BuildTemplateRequest) (BuildTemplateResponse, error) {
	var out BuildTemplateResponse
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/templates", body: req, idempotent: true, keyed: true}, &out)
	return out, err
}

// GetTemplate returns a template by name, name:tag or id.
func (c *Client) GetTemplate(ctx context.Context, ref string) (Template, error) {
	var t Template
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/templates/" + url.PathEscape(ref), idempotent: true}, &t)
	return t, err
}

// ListTemplates returns the caller's templates.
func (c *Client) ListTemplates(ctx context.Context) ([]Template, error) {
	var out apitypes.ListTemplatesResponse
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/templates", idempotent: true}, &out)
	return out.Templates, err
}

// DeleteTemplate removes a template (by name or id) and its images.
func (c *Client) DeleteTemplate(ctx context.Context, ref string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/templates/" + url.PathEscape(ref), idempotent: true, keyed: true}, nil)
	return err
}

// GetBuild returns one build of a template.
func (c *Client) GetBuild(ctx context.Context, template, buildID string) (TemplateBuild, error) {
	var b TemplateBuild
	_, err := c.do(ctx, request{method: http.MethodGet, path: buildPath(template, buildID), idempotent: true}, &b)
	return b, err
}

func buildPath(template, buildID string) string {
	return "/v1/templates/" + url.PathEscape(template) + "/builds/" + url.PathEscape(buildID)
}

// maxLogLine bounds one line of a build log stream.
const maxLogLine = 1 << 20

// BuildLogs calls fn with each line of a build's log from line offset on:
// with follow, until the build ends; otherwise the lines there are now. It
// returns how many lines it has seen in all (offset included), so a caller
// whose stream broke can go on from there.
func (c *Client) BuildLogs(ctx context.Context, template, buildID string, offset int, follow bool, fn func(BuildLogEntry) error) (int, error) {
	q := url.Values{"offset": {strconv.Itoa(offset)}}
	if follow {
		q.Set("follow", "true")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+buildPath(template, buildID)+"/logs?"+q.Encode(), nil)
	if err != nil {
		return offset, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return offset, &transportError{err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		e := &Error{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
		var eb apitypes.ErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
			e.Code, e.Message = eb.Error.Code, eb.Error.Message
		}
		return offset, e
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), maxLogLine)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var e BuildLogEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return offset, fmt.Errorf("sandpit: build log: %w", err)
		}
		offset++
		if err := fn(e); err != nil {
			return offset, err
		}
	}
	if err := sc.Err(); err != nil {
		return offset, &transportError{err}
	}
	return offset, nil
}

// WaitBuild follows a build's log until the build ends, calling fn (when
// not nil) with every line, and returns the ended build. A log stream that
// breaks is resumed from the last line seen, so no line is shown twice.
func (c *Client) WaitBuild(ctx context.Context, template, buildID string, fn func(BuildLogEntry) error) (TemplateBuild, error) {
	if fn == nil {
		fn = func(BuildLogEntry) error { return nil }
	}
	offset := 0
	for attempt := 0; ; attempt++ {
		n, err := c.BuildLogs(ctx, template, buildID, offset, true, fn)
		if err != nil && !retryable(err) {
			return TemplateBuild{}, err
		}
		if n > offset {
			attempt = 0
		}
		offset = n
		b, gerr := c.GetBuild(ctx, template, buildID)
		if gerr != nil {
			return b, gerr
		}
		if b.State == "ready" || b.State == "error" {
			// Lines logged between the stream's end and the state read.
			if _, err := c.BuildLogs(ctx, template, buildID, offset, false, fn); err != nil && !retryable(err) {
				return b, err
			}
			return b, nil
		}
		if attempt+1 >= c.retry.MaxAttempts {
			if err == nil {
				err = errors.New("the build log ended before the build")
			}
			return b, err
		}
		if err := sleep(ctx, c.backoff(attempt+1, err)); err != nil {
			return b, err
		}
	}
}
