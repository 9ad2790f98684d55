package daemon

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"
)

// DefaultDrainTimeout is how long a shutdown lets the HTTP surfaces' open
// requests finish before it closes them.
const DefaultDrainTimeout = 10 * time.Second

// inflight tracks the requests the HTTP servers are serving, so that a
// shutdown can say what it waits for: a stream to a sandbox (an exec, a
// PTY, a file transfer) lasts as long as its client keeps it.
type inflight struct {
	mu   sync.Mutex
	reqs map[*http.Request]time.Time
}

func newInflight() *inflight { return &inflight{reqs: make(map[*http.Request]time.Time)} }

// wrap counts h's requests while they run.
func (f *inflight) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.reqs[r] = time.Now()
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			delete(f.reqs, r)
			f.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

// list describes the open requests, oldest first, at most max of them, and
// how many there are in all. A query string is left out: it may carry a
// signed URL's credential.
func (f *inflight) list(max int) (open []string, total int) {
	type entry struct {
		what  string
		since time.Time
	}
	f.mu.Lock()
	es := make([]entry, 0, len(f.reqs))
	for r, t := range f.reqs {
		es = append(es, entry{r.Method + " " + r.Host + r.URL.Path, t})
	}
	f.mu.Unlock()
	sort.Slice(es, func(i, j int) bool { return es[i].since.Before(es[j].since) })
	for i, e := range es {
		if i == max {
			break
		}
		open = append(open, e.what+" (open "+time.Since(e.since).Round(time.Millisecond).String()+")")
	}
	return open, len(es)
}

// shutdownHTTP lets in-flight requests finish within the drain timeout for
// all the servers together, saying what it waits for; whatever is still
// open then is closed.
func (d *daemon) shutdownHTTP(ctx context.Context) {
	timeout := d.cfg.DrainTimeout
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	servers := []*http.Server{d.apiSrv, d.proxySrv, d.forwardSrv}
	if open, n := d.inflight.list(10); n > 0 {
		d.log.Info("shutdown: waiting for open requests", "count", n, "drain_timeout", timeout, "requests", open)
	}
	shutCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, srv := range servers {
		if srv == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = srv.Shutdown(shutCtx)
		}()
	}
	wg.Wait()
	if open, n := d.inflight.list(10); n > 0 {
		d.log.Warn("shutdown: drain timeout passed; closing the requests still open", "count", n, "drain_timeout", timeout, "requests", open)
		for _, srv := range servers {
			if srv != nil {
				_ = srv.Close()
			}
		}
	}
}
