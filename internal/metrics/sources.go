package metrics

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/felixge/httpsnoop"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandpit-dev/sandpit"
)

var (
	sandboxesDesc = prometheus.NewDesc("sandpit_sandboxes", "Sandboxes in the store, by state.", []string{"state"}, nil)
	waitCountDesc = prometheus.NewDesc("sandpit_store_wait_total",
		"Store operations that waited for the single SQLite connection (the single writer's queue).", nil, nil)
	waitSecondsDesc = prometheus.NewDesc("sandpit_store_wait_seconds_total",
		"Total time store operations waited for the single SQLite connection.", nil, nil)
	activityDesc = prometheus.NewDesc("sandpit_store_activity_writes_total",
		"Sandbox activity records written to the store (toolbox calls and preview traffic, at most one per sandbox per throttle period).", nil, nil)
	inUseDesc  = prometheus.NewDesc("sandpit_store_connections_in_use", "Store connections in use (at most one).", nil, nil)
	routesDesc = prometheus.NewDesc("sandpit_routes", "Routes installed in the router, by kind (http, tcp, domain).", []string{"kind"}, nil)
	tcpDesc    = prometheus.NewDesc("sandpit_tcp_listeners", "TCP exposures listening on a host port.", nil, nil)
	poolDesc   = prometheus.NewDesc("sandpit_pool_ready", "Warm sandboxes ready in the pool, by template.", []string{"template"}, nil)
	errorsDesc = prometheus.NewDesc("sandpit_scrape_source_errors", "Sources that failed during this scrape (1 each).", []string{"source"}, nil)
)

// sandboxStates are always exposed, at zero when empty, so a query for one
// state never sees a gap.
var sandboxStates = []sandpit.State{sandpit.StateCreating, sandpit.StateRunning, sandpit.StateStopped, sandpit.StatePaused, sandpit.StateError}

// sourceCollector reads Sources on every scrape.
type sourceCollector struct {
	src      Sources
	deadline time.Duration
}

func (c *sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{activityDesc, sandboxesDesc, waitCountDesc, waitSecondsDesc, inUseDesc, routesDesc, tcpDesc, poolDesc, errorsDesc} {
		ch <- d
	}
}

func (c *sourceCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.deadline)
	defer cancel()
	failed := func(source string) {
		ch <- prometheus.MustNewConstMetric(errorsDesc, prometheus.GaugeValue, 1, source)
	}
	if c.src.SandboxesByState != nil {
		if n, err := c.src.SandboxesByState(ctx); err == nil {
			for _, st := range sandboxStates {
				ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n[string(st)]), string(st))
			}
		} else {
			failed("store")
		}
	}
	if c.src.StoreStats != nil {
		s := c.src.StoreStats()
		ch <- prometheus.MustNewConstMetric(waitCountDesc, prometheus.CounterValue, float64(s.WaitCount))
		ch <- prometheus.MustNewConstMetric(waitSecondsDesc, prometheus.CounterValue, s.WaitDuration.Seconds())
		ch <- prometheus.MustNewConstMetric(inUseDesc, prometheus.GaugeValue, float64(s.InUse))
	}
	if c.src.ActivityWrites != nil {
		ch <- prometheus.MustNewConstMetric(activityDesc, prometheus.CounterValue, float64(c.src.ActivityWrites()))
	}
	if c.src.RoutesByKind != nil {
		if n, err := c.src.RoutesByKind(ctx); err == nil {
			for _, k := range []string{"http", "tcp", "domain"} {
				ch <- prometheus.MustNewConstMetric(routesDesc, prometheus.GaugeValue, float64(n[k]), k)
			}
			ch <- prometheus.MustNewConstMetric(tcpDesc, prometheus.GaugeValue, float64(n["tcp"]))
		} else {
			failed("router")
		}
	}
	if c.src.Pool != nil {
		if n, err := c.src.Pool(ctx); err == nil {
			for tmpl, v := range n {
				ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(v), tmpl)
			}
		} else {
			failed("pool")
		}
	}
}

// StatusOf serves r with next and returns the status code it answered,
// keeping the writer's optional interfaces (Flusher, Hijacker) so streams
// and WebSocket upgrades pass through.
//
// Only the status is watched: CaptureMetrics would also time the request
// and count its bytes, work the preview proxy does on every request for
// figures no one reads.
func StatusOf(next http.Handler, w http.ResponseWriter, r *http.Request) int {
	code, written := http.StatusOK, false
	next.ServeHTTP(httpsnoop.Wrap(w, httpsnoop.Hooks{
		WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
			return func(c int) {
				if !written {
					code, written = c, true
				}
				next(c)
			}
		},
	}), r)
	return code
}

func codeLabel(code int) string { return strconv.Itoa(code) }
