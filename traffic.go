package sandpit

import (
	"path"
	"strings"
	"time"
)

// The request headers that carry a sandbox's credentials on its preview and
// traffic hosts. They are part of the domain, not of one router: the API
// surfaces name them in the links and answers they give, and every router
// checks and strips them, so both layers read them here.
const (
	// TrafficTokenHeader carries a sandbox's traffic token to an any-port
	// route that requires one (E2B's header name).
	TrafficTokenHeader = "E2b-Traffic-Access-Token"
	// PreviewTokenHeader carries a private port's preview token to its
	// HTTP route (Daytona's header name).
	PreviewTokenHeader = "X-Daytona-Preview-Token"
	// AccessTokenHeader carries a sandbox's access token, as E2B's SDKs
	// send it.
	AccessTokenHeader = "X-Access-Token"
)

// Headers the daemon consumes or sets for itself, which a sandbox never
// receives, whichever way its request comes in (the API's relay to the
// agent, a preview host).
const (
	// InternalHeaderPrefix starts the name of every header of the daemon's
	// own (cluster forwarding marks, the forwarded principal).
	InternalHeaderPrefix = "Sandpit-"
	// APIKeyHeader is how the E2B SDK presents the daemon's token.
	APIKeyHeader = "X-Api-Key"
)

// IsInternalHeader reports whether the header name is one of the daemon's
// own (InternalHeaderPrefix, in any case).
func IsInternalHeader(name string) bool {
	return len(name) >= len(InternalHeaderPrefix) && strings.EqualFold(name[:len(InternalHeaderPrefix)], InternalHeaderPrefix)
}

// The code interpreter's server port inside a sandbox, and its route that
// runs code (E2B's): running code takes the sandbox's access token on
// every way in, the gateway and the preview hosts alike.
const (
	InterpreterPort        = 49999
	InterpreterExecutePath = "/execute"
)

// NeedsAccessToken reports whether a request for p on a sandbox's port
// must carry the sandbox's access token.
func NeedsAccessToken(port int, p string) bool {
	return port == InterpreterPort && path.Clean("/"+p) == InterpreterExecutePath
}

// Stats is a point-in-time resource sample of a sandbox. The runtime
// measures it and the surfaces present it, so it lives with the domain
// types rather than in the runtime's seam.
type Stats struct {
	CPUCount   int
	CPUUsedPct float64
	MemUsed    int64
	MemTotal   int64
	DiskUsed   int64
	DiskTotal  int64
	Timestamp  time.Time
}
