// Package metrics is the daemon's Prometheus instrumentation: the counters and
// histograms the service, the idempotency engine, the proxy and the engine
// wrapper update as they work, and the gauges read from the store and the
// router at scrape time. Every method is safe on a nil *Metrics, so code
// built without metrics (unit tests) needs no special case.
package metrics

import (
	"context"
	"database/sql"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Create paths: how a create request was answered.
const (
	// PathCold: a container was made and started for this request.
	PathCold = "cold"
	// PathWarm: a pre-started sandbox of the warm pool was handed out.
	PathWarm = "warm"
	// PathReplayed: the stored response of a completed earlier attempt with
	// the same key (or E2B fingerprint) was returned.
	PathReplayed = "replayed"
	// PathDeduplicated: the request arrived while an identical one was in
	// flight, waited for it and returned its answer.
	PathDeduplicated = "deduplicated"
)

// Idempotency claim outcomes, as the engine sees them on each claim.
const (
	IdemAcquired = "acquired"
	IdemReplay   = "replay"
	IdemInFlight = "in_flight"
	IdemMismatch = "mismatch"
)

// Metrics holds the daemon's collectors.
type Metrics struct {
	reg *prometheus.Registry

	creates        *prometheus.CounterVec
	createSeconds  *prometheus.HistogramVec
	idem           *prometheus.CounterVec
	proxy          *prometheus.CounterVec
	engineSeconds  *prometheus.HistogramVec
	engineErrors   *prometheus.CounterVec
	builds         *prometheus.CounterVec
	buildSeconds   *prometheus.HistogramVec
	buildsRunning  prometheus.Gauge
	egressDenied   *prometheus.CounterVec
	createScopes   map[string]bool
	scrapeDeadline time.Duration
}

// New builds the collectors. createScopes are the base idempotency scopes
// whose operation is a sandbox create ("v1:POST /v1/sandboxes",
// "e2b.create"): their replays and deduplicated duplicates count as creates
// by that path.
func New(createScopes ...string) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		creates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandpit_creates_total",
			Help: "Sandbox create requests answered, by path: cold (a container was made), warm (from the pool), replayed (a stored response), deduplicated (joined an identical in-flight create).",
		}, []string{"path"}),
		createSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sandpit_create_duration_seconds",
			Help:    "Time to answer a sandbox create, by path.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 4, 8, 16, 32},
		}, []string{"path"}),
		idem: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandpit_idempotency_outcomes_total",
			Help: "Idempotency claim outcomes by base scope (without the owner): acquired, replay, in_flight, mismatch.",
		}, []string{"scope", "outcome"}),
		proxy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandpit_proxy_requests_total",
			Help: "HTTP requests served by the builtin preview proxy, by status code.",
		}, []string{"code"}),
		engineSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sandpit_engine_call_duration_seconds",
			Help:    "Latency of container engine calls, by operation.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"op"}),
		engineErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandpit_engine_call_errors_total",
			Help: "Container engine calls that failed, by operation (a missing container is an answer, not a failure).",
		}, []string{"op"}),
		builds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandpit_template_builds_total",
			Help: "Template builds that ended, by state: ready or error.",
		}, []string{"state"}),
		buildSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sandpit_template_build_duration_seconds",
			Help:    "Time from a template build's start to its end, by state.",
			Buckets: []float64{.1, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
		}, []string{"state"}),
		buildsRunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandpit_template_builds_running",
			Help: "Template builds running in this daemon now.",
		}),
		egressDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandpit_egress_denied_total",
			Help: "Connections (kind tcp) and DNS answers (kind dns) the egress proxy refused, by sandbox; a deleted sandbox's series goes with it.",
		}, []string{"sandbox", "kind"}),
		createScopes:   map[string]bool{},
		scrapeDeadline: 5 * time.Second,
	}
	for _, s := range createScopes {
		m.createScopes[s] = true
	}
	for _, p := range []string{PathCold, PathWarm, PathReplayed, PathDeduplicated} {
		m.creates.WithLabelValues(p)
		m.createSeconds.WithLabelValues(p)
	}
	for _, st := range []string{"ready", "error"} {
		m.builds.WithLabelValues(st)
		m.buildSeconds.WithLabelValues(st)
	}
	m.reg.MustRegister(m.creates, m.createSeconds, m.idem, m.proxy, m.engineSeconds, m.engineErrors,
		m.builds, m.buildSeconds, m.buildsRunning, m.egressDenied,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Gather collects every family now, as a scrape would (tests read it).
func (m *Metrics) Gather() ([]*dto.MetricFamily, error) { return m.reg.Gather() }

// CreateDone records one answered create.
func (m *Metrics) CreateDone(path string, d time.Duration) {
	if m == nil {
		return
	}
	m.creates.WithLabelValues(path).Inc()
	m.createSeconds.WithLabelValues(path).Observe(d.Seconds())
}

// BuildStarted records a template build the engine starts.
func (m *Metrics) BuildStarted() {
	if m == nil {
		return
	}
	m.buildsRunning.Inc()
}

// BuildDone records the end of a started template build.
func (m *Metrics) BuildDone(state string, d time.Duration) {
	if m == nil {
		return
	}
	m.buildsRunning.Dec()
	m.builds.WithLabelValues(state).Inc()
	m.buildSeconds.WithLabelValues(state).Observe(d.Seconds())
}

// EgressDenied counts one refusal of the egress proxy for a sandbox.
func (m *Metrics) EgressDenied(sandbox, kind string) {
	if m == nil {
		return
	}
	m.egressDenied.WithLabelValues(sandbox, kind).Inc()
}

// EgressForget drops a deleted sandbox's refusal counts.
func (m *Metrics) EgressForget(sandbox string) {
	if m == nil {
		return
	}
	m.egressDenied.DeletePartialMatch(prometheus.Labels{"sandbox": sandbox})
}

// IdemOutcome records one claim outcome on a base scope.
func (m *Metrics) IdemOutcome(scope, outcome string) {
	if m == nil {
		return
	}
	m.idem.WithLabelValues(scope, outcome).Inc()
}

// IdemAnswered records how an idempotent operation on a base scope was
// answered without running it: replayed (stored) or deduplicated (joined an
// in-flight attempt). On a create scope it counts as a create by that path;
// an executed create is counted where the sandbox is made.
func (m *Metrics) IdemAnswered(scope, path string, d time.Duration) {
	if m == nil || !m.createScopes[scope] {
		return
	}
	m.CreateDone(path, d)
}

// ProxyHandler counts the requests next serves by status code.
func (m *Metrics) ProxyHandler(next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := StatusOf(next, w, r)
		m.proxy.WithLabelValues(codeLabel(code)).Inc()
	})
}

// Sources are the figures read at scrape time rather than counted.
type Sources struct {
	// SandboxesByState counts the store's sandboxes per state.
	SandboxesByState func(ctx context.Context) (map[string]int, error)
	// StoreStats is the store's connection pool: its wait figures are the
	// single writer's queue.
	StoreStats func() sql.DBStats
	// ActivityWrites is how many sandbox activity records reached the
	// store (toolbox calls and preview traffic, throttled per sandbox).
	ActivityWrites func() int64
	// RoutesByKind counts the router's installed routes per kind (http,
	// tcp, domain); every tcp route is one listener.
	RoutesByKind func(ctx context.Context) (map[string]int, error)
	// Pool reports the warm pool's size per template, when there is one.
	Pool func(ctx context.Context) (map[string]int, error)
}

// Watch registers the scrape-time figures. Call it once, when the sources
// exist.
func (m *Metrics) Watch(src Sources) {
	if m == nil {
		return
	}
	m.reg.MustRegister(&sourceCollector{src: src, deadline: m.scrapeDeadline})
}
