package httpguard

import (
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/felixge/httpsnoop"
)

// Defaults of the per-client limits (see ClientLimits).
const (
	DefaultUnauthRate  = 100
	DefaultFailureRate = 20
)

// DefaultFailureDelay is how long a refused request is held before its
// answer goes out (see ClientLimits.FailureDelay).
const DefaultFailureDelay = 100 * time.Millisecond

// maxDelayed bounds the refused requests held at once; past it they are
// answered at once, so holding them cannot pile up goroutines.
const maxDelayed = 1024

// maxClients bounds the clients tracked at once; past it the limiter forgets
// clients whose buckets are full (they lose nothing by it), and then any.
const maxClients = 1 << 16

// ClientLimits are the per-client limits of requests that present no
// credential and of requests whose credential was refused. A client is one
// IPv4 address or one IPv6 /64 (what one host is usually given).
type ClientLimits struct {
	// UnauthRate is how many requests per second a client may make that
	// are served on the strength of the URL alone (signed file URLs),
	// with bursts of twice that; 0 means no limit.
	UnauthRate float64
	// FailureRate is how many refused credentials (401 answers) per second
	// a client may cause, with bursts of five times that; a client past it
	// gets 429 on every request until its budget refills. 0 means no limit.
	FailureRate float64
	// Exempt lists the client addresses no limit applies to (a reverse
	// proxy in front of the daemon, say, through which all clients come).
	Exempt []netip.Prefix
	// FailureDelay holds every 401 and every 429 of the limiter about that
	// long (jittered by half either way) before it is answered; 0 answers
	// at once. A client that waits for
	// each answer before it sends the next request, as most floods do,
	// then costs the daemon a few requests per second per connection, not
	// as many as the CPUs can answer; a valid credential is never delayed.
	FailureDelay time.Duration
	Now          func() time.Time
}

// Limiter enforces ClientLimits on one listener's requests.
type Limiter struct {
	opts ClientLimits

	mu      sync.Mutex
	clients map[netip.Prefix]*clientBuckets
	// delayed holds a slot per refused request being held.
	delayed chan struct{}
}

// hold delays a refused request's answer by FailureDelay, unless maxDelayed
// are held already or the client went away.
func (l *Limiter) hold(r *http.Request) {
	if l.opts.FailureDelay <= 0 {
		return
	}
	select {
	case l.delayed <- struct{}{}:
	default:
		return
	}
	defer func() { <-l.delayed }()
	// Jittered (half to one and a half times the delay), so the held
	// answers of a flood do not leave, and come back, in one burst.
	d := l.opts.FailureDelay/2 + rand.N(l.opts.FailureDelay)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

type clientBuckets struct {
	unauth, failures bucket
}

// bucket is a token bucket refilled continuously.
type bucket struct {
	tokens float64
	at     time.Time
}

func (b *bucket) refill(now time.Time, rate, burst float64) {
	if b.at.IsZero() {
		b.tokens, b.at = burst, now
		return
	}
	b.tokens = math.Min(burst, b.tokens+now.Sub(b.at).Seconds()*rate)
	b.at = now
}

// retryAfter is the whole seconds until the bucket holds one token.
func (b *bucket) retryAfter(rate float64) string {
	return strconv.Itoa(max(1, int(math.Ceil((1-b.tokens)/rate))))
}

// NewLimiter builds a limiter.
func NewLimiter(opts ClientLimits) *Limiter {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Limiter{opts: opts, clients: map[netip.Prefix]*clientBuckets{}, delayed: make(chan struct{}, maxDelayed)}
}

// clientOf is the client a remote address belongs to.
func clientOf(remote string) (netip.Prefix, bool) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.WithZone("").Prefix(bits)
	return p, true
}

func (l *Limiter) exempt(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap().WithZone("")
	for _, p := range l.opts.Exempt {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// buckets returns the client's buckets; l.mu is held.
func (l *Limiter) bucketsLocked(c netip.Prefix, now time.Time) *clientBuckets {
	if b := l.clients[c]; b != nil {
		return b
	}
	if len(l.clients) >= maxClients {
		l.pruneLocked(now)
	}
	b := &clientBuckets{}
	l.clients[c] = b
	return b
}

// pruneLocked forgets the clients whose buckets are full again, and if that
// is not enough, any (map order is random, so no client can arrange to be
// kept).
func (l *Limiter) pruneLocked(now time.Time) {
	for c, b := range l.clients {
		b.unauth.refill(now, l.opts.UnauthRate, 2*l.opts.UnauthRate)
		b.failures.refill(now, l.opts.FailureRate, 5*l.opts.FailureRate)
		if (l.opts.UnauthRate == 0 || b.unauth.tokens >= 2*l.opts.UnauthRate) &&
			(l.opts.FailureRate == 0 || b.failures.tokens >= 5*l.opts.FailureRate) {
			delete(l.clients, c)
		}
	}
	for c := range l.clients {
		if len(l.clients) < maxClients*3/4 {
			break
		}
		delete(l.clients, c)
	}
}

// Wrap applies the limits to h. unauthenticated says which requests are
// served without a credential; each of them takes from the client's
// unauthenticated budget before it is served. Every 401 answer takes from
// the client's failure budget (except those unauthenticated requests, which
// paid already), and a client with no failure budget left is answered 429
// before anything else is done for it. Refusals (401 and the limiter's 429)
// are held for FailureDelay before they are answered.
func (l *Limiter) Wrap(h http.Handler, unauthenticated func(*http.Request) bool) http.Handler {
	if l == nil || (l.opts.UnauthRate <= 0 && l.opts.FailureRate <= 0 && l.opts.FailureDelay <= 0) {
		return h
	}
	ur, fr := l.opts.UnauthRate, l.opts.FailureRate
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := clientOf(r.RemoteAddr)
		if !ok || l.exempt(r.RemoteAddr) {
			h.ServeHTTP(w, r)
			return
		}
		unauth := ur > 0 && unauthenticated(r)
		now := l.opts.Now()
		l.mu.Lock()
		b := l.bucketsLocked(c, now)
		if fr > 0 {
			b.failures.refill(now, fr, 5*fr)
			if b.failures.tokens < 1 {
				ra := b.failures.retryAfter(fr)
				l.mu.Unlock()
				l.hold(r)
				tooMany(w, r, ra, "too many refused credentials from this client")
				return
			}
		}
		if unauth {
			b.unauth.refill(now, ur, 2*ur)
			if b.unauth.tokens < 1 {
				ra := b.unauth.retryAfter(ur)
				l.mu.Unlock()
				l.hold(r)
				tooMany(w, r, ra, "too many unauthenticated requests from this client")
				return
			}
			b.unauth.tokens--
		}
		l.mu.Unlock()
		refused := false
		w = httpsnoop.Wrap(w, httpsnoop.Hooks{
			WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
				return func(code int) {
					if code == http.StatusUnauthorized {
						refused = true
					}
					next(code)
				}
			},
		})
		h.ServeHTTP(w, r)
		if refused {
			// The answer is still in the connection's buffer (a 401 is
			// small and not flushed): it leaves when the wrapper returns.
			l.hold(r)
		}
		if refused && fr > 0 && !unauth {
			l.mu.Lock()
			b := l.bucketsLocked(c, l.opts.Now())
			b.failures.refill(l.opts.Now(), fr, 5*fr)
			b.failures.tokens = math.Max(0, b.failures.tokens-1)
			l.mu.Unlock()
		}
	})
}

// tooMany answers 429 with Retry-After in a body every surface's clients
// read: the native error shape and the facades' top-level code and message.
func tooMany(w http.ResponseWriter, r *http.Request, retryAfter, msg string) {
	w.Header().Set("Retry-After", retryAfter)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	// rate_limited is apitypes.CodeRateLimited.
	body := `{"error":{"code":"rate_limited","message":"` + msg + `"}`
	if len(r.URL.Path) < 4 || r.URL.Path[:4] != "/v1/" {
		body += `,"code":429,"message":"` + msg + `"`
	}
	_, _ = w.Write([]byte(body + "}\n"))
}
