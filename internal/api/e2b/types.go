package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// EnvdVersion is the envd version the facade reports. The SDK gates
// behaviour on it: below 0.1.0 it kills the sandbox as too old, below 0.4.0 it
// forces the user "user"; 0.6.4 is the protocol the agent implements.
const EnvdVersion = "0.6.4"

// defaultUser is the account an E2B sandbox's processes and file
// operations act as when a call names none, as in E2B's base template.
const defaultUser = "user"

// clientID fills E2B's clientID field, which names the cluster client that
// runs a sandbox: a single daemon is the one client; a cluster node puts its
// node name there (Config.NodeName).
const clientID = "sandpit"

// clientID is the clientID of the sandboxes this node runs.
func (h *Handler) clientID() string {
	if h.cfg.NodeName != "" {
		return h.cfg.NodeName
	}
	return clientID
}

// maxTimeoutSeconds mirrors the service's limit so that an out-of-range
// timeout is refused before the create is claimed.
const maxTimeoutSeconds = 30 * 24 * 3600

// pausedRetention is how long a paused sandbox is kept: E2B keeps paused
// sandboxes until they are resumed or killed (for up to 30 days), while the
// service's sweeper deletes any sandbox whose end time has passed, so pausing
// moves the end time out by the longest lifetime the service allows, as the
// sweeper's own pause at a deadline does.
const pausedRetention = service.PausedRetention

// neverEnds is the endAt of a sandbox without a deadline (one made through
// the native API): E2B has no such sandbox, and the SDK parses whatever
// endAt says as a date.
var neverEnds = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// errUnsupported marks a create option sandpit cannot honour. Ignoring it
// would be worse than refusing: a caller asking for denied egress must not
// silently get open egress.
var errUnsupported = errors.New("not supported by sandpit")

// CreateBody is the body of POST /v2/sandboxes (and of the older
// POST /sandboxes). Unknown fields are ignored: the SDK adds fields over time.
type CreateBody struct {
	TemplateID          string            `json:"templateID"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Timeout             *int64            `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *AutoResume       `json:"autoResume"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *Network          `json:"network"`
	VolumeMounts        []VolumeMount     `json:"volumeMounts"`
	IAM                 json.RawMessage   `json:"iam"`
}

// AutoResume is the create's autoResume object.
type AutoResume struct {
	Enabled bool `json:"enabled"`
}

// Network is the create's network object.
type Network struct {
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	MaskRequestHost    string          `json:"maskRequestHost"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
	// Rules are E2B's per-host transforms: {host: [{transform: {headers:
	// {name: value}}}]}, values holding ${e2b.secrets.NAME} placeholders
	// the egress proxy fills.
	Rules map[string][]sandpit.NetworkRule `json:"rules"`
}

func (b CreateBody) template() string {
	if b.TemplateID == "" {
		return "base"
	}
	return b.TemplateID
}

func (b CreateBody) timeoutSeconds() int64 {
	if b.Timeout == nil {
		return DefaultTimeoutSeconds
	}
	return *b.Timeout
}

func present(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null")) && !bytes.Equal(raw, []byte("{}"))
}

// validate refuses, before anything is claimed or created, the creates that
// cannot succeed: a bad timeout or an option sandpit does not implement.
func (b CreateBody) validate() error {
	if t := b.timeoutSeconds(); t < 1 || t > maxTimeoutSeconds {
		return fmt.Errorf("%w: timeout must be between 1 and %d seconds", sandpit.ErrInvalid, maxTimeoutSeconds)
	}
	unsupported := func(what string) error {
		return fmt.Errorf("%w: %s is %w", sandpit.ErrInvalid, what, errUnsupported)
	}
	switch {
	case b.autoResume() && !b.autoPause():
		return fmt.Errorf("%w: autoResume can only be true when onTimeout is 'pause'", sandpit.ErrInvalid)
	case present(b.IAM):
		return unsupported("iam")
	}
	if _, err := service.NormalizeNetwork(b.network()); err != nil {
		return err
	}
	if n := b.Network; n != nil {
		switch {
		case present(n.EgressProxy):
			return unsupported("network.egressProxy")
		}
	}
	return nil
}

func (b CreateBody) autoPause() bool  { return b.AutoPause != nil && *b.AutoPause }
func (b CreateBody) autoResume() bool { return b.AutoResume != nil && b.AutoResume.Enabled }

// keepMemory is the pause kind at the deadline: memory unless the create
// said autoPauseMemory false, as in E2B.
func (b CreateBody) keepMemory() bool { return b.AutoPauseMemory == nil || *b.AutoPauseMemory }

// onTimeout is the service's deadline action of the create.
func (b CreateBody) onTimeout() sandpit.OnTimeout {
	if b.autoPause() {
		return sandpit.OnTimeoutPause
	}
	return sandpit.OnTimeoutKill
}

// network maps E2B's egress settings to a sandbox policy:
// allow_internet_access false is E2B's denyOut ["0.0.0.0/0"], that is no
// egress beyond allowOut; allowOut wins over denyOut, as on E2B. Entries
// that are not addresses or CIDRs are domain names, judged by the egress
// proxy (SNI on 443, Host on 80) and the sandbox's DNS.
func (b CreateBody) network() sandpit.NetworkPolicy {
	var n Network
	if b.Network != nil {
		n = *b.Network
	}
	p := egressPolicy(b.AllowInternetAccess, n.AllowOut, n.DenyOut)
	p.MaskRequestHost = n.MaskRequestHost
	p.Rules = n.Rules
	return p
}

// egressPolicy is the policy of E2B's egress fields, on a create or a
// network update.
func egressPolicy(internet *bool, allowOut, denyOut []string) sandpit.NetworkPolicy {
	var p sandpit.NetworkPolicy
	if internet != nil && !*internet {
		p.Egress = sandpit.EgressNone
	}
	p.Allow, p.AllowDomains = service.SplitAddressesAndNames(allowOut)
	p.Deny, p.DenyDomains = service.SplitAddressesAndNames(denyOut)
	return p
}

// NetworkUpdate is the body of PUT /sandboxes/{id}/network
// (sbx.updateNetwork): the whole new egress policy; a field left out
// clears its rules.
type NetworkUpdate struct {
	AllowOut            []string                         `json:"allowOut"`
	DenyOut             []string                         `json:"denyOut"`
	AllowInternetAccess *bool                            `json:"allow_internet_access"`
	Rules               map[string][]sandpit.NetworkRule `json:"rules"`
}

// policy is the update's whole new egress policy.
func (u NetworkUpdate) policy() sandpit.NetworkPolicy {
	p := egressPolicy(u.AllowInternetAccess, u.AllowOut, u.DenyOut)
	p.Rules = u.Rules
	return p
}

// CreatedSandbox is the response of a create or a connect.
type CreatedSandbox struct {
	SandboxID       string `json:"sandboxID"`
	TemplateID      string `json:"templateID"`
	Alias           string `json:"alias,omitempty"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
	// TrafficAccessToken is set for sandboxes created with
	// network.allowPublicTraffic false: requests to their ports must carry
	// it in the e2b-traffic-access-token header.
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
	Domain             string `json:"domain"`
}

// SandboxDetail is the response of GET /sandboxes/{id}.
type SandboxDetail struct {
	ListedSandbox
	EnvdAccessToken string       `json:"envdAccessToken"`
	Domain          string       `json:"domain"`
	Network         *NetworkInfo `json:"network,omitempty"`
}

// ListedSandbox is one entry of GET /v2/sandboxes.
type ListedSandbox struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int64             `json:"memoryMB"`
	DiskSizeMB  int64             `json:"diskSizeMB"`
	EnvdVersion string            `json:"envdVersion"`
	Metadata    map[string]string `json:"metadata"`
	State       string            `json:"state"`
	// Lifecycle is E2B's SandboxLifecycle: what the deadline does and
	// whether traffic wakes the sandbox.
	Lifecycle Lifecycle `json:"lifecycle"`
	// PauseMode says what a paused sandbox kept ("memory" or "filesystem"),
	// and PauseReason why it is in that mode when sandpit chose it (a memory
	// pause lost with the engine); sandpit's additions, which the SDK
	// ignores.
	PauseMode   string `json:"pauseMode,omitempty"`
	PauseReason string `json:"pauseReason,omitempty"`
	// VolumeMounts are the volumes mounted into the sandbox.
	VolumeMounts []VolumeMount `json:"volumeMounts"`
}

// Lifecycle is E2B's SandboxLifecycle.
type Lifecycle struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

// SandboxMetric is one sample of GET /sandboxes/{id}/metrics.
type SandboxMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// ErrorBody is E2B's error shape. The SDK reads "not found" from code, so even
// a 404 carries it.
type ErrorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// E2B sandbox states.
const (
	stateRunning = "running"
	statePaused  = "paused"
)

// e2bState maps a store state to E2B's. A stopped sandbox (stopped through the
// native API) keeps its filesystem and comes back on connect, as a paused one
// does. Sandboxes still being created, or whose container is gone, have no
// E2B state and are not shown.
func e2bState(state sandpit.State) (string, bool) {
	switch state {
	case sandpit.StateRunning, sandpit.StateStarting:
		// A sandbox the daemon is bringing back after its own restart is
		// running as far as the client is concerned: it was never stopped.
		return stateRunning, true
	case sandpit.StatePaused, sandpit.StateStopped:
		return statePaused, true
	}
	return "", false
}

func templateOf(sb sandpit.Sandbox) string {
	if sb.Template != "" {
		return sb.Template
	}
	return sb.Image
}

func (h *Handler) created(sb sandpit.Sandbox) CreatedSandbox {
	return CreatedSandbox{
		SandboxID:          sb.ID,
		TemplateID:         templateOf(sb),
		Alias:              sb.Template,
		ClientID:           h.clientID(),
		EnvdVersion:        EnvdVersion,
		EnvdAccessToken:    sb.AccessToken,
		TrafficAccessToken: sb.TrafficToken,
		Domain:             h.cfg.Domain,
	}
}

func (h *Handler) listed(sb sandpit.Sandbox, state string) ListedSandbox {
	cpus := int(sb.CPU + 0.999)
	if cpus <= 0 {
		// No CPU limit: the sandbox may use every host core.
		cpus = runtime.NumCPU()
	}
	end := sb.EndAt
	if end.IsZero() {
		end = neverEnds
	}
	md := sb.Labels
	if md == nil {
		md = map[string]string{}
	}
	return ListedSandbox{
		SandboxID:    sb.ID,
		TemplateID:   templateOf(sb),
		Alias:        sb.Template,
		ClientID:     h.clientID(),
		StartedAt:    sb.CreatedAt.UTC(),
		EndAt:        end.UTC(),
		CPUCount:     cpus,
		MemoryMB:     sb.MemoryMB,
		DiskSizeMB:   h.cfg.DiskSizeMB,
		EnvdVersion:  EnvdVersion,
		Metadata:     md,
		State:        state,
		Lifecycle:    Lifecycle{AutoResume: sb.AutoResume, OnTimeout: string(sb.TimeoutAction())},
		PauseMode:    string(sb.PauseMode),
		PauseReason:  pauseReason(sb),
		VolumeMounts: mountsOf(sb),
	}
}

// pauseReason is the reason a paused sandbox's state has, when the daemon
// gave it one.
func pauseReason(sb sandpit.Sandbox) string {
	if sb.State != sandpit.StatePaused {
		return ""
	}
	return sb.StateReason
}

// detail renders GET /sandboxes/{id}. The envd access token runs code in
// the sandbox, so a principal that may only read gets it empty.
func (h *Handler) detail(ctx context.Context, sb sandpit.Sandbox, state string) SandboxDetail {
	d := SandboxDetail{ListedSandbox: h.listed(sb, state), Domain: h.cfg.Domain, Network: networkInfo(sb)}
	if api.Permit(ctx, sandpit.ActionExecute) == nil {
		d.EnvdAccessToken = sb.AccessToken
	}
	return d
}

// NetworkInfo is getInfo's network: the egress rules in E2B's terms, the
// addresses and names of each list together, and egress "none" as the
// deny of every address it stands for.
type NetworkInfo struct {
	AllowOut           []string `json:"allowOut,omitempty"`
	DenyOut            []string `json:"denyOut,omitempty"`
	AllowPublicTraffic bool     `json:"allowPublicTraffic"`
	MaskRequestHost    string   `json:"maskRequestHost,omitempty"`
	// Rules are the per-host transforms as they were given: placeholders,
	// never a secret's value.
	Rules map[string][]sandpit.NetworkRule `json:"rules,omitempty"`
}

func networkInfo(sb sandpit.Sandbox) *NetworkInfo {
	n := sb.Network
	out := &NetworkInfo{AllowPublicTraffic: sb.PortAccess != sandpit.PortAccessToken, MaskRequestHost: n.MaskRequestHost, Rules: n.Rules}
	out.AllowOut = append(append(out.AllowOut, n.Allow...), n.AllowDomains...)
	out.DenyOut = append(append(out.DenyOut, n.Deny...), n.DenyDomains...)
	if n.Egress == sandpit.EgressNone && !slices.Contains(out.DenyOut, "0.0.0.0/0") {
		out.DenyOut = append(out.DenyOut, "0.0.0.0/0")
	}
	return out
}
