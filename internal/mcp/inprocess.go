package mcp

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/sandpit-dev/sandpit/client"
)

// inProcessBase is the base URL of an in-process client; its host is never
// dialled.
const inProcessBase = "http://sandpit.in-process"

// InProcessClient is an API client that serves its calls with h, the
// daemon's own API handler, in this process, as token. The MCP endpoint's
// tools use it with each request's own token: the calls are authenticated,
// scoped and made idempotent by the same handler /v1 requests meet, without
// a second trip through the listener (whose per-address limits would put
// every MCP user in the loopback address's bucket).
func InProcessClient(h http.Handler, token string) *client.Client {
	return client.New(inProcessBase, token, client.WithHTTPClient(&http.Client{Transport: handlerTransport{h}}))
}

// FromAuthorization returns the bearer token of an Authorization header.
func FromAuthorization(header http.Header) string {
	v := header.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// handlerTransport is an http.RoundTripper that serves each request with a
// handler. The answer streams: the response is returned at the handler's
// first write (or its end), and the body carries the rest as it is written,
// so a streamed answer (a code run's lines) is not buffered whole.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sreq := req.Clone(req.Context())
	sreq.RequestURI = req.URL.RequestURI()
	sreq.RemoteAddr = "127.0.0.1:0"
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, body: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				w.fail(fmt.Errorf("handler panic: %v", p))
				return
			}
			w.WriteHeader(http.StatusOK)
			pw.Close()
		}()
		t.h.ServeHTTP(w, sreq)
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	if w.err != nil {
		return nil, w.err
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: pr, ContentLength: -1, Request: req,
	}, nil
}

// pipeResponse is the handler's side of handlerTransport.
type pipeResponse struct {
	header http.Header
	body   *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
	status int
	sent   http.Header
	err    error
}

func (w *pipeResponse) Header() http.Header { return w.header }

func (w *pipeResponse) WriteHeader(status int) {
	w.once.Do(func() {
		w.status, w.sent = status, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

// Flush is a no-op: every write reaches the reader as it is made.
func (w *pipeResponse) Flush() {}

func (w *pipeResponse) fail(err error) {
	sent := true
	w.once.Do(func() {
		sent = false
		w.err = err
		close(w.ready)
	})
	if sent {
		w.body.CloseWithError(err)
	}
}
