// Package httpguard bounds what one HTTP request may cost the daemon: its body
// size and how long the client may take to send that body. The API server
// and the preview proxy both wrap their handlers with Guard; handlers that
// legitimately stream a request body for as long as it lasts (the agent
// proxy, the preview proxy's forwarding) call LiftReadDeadline once they
// have decided to serve the request.
package httpguard

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Options configures Guard.
type Options struct {
	// MaxBody bounds every request body, in bytes; 0 means no bound.
	MaxBody int64
	// ReadTimeout bounds how long a request body may take to arrive, from
	// the moment the handler is called; 0 means no bound. Once the body is
	// read to its end the deadline is lifted, so it never cuts a slow
	// response or a long-running handler.
	ReadTimeout time.Duration
}

// Guard wraps h with the body bounds of opts.
func Guard(h http.Handler, opts Options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if opts.MaxBody > 0 && r.ContentLength > opts.MaxBody {
			// Closing is cheaper than reading a body nobody wants.
			w.Header().Set("Connection", "close")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			_, _ = io.WriteString(w, `{"error":{"code":"body_too_large","message":"request body exceeds `+strconv.FormatInt(opts.MaxBody, 10)+` bytes"},"code":413,"message":"request body too large"}`+"\n")
			return
		}
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			rc := http.NewResponseController(w)
			body := r.Body
			if opts.MaxBody > 0 {
				body = http.MaxBytesReader(w, body, opts.MaxBody)
			}
			if opts.ReadTimeout > 0 {
				// A body-less request gets no deadline: the server's header
				// timeout already bounded it, and a read deadline left on
				// an idle connection would cancel the request's context
				// when it fires.
				_ = rc.SetReadDeadline(time.Now().Add(opts.ReadTimeout))
				body = &liftAtEOF{ReadCloser: body, rc: rc}
			}
			r.Body = body
		}
		h.ServeHTTP(w, r)
	})
}

// LiftReadDeadline removes the request's read deadline: the handler streams
// the body for as long as the exchange lasts.
func LiftReadDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
}

// IsTooLarge reports whether err comes from reading past Options.MaxBody.
func IsTooLarge(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}

// liftAtEOF lifts the read deadline once the body has been read whole.
type liftAtEOF struct {
	io.ReadCloser
	rc     *http.ResponseController
	lifted bool
}

func (b *liftAtEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
