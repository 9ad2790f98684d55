package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxEventLine bounds one line of the event stream.
const maxEventLine = 1 << 20

// Events follows the daemon's stream of sandbox state changes and template
// build changes (type template.building, template.ready, template.error; GET
// /v1/events), calling fn with each, in order, until ctx ends (nil), the
// daemon ends the stream (io.EOF), or fn returns an error (that error). It
// does not reconnect: a caller that needs every change lists the sandboxes
// after reconnecting.
func (c *Client) Events(ctx context.Context, fn func(Event) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/events", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return &transportError{err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return &Error{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), maxEventLine)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue // event names, comments and blank separators
		}
		var e Event
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("sandpit: event stream: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return &transportError{err}
	}
	return io.EOF
}
