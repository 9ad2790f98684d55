package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// isoMillis is the timestamp format of Daytona's API (JavaScript's
// Date.toISOString).
const isoMillis = "2006-01-02T15:04:05.000Z07:00"

// Fixed values of fields Daytona's model requires but Sandpit has no notion
// of: one organization, one target (this daemon).
const (
	organizationID = "sandpit"
	defaultTarget  = "local"
	// defaultUser is reported because the agent runs commands as the
	// container's own user, which is root in the images Sandpit is meant for.
	defaultUser = "root"
)

// Daytona sandbox states.
const (
	stateCreating  = "creating"
	stateStarted   = "started"
	stateStopped   = "stopped"
	statePaused    = "paused"
	stateError     = "error"
	stateDestroyed = "destroyed"
	stateArchived  = "archived"
	// Sandboxes coming back after a daemon restart, and ones whose delete
	// is under way, have Daytona states of their own.
	stateStarting   = "starting"
	stateDestroying = "destroying"
	stateUnknown    = "unknown"
)

// Daytona's defaults for intervals a create leaves out: stop after 15
// minutes without activity, archive after 7 days stopped, never delete.
const (
	defaultAutoStop    = 15
	defaultAutoArchive = 7 * 24 * 60
)

// daytonaState maps a store state to Daytona's.
func daytonaState(s sandpit.State) string {
	switch s {
	case sandpit.StateCreating:
		return stateCreating
	case sandpit.StateRunning:
		return stateStarted
	case sandpit.StateStopped:
		return stateStopped
	case sandpit.StatePaused:
		return statePaused
	case sandpit.StateError:
		return stateError
	case sandpit.StateStarting:
		return stateStarting
	case sandpit.StateDeleting:
		return stateDestroying
	}
	return stateUnknown
}

// storeStates maps a Daytona state filter to store states; states Sandpit
// never reports match nothing.
func storeStates(s string) []sandpit.State {
	switch s {
	case stateCreating:
		return []sandpit.State{sandpit.StateCreating}
	case stateStarted:
		return []sandpit.State{sandpit.StateRunning}
	case stateStopped, stateArchived:
		// Archived sandboxes are stopped ones; the listing keeps both.
		return []sandpit.State{sandpit.StateStopped}
	case statePaused:
		return []sandpit.State{sandpit.StatePaused}
	case stateError:
		return []sandpit.State{sandpit.StateError}
	}
	return nil
}

// Sandbox is Daytona's sandbox model, with every field the SDK requires.
type Sandbox struct {
	// owner is not part of the wire shape: the event hub uses it to send a
	// sandbox's events only to its owner's sockets.
	owner          string
	ID             string `json:"id"`
	OrganizationID string `json:"organizationId"`
	Name           string `json:"name"`
	Snapshot       string `json:"snapshot,omitempty"`
	User           string `json:"user"`
	// Env is nil, and so omitted, in listings: Daytona lists sandboxes
	// without their environment, and the SDK tells the two apart by it.
	Env             map[string]string `json:"env,omitzero"`
	Labels          map[string]string `json:"labels"`
	Public          bool              `json:"public"`
	NetworkBlockAll bool              `json:"networkBlockAll"`
	// NetworkAllowList and DomainAllowList are the allowed CIDRs and
	// names, comma separated, as a create gives them.
	NetworkAllowList string `json:"networkAllowList,omitempty"`
	DomainAllowList  string `json:"domainAllowList,omitempty"`
	Target           string `json:"target"`
	// RunnerID names, in a cluster, the node that runs the sandbox (Daytona
	// names the runner machine here); omitted on a single daemon.
	RunnerID            string  `json:"runnerId,omitempty"`
	CPU                 float64 `json:"cpu"`
	GPU                 float64 `json:"gpu"`
	Memory              float64 `json:"memory"`
	Disk                float64 `json:"disk"`
	State               string  `json:"state"`
	DesiredState        string  `json:"desiredState"`
	ErrorReason         string  `json:"errorReason,omitempty"`
	Recoverable         bool    `json:"recoverable"`
	BackupState         string  `json:"backupState"`
	AutoStopInterval    int     `json:"autoStopInterval"`
	AutoArchiveInterval int     `json:"autoArchiveInterval"`
	AutoDeleteInterval  int     `json:"autoDeleteInterval"`
	AutoDestroyAt       string  `json:"autoDestroyAt,omitempty"`
	CreatedAt           string  `json:"createdAt"`
	UpdatedAt           string  `json:"updatedAt"`
	SandboxClass        string  `json:"sandboxClass"`
	ToolboxProxyURL     string  `json:"toolboxProxyUrl"`
	// Volumes are the volumes mounted into the sandbox.
	Volumes []SandboxVolume `json:"volumes,omitempty"`
}

// BuildInfo is how the SDK sends an image: a Dockerfile.
type BuildInfo struct {
	DockerfileContent string   `json:"dockerfileContent"`
	ContextHashes     []string `json:"contextHashes,omitempty"`
}

// toSandbox renders a store row. withEnv is false for listings.
func (h *sandboxAPI) toSandbox(r *http.Request, sb sandpit.Sandbox, withEnv bool) Sandbox {
	out := h.renderSandbox(h.toolboxBase(r), sb, withEnv)
	// Env values are secrets to a principal that may not execute.
	out.Env = sandpit.RedactEnv(r.Context(), out.Env)
	return out
}

// userOf is the account a sandbox of the template acts as: Daytona's own
// on the facade's default template, else the image's (root in the images
// Sandpit is meant for).
func (h *sandboxAPI) userOf(template string) string {
	if h.templateUser != "" && template != "" && template == h.defaultTemplate {
		return h.templateUser
	}
	return defaultUser
}

// renderSandbox renders a store row with the toolbox URL a client reaches the
// daemon by.
func (h *sandboxAPI) renderSandbox(toolboxBase string, sb sandpit.Sandbox, withEnv bool) Sandbox {
	out := Sandbox{
		owner:          sb.Owner,
		ID:             sb.ID,
		OrganizationID: organizationID,
		Name:           sb.Name,
		Snapshot:       sb.Template,
		User:           h.userOf(sb.Template),
		Labels:         sb.Labels,
		// Preview URLs go through Sandpit's proxy, which asks for no token:
		// in Daytona's terms every sandbox is public.
		Public:           true,
		NetworkBlockAll:  sb.Network.Egress == sandpit.EgressNone && len(sb.Network.Allow) == 0 && len(sb.Network.AllowDomains) == 0,
		NetworkAllowList: strings.Join(sb.Network.Allow, ","),
		DomainAllowList:  strings.Join(sb.Network.AllowDomains, ","),
		Target:           defaultTarget,
		RunnerID:         h.svc.Config().NodeName,
		// The allocation: the daemon's defaults when the create named none,
		// the host's capacity for a resource without a limit.
		CPU:                 h.res.cpu(sb.CPU),
		Memory:              h.res.memoryGiB(sb.MemoryMB),
		Disk:                h.res.diskGiB(sb.DiskMB),
		State:               daytonaState(sb.State),
		BackupState:         "None",
		AutoStopInterval:    sb.AutoStop,
		AutoArchiveInterval: sb.AutoArchive,
		AutoDeleteInterval:  sb.AutoDelete,
		CreatedAt:           sb.CreatedAt.UTC().Format(isoMillis),
		UpdatedAt:           sb.UpdatedAt.UTC().Format(isoMillis),
		SandboxClass:        "container",
		ToolboxProxyURL:     toolboxBase,
	}
	if out.Snapshot == "" {
		out.Snapshot = sb.Image
	}
	for _, m := range sb.Volumes {
		out.Volumes = append(out.Volumes, SandboxVolume{VolumeID: m.VolumeID, MountPath: m.Path})
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if h.svc.Archived(sb) {
		out.State = stateArchived
	}
	out.DesiredState = out.State
	if sb.State == sandpit.StateCreating {
		out.DesiredState = stateStarted
	}
	if sb.State == sandpit.StateError {
		out.ErrorReason = "the sandbox's container is gone or failed to start; delete the sandbox"
	}
	if !sb.EndAt.IsZero() {
		out.AutoDestroyAt = sb.EndAt.UTC().Format(isoMillis)
	}
	if withEnv {
		out.Env = sb.Env
		if out.Env == nil {
			out.Env = map[string]string{}
		}
	}
	return out
}

// CreateRequest is the body of POST /sandbox. Fields the SDK may send that
// Sandpit cannot honour are decoded so that asking for them is refused with a
// clear message rather than silently ignored.
type CreateRequest struct {
	Name                string            `json:"name"`
	Snapshot            string            `json:"snapshot"`
	User                string            `json:"user"`
	Env                 map[string]string `json:"env"`
	Labels              map[string]string `json:"labels"`
	Public              *bool             `json:"public"`
	Target              string            `json:"target"`
	CPU                 *float64          `json:"cpu"`
	GPU                 *float64          `json:"gpu"`
	GPUType             []string          `json:"gpuType"`
	Memory              *float64          `json:"memory"` // GiB
	Disk                *float64          `json:"disk"`   // GiB
	AutoStopInterval    *int              `json:"autoStopInterval"`
	AutoPauseInterval   *int              `json:"autoPauseInterval"`
	AutoArchiveInterval *int              `json:"autoArchiveInterval"`
	AutoDeleteInterval  *int              `json:"autoDeleteInterval"`
	TTLMinutes          *int              `json:"ttlMinutes"`
	BuildInfo           *BuildInfo        `json:"buildInfo"`
	NetworkBlockAll     *bool             `json:"networkBlockAll"`
	NetworkAllowList    string            `json:"networkAllowList"`
	DomainAllowList     string            `json:"domainAllowList"`
	Volumes             []SandboxVolume   `json:"volumes"`
	Secrets             []json.RawMessage `json:"secrets"`
	LinkedSandbox       string            `json:"linkedSandbox"`
	KVM                 *bool             `json:"kvm"`
	Spot                *bool             `json:"spot"`
}

// ImageFromDockerfile extracts the image of a Dockerfile that is a single
// "FROM <image>" line, which is what the SDK sends for create({image: "X"}):
// that image runs as it is, while anything more is built first (see
// build.go). Blank lines and comments are allowed around the FROM line.
func ImageFromDockerfile(content string) (string, error) {
	var instr []string
	for _, line := range strings.Split(content, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr = append(instr, line)
	}
	// The error only tells the caller why the Dockerfile is built rather
	// than run as an image.
	const hint = `a plain image reference (create({image: "debian:12"})) arrives as the single line "FROM debian:12"`
	switch {
	case len(instr) == 0:
		return "", badRequest("buildInfo.dockerfileContent is empty. %s", hint)
	case len(instr) > 1:
		return "", badRequest("buildInfo.dockerfileContent has %d instructions; only a single FROM line is supported. %s", len(instr), hint)
	}
	f := strings.Fields(instr[0])
	if !strings.EqualFold(f[0], "FROM") {
		return "", badRequest("buildInfo.dockerfileContent: unsupported instruction %q; only a single FROM line is supported. %s", f[0], hint)
	}
	if len(f) != 2 || strings.HasPrefix(f[1], "--") {
		return "", badRequest("buildInfo.dockerfileContent: %q is not a plain FROM <image> line (flags and AS stages are not supported). %s", instr[0], hint)
	}
	return f[1], nil
}

// serviceRequest validates a Daytona create and translates it. build is
// the Image to build first: a Dockerfile of more than one FROM line, or one
// with a build context; a single FROM line runs its image as it is.
func serviceRequest(req CreateRequest) (out service.CreateRequest, build *BuildInfo, err error) {
	out, err = serviceRequestOf(req)
	if err != nil || req.BuildInfo == nil {
		return out, nil, err
	}
	if req.Snapshot != "" {
		return out, nil, badRequest("give either snapshot or image, not both")
	}
	if len(req.BuildInfo.ContextHashes) == 0 {
		if img, err := ImageFromDockerfile(req.BuildInfo.DockerfileContent); err == nil {
			out.Image = img
			return out, nil, nil
		}
	}
	if strings.TrimSpace(req.BuildInfo.DockerfileContent) == "" {
		return out, nil, badRequest("buildInfo.dockerfileContent is empty")
	}
	return out, req.BuildInfo, nil
}

// serviceRequestOf translates everything of a create but its image.
func serviceRequestOf(req CreateRequest) (service.CreateRequest, error) {
	var out service.CreateRequest
	out.Template = req.Snapshot
	switch {
	case req.GPU != nil && *req.GPU > 0, len(req.GPUType) > 0:
		return out, badRequest("GPUs are not supported")
	case len(req.Secrets) > 0:
		return out, badRequest("secrets are not supported; pass envVars instead")
	case req.LinkedSandbox != "":
		return out, badRequest("linked sandboxes are not supported")
	case req.KVM != nil && *req.KVM:
		return out, badRequest("KVM sandboxes are not supported")
	}
	for _, v := range req.Volumes {
		if v.Subpath != "" {
			return out, badRequest("volumes: subpath is not supported; mount the whole volume")
		}
		out.Volumes = append(out.Volumes, service.MountRequest{Volume: v.VolumeID, Path: v.MountPath})
	}
	if req.CPU != nil {
		if *req.CPU < 0 {
			return out, badRequest("cpu must not be negative")
		}
		out.CPU = *req.CPU
	}
	if req.Memory != nil {
		if *req.Memory < 0 {
			return out, badRequest("memory must not be negative")
		}
		out.MemoryMB = int64(*req.Memory * 1024)
	}
	if req.Disk != nil {
		if *req.Disk < 0 || math.IsNaN(*req.Disk) {
			return out, badRequest("disk must not be negative")
		}
		out.DiskMB = int64(math.Round(*req.Disk * 1024))
	}
	switch {
	case req.AutoPauseInterval != nil && *req.AutoPauseInterval > 0:
		return out, badRequest("autoPauseInterval is not supported; use autoStopInterval")
	}
	autoStop, autoArchive := defaultAutoStop, defaultAutoArchive
	out.AutoStop, out.AutoArchive = &autoStop, &autoArchive
	if req.AutoStopInterval != nil {
		out.AutoStop = req.AutoStopInterval
	}
	if req.AutoArchiveInterval != nil {
		out.AutoArchive = req.AutoArchiveInterval
		if *req.AutoArchiveInterval == 0 {
			// Daytona reads 0 as "the maximum interval".
			v := maxAutoArchive
			out.AutoArchive = &v
		}
	}
	out.AutoDelete = req.AutoDeleteInterval
	if out.AutoDelete != nil && *out.AutoDelete < 0 {
		// Daytona takes any negative value as "never".
		v := sandpit.AutoDeleteNever
		out.AutoDelete = &v
	}
	if req.TTLMinutes != nil {
		if *req.TTLMinutes < 0 {
			return out, badRequest("ttlMinutes must not be negative")
		}
		out.Timeout = time.Duration(*req.TTLMinutes) * time.Minute
	}
	// Daytona's networkBlockAll blocks all egress; networkAllowList (comma
	// separated CIDRs) blocks all but those.
	if req.NetworkBlockAll != nil && *req.NetworkBlockAll {
		out.Network.Egress = sandpit.EgressNone
	}
	if req.NetworkAllowList != "" {
		out.Network.Egress = sandpit.EgressNone
		out.Network.Allow = commaList(req.NetworkAllowList)
	}
	// domainAllowList (comma separated names, "*.example.com" wildcards)
	// blocks all but those names, judged by the egress proxy.
	if req.DomainAllowList != "" {
		out.Network.Egress = sandpit.EgressNone
		out.Network.AllowDomains = commaList(req.DomainAllowList)
	}
	out.Name = req.Name
	out.Env = req.Env
	out.Labels = req.Labels
	return out, nil
}

// maxGeneratedNameTries bounds retries when a generated name collides, which
// takes a user having named a sandbox exactly like a fresh random id.
const maxGeneratedNameTries = 3

// checkDisk refuses a disk the daemon would not give, in Daytona's unit
// (GiB): the disk is a limit the daemon enforces, at most its --disk-mb.
func (h *sandboxAPI) checkDisk(mb int64) error {
	limit := h.svc.Config().MaxDiskMB()
	switch {
	case mb > 0 && limit == 0:
		return badRequest("disk: this daemon limits no sandbox's disk (--disk-mb 0), so a create cannot ask for one")
	case mb > limit:
		return badRequest("disk must be at most %g GiB (the daemon's --disk-mb), got %g", float64(limit)/1024, float64(mb)/1024)
	}
	return nil
}

func (h *sandboxAPI) create(w http.ResponseWriter, r *http.Request) {
	var req CreateRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	sreq, build, err := serviceRequest(req)
	if err == nil {
		err = h.checkDisk(sreq.DiskMB)
	}
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if build != nil {
		h.createBuilt(w, r, *build, sreq)
		return
	}
	if sreq.Template == "" && sreq.Image == "" {
		sreq.Template = h.defaultTemplate
	}
	if sreq.User == "" && h.userOf(sreq.Template) != defaultUser {
		sreq.User = h.templateUser
	}
	var sb sandpit.Sandbox
	if id := api.TargetID(r.Context()); id != "" {
		// A keyed create: the id is recorded in the claim, and an earlier
		// attempt of the same request may already have made the sandbox.
		sreq.ID = id
		if sreq.Name == "" {
			sreq.Name = id
		}
		sb, _, err = h.svc.CreateOrAdopt(r.Context(), sreq)
	} else {
		sb, err = h.createUnkeyed(r.Context(), &sreq)
	}
	if err != nil {
		if errors.Is(err, sandpit.ErrNameConflict) {
			err = nameConflict(sreq.Name)
		}
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r, sb, true))
}

// createUnkeyed makes the sandbox of a create without an Idempotency-Key.
func (h *sandboxAPI) createUnkeyed(ctx context.Context, sreq *service.CreateRequest) (sandpit.Sandbox, error) {
	generated := sreq.Name == ""
	for try := 0; ; try++ {
		if generated {
			// Daytona names an unnamed sandbox after its id, so that every
			// sandbox can be looked up by name.
			sreq.ID = service.NewSandboxID()
			sreq.Name = sreq.ID
		}
		// The store's partial unique index on name decides between racing
		// creates: the loser gets ErrNameConflict before any container exists.
		sb, err := h.svc.CreateSandbox(ctx, *sreq)
		if err == nil || !errors.Is(err, sandpit.ErrNameConflict) || !generated || try+1 >= maxGeneratedNameTries {
			return sb, err
		}
	}
}

// ListResponse is the body of GET /sandbox.
type ListResponse struct {
	Items      []Sandbox `json:"items"`
	NextCursor *string   `json:"nextCursor"`
}

// unsupportedListFilters are filters of GET /sandbox that Sandpit cannot
// apply; ignoring one would return sandboxes the caller excluded.
var unsupportedListFilters = []string{
	"snapshots", "regionIds", "sandboxClasses", "minCpu", "maxCpu", "minMemoryGiB", "maxMemoryGiB",
	"minDiskGiB", "maxDiskGiB", "minGpu", "maxGpu", "isPublic", "isRecoverable", "createdAtAfter",
	"createdAtBefore", "lastEventAfter", "lastEventBefore", "autoDestroyAtAfter", "autoDestroyAtBefore",
}

func (h *sandboxAPI) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for _, f := range unsupportedListFilters {
		if q.Has(f) {
			WriteError(w, r, badRequest("the list filter %s is not supported", f))
			return
		}
	}
	if s := q.Get("sort"); s != "" && s != "createdAt" {
		WriteError(w, r, badRequest("sandboxes can only be sorted by createdAt"))
		return
	}
	if o := q.Get("order"); o != "" && o != "asc" {
		WriteError(w, r, badRequest("sandboxes can only be listed in ascending order of creation"))
		return
	}
	opts := sandpit.ListOptions{PageToken: q.Get("cursor"), Labels: map[string]string{}}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			WriteError(w, r, badRequest("limit must be an integer from 1 to 1000"))
			return
		}
		opts.Limit = n
	}
	if l := q.Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &opts.Labels); err != nil {
			WriteError(w, r, badRequest("labels must be a JSON object of strings: %v", err))
			return
		}
	}
	var states []string
	for _, v := range q["states"] {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				states = append(states, s)
			}
		}
	}
	for _, s := range states {
		opts.States = append(opts.States, storeStates(s)...)
	}
	if len(states) > 0 && len(opts.States) == 0 {
		// Only states Sandpit never reports were asked for: nothing matches.
		api.WriteJSON(w, http.StatusOK, ListResponse{Items: []Sandbox{}})
		return
	}

	// id and name select one sandbox exactly.
	if id, name := q.Get("id"), q.Get("name"); id != "" || name != "" {
		h.listOne(w, r, id, name, opts)
		return
	}
	page, next, err := h.svc.ListSandboxes(r.Context(), opts)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	out := ListResponse{Items: make([]Sandbox, 0, len(page))}
	for _, sb := range page {
		item := h.toSandbox(r, sb, false)
		// stopped and archived share a store state; the filter tells them
		// apart here (a page may then come out shorter than the limit).
		if len(states) > 0 && !slices.Contains(states, item.State) {
			continue
		}
		out.Items = append(out.Items, item)
	}
	if next != "" {
		out.NextCursor = &next
	}
	if r.Header.Get(HeaderRowPositions) != "" {
		// A cluster node merging the listings of every node asks where
		// each row sits in the (created_at, id) order, which createdAt's
		// milliseconds cannot tell.
		pos := make(map[string]time.Time, len(page))
		for _, sb := range page {
			pos[sb.ID] = sb.CreatedAt
		}
		if b, err := json.Marshal(pos); err == nil {
			w.Header().Set(HeaderRowPositions, string(b))
		}
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// HeaderRowPositions, on a listing request, asks for each listed row's exact
// creation time; the answer carries them in the same header as a JSON object
// of id -> time. The cluster merges node listings with it.
const HeaderRowPositions = "Sandpit-Row-Positions"

// listOne answers a listing filtered by exact id and/or name.
func (h *sandboxAPI) listOne(w http.ResponseWriter, r *http.Request, id, name string, opts sandpit.ListOptions) {
	out := ListResponse{Items: []Sandbox{}}
	key := id
	if key == "" {
		key = name
	}
	sb, err := h.svc.GetSandboxByIDOrName(r.Context(), key)
	if err != nil && !errors.Is(err, sandpit.ErrNotFound) {
		WriteError(w, r, err)
		return
	}
	match := err == nil && opts.PageToken == "" &&
		(id == "" || sb.ID == id) && (name == "" || sb.Name == name)
	for k, v := range opts.Labels {
		if sb.Labels[k] != v {
			match = false
		}
	}
	if len(opts.States) > 0 {
		found := false
		for _, s := range opts.States {
			found = found || s == sb.State
		}
		match = match && found
	}
	if match {
		out.Items = append(out.Items, h.toSandbox(r, sb, false))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// lookup resolves the {idOrName} path value.
func (h *sandboxAPI) lookup(r *http.Request) (sandpit.Sandbox, error) {
	x := r.PathValue("idOrName")
	sb, err := h.svc.GetSandboxByIDOrName(r.Context(), x)
	if err != nil {
		return sb, lookupError(err, x)
	}
	return sb, nil
}

func (h *sandboxAPI) get(w http.ResponseWriter, r *http.Request) {
	sb, err := h.lookup(r)
	if err != nil && isNotFound(err) && h.getPending(w, r) {
		return
	}
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r, sb, true))
}

func (h *sandboxAPI) delete(w http.ResponseWriter, r *http.Request) {
	sb, err := h.lookup(r)
	if err != nil && isNotFound(err) && h.deletePending(w, r) {
		return
	}
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if err := h.svc.DeleteSandbox(r.Context(), sb.ID); err != nil {
		WriteError(w, r, lookupError(err, r.PathValue("idOrName")))
		return
	}
	h.ptys.dropSandbox(sb.ID)
	out := h.toSandbox(r, sb, true)
	out.State, out.DesiredState = stateDestroyed, stateDestroyed
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *sandboxAPI) start(w http.ResponseWriter, r *http.Request) {
	h.transition(w, r, h.svc.StartSandbox)
}

func (h *sandboxAPI) stop(w http.ResponseWriter, r *http.Request) {
	// force=true asks Daytona for SIGKILL; Sandpit's stop already ends with
	// a kill after a short grace period, so it is accepted as is.
	h.transition(w, r, h.svc.StopSandbox)
}

// archive answers POST /sandbox/{idOrName}/archive: the sandbox's
// filesystem goes into an image and its container is removed; start
// restores it with its files.
func (h *sandboxAPI) archive(w http.ResponseWriter, r *http.Request) {
	h.transition(w, r, h.svc.ArchiveSandbox)
}

// setInterval answers POST /sandbox/{idOrName}/{autostop,autoarchive,
// autodelete}/{interval} with the updated sandbox, as Daytona does.
func (h *sandboxAPI) setInterval(which sandpit.Interval) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := strconv.Atoi(r.PathValue("interval"))
		if err != nil {
			WriteError(w, r, badRequest("interval must be an integer number of minutes"))
			return
		}
		switch {
		case which == sandpit.IntervalAutoDelete && v < 0:
			v = sandpit.AutoDeleteNever
		case which == sandpit.IntervalAutoArchive && v == 0:
			v = maxAutoArchive
		case v < 0:
			WriteError(w, r, badRequest("%s interval must not be negative", which))
			return
		}
		sb, err := h.lookup(r)
		if err != nil {
			WriteError(w, r, err)
			return
		}
		after, err := h.svc.SetInterval(r.Context(), sb.ID, which, v)
		if err != nil {
			WriteError(w, r, lookupError(err, r.PathValue("idOrName")))
			return
		}
		api.WriteJSON(w, http.StatusOK, h.toSandbox(r, after, true))
	}
}

// commaList splits a comma-separated list, dropping blanks.
func commaList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// networkSettings is the body of sandbox.updateNetworkSettings.
type networkSettings struct {
	NetworkBlockAll  *bool   `json:"networkBlockAll"`
	NetworkAllowList *string `json:"networkAllowList"`
	DomainAllowList  *string `json:"domainAllowList"`
}

// updateNetwork serves POST /sandbox/{idOrName}/network-settings: the
// sandbox's egress policy changes for the connections that start after the
// answer. networkBlockAll false restores outbound access and clears the
// stored lists; true blocks everything; a list given replaces that list
// (an empty one clears it) and blocks what it does not name. Sending the
// same settings again changes nothing.
func (h *sandboxAPI) updateNetwork(w http.ResponseWriter, r *http.Request) {
	var req networkSettings
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, badRequest("%v", err))
		return
	}
	if req.NetworkBlockAll == nil && req.NetworkAllowList == nil && req.DomainAllowList == nil {
		WriteError(w, r, badRequest("at least one of networkBlockAll, networkAllowList or domainAllowList must be set"))
		return
	}
	sb, err := h.lookup(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	p := sb.Network
	if b := req.NetworkBlockAll; b != nil {
		if *b {
			p = sandpit.NetworkPolicy{Egress: sandpit.EgressNone}
		} else {
			p = sandpit.NetworkPolicy{}
		}
	}
	if l := req.NetworkAllowList; l != nil {
		p.Allow = commaList(*l)
	}
	if l := req.DomainAllowList; l != nil {
		p.AllowDomains = commaList(*l)
	}
	if req.NetworkAllowList != nil || req.DomainAllowList != nil {
		p.Egress = sandpit.EgressNone
		if len(p.Allow) == 0 && len(p.AllowDomains) == 0 && (req.NetworkBlockAll == nil || !*req.NetworkBlockAll) {
			// Both lists emptied: nothing is restricted any more.
			p = sandpit.NetworkPolicy{Deny: p.Deny}
		}
	}
	after, err := h.svc.UpdateNetwork(r.Context(), sb.ID, p)
	if err != nil {
		WriteError(w, r, lookupError(err, r.PathValue("idOrName")))
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r, after, true))
}

// ResizeRequest is the body of POST /sandbox/{id}/resize: cpu in cores,
// memory and disk in GiB; a field left out keeps what the sandbox has.
type ResizeRequest struct {
	CPU    *float64 `json:"cpu"`
	Memory *float64 `json:"memory"`
	Disk   *float64 `json:"disk"`
}

// resize answers POST /sandbox/{id}/resize (sandbox.resize) with Daytona's
// rules: a started sandbox's cpu and memory may only grow, a stopped one's
// may change either way. The change is done when the answer comes, so the
// state is never "resizing" and the SDK's wait returns at once.
func (h *sandboxAPI) resize(w http.ResponseWriter, r *http.Request) {
	var req ResizeRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	if req.CPU == nil && req.Memory == nil && req.Disk == nil {
		WriteError(w, r, badRequest("give cpu, memory or disk to resize"))
		return
	}
	sb, err := h.lookup(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	var want service.Resize
	switch {
	case req.CPU != nil && (*req.CPU <= 0 || math.IsNaN(*req.CPU)):
		err = badRequest("cpu must be a positive number of cores")
	case req.Memory != nil && (*req.Memory <= 0 || math.IsNaN(*req.Memory)):
		err = badRequest("memory must be a positive number of GiB")
	case req.Disk != nil && *req.Disk != h.res.diskGiB(sb.DiskMB):
		// The disk is the engine's quota, fixed when the container is made.
		err = badRequest("disk cannot be resized: a sandbox keeps the disk it was created with (%g GiB)", h.res.diskGiB(sb.DiskMB))
	}
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if req.CPU != nil {
		want.CPU = *req.CPU
	}
	if req.Memory != nil {
		want.MemoryMB = int64(math.Round(*req.Memory * 1024))
	}
	if sb.State == sandpit.StateRunning || sb.State == sandpit.StatePaused {
		if (want.CPU != 0 && want.CPU < h.res.cpu(sb.CPU)) || (want.MemoryMB != 0 && float64(want.MemoryMB)/1024 < h.res.memoryGiB(sb.MemoryMB)) {
			WriteError(w, r, badRequest("a started sandbox's cpu and memory can only grow: stop it to make them smaller"))
			return
		}
	}
	if want == (service.Resize{}) {
		api.WriteJSON(w, http.StatusOK, h.toSandbox(r, sb, true))
		return
	}
	after, err := h.svc.ResizeSandbox(r.Context(), sb.ID, want)
	if err != nil {
		WriteError(w, r, lookupError(err, r.PathValue("idOrName")))
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r, after, true))
}

// maxAutoArchive is the longest auto-archive interval (30 days), which
// Daytona substitutes for 0.
const maxAutoArchive = 30 * 24 * 60

// refreshActivity answers POST /sandbox/{id}/last-activity.
func (h *sandboxAPI) refreshActivity(w http.ResponseWriter, r *http.Request) {
	sb, err := h.lookup(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if err := h.svc.RefreshActivity(r.Context(), sb.ID); err != nil {
		WriteError(w, r, lookupError(err, r.PathValue("idOrName")))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// transition runs a start or stop and answers with the resulting sandbox.
func (h *sandboxAPI) transition(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, id string) (sandpit.Sandbox, error)) {
	sb, err := h.lookup(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	after, err := op(r.Context(), sb.ID)
	if err != nil || sb.State != sandpit.StateRunning || after.State != sandpit.StateRunning {
		// A stop, or a start after one, leaves no shell of before running;
		// only a start of a running sandbox, which does nothing, keeps them.
		h.ptys.dropSandbox(sb.ID)
	}
	if errors.Is(err, service.ErrDeletedOnStop) {
		// An ephemeral sandbox (auto-delete 0) is gone once stopped; the SDK
		// waits for stopped or destroyed and takes either.
		out := h.toSandbox(r, after, true)
		out.State, out.DesiredState = stateDestroyed, stateDestroyed
		api.WriteJSON(w, http.StatusOK, out)
		return
	}
	if err != nil {
		WriteError(w, r, lookupError(err, r.PathValue("idOrName")))
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r, after, true))
}

// LabelsBody is the body and answer of PUT /sandbox/{id}/labels.
type LabelsBody struct {
	Labels map[string]string `json:"labels"`
}

func (h *sandboxAPI) setLabels(w http.ResponseWriter, r *http.Request) {
	var req LabelsBody
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	if req.Labels == nil {
		WriteError(w, r, badRequest("labels is required (an object of strings)"))
		return
	}
	sb, err := h.lookup(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	after, err := h.svc.SetLabels(r.Context(), sb.ID, req.Labels)
	if err != nil {
		WriteError(w, r, lookupError(err, r.PathValue("idOrName")))
		return
	}
	labels := after.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	api.WriteJSON(w, http.StatusOK, LabelsBody{Labels: labels})
}

func (h *sandboxAPI) toolboxProxyURL(w http.ResponseWriter, r *http.Request) {
	if _, err := h.lookup(r); err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]string{"url": h.toolboxBase(r)})
}

// PreviewURL is the answer of GET /sandbox/{id}/ports/{port}/preview-url.
type PreviewURL struct {
	SandboxID string `json:"sandboxId"`
	URL       string `json:"url"`
	// Token is the port's preview token, to send in Daytona's
	// x-daytona-preview-token header, once a signed preview URL has made
	// the port private; empty while the port is public.
	Token string `json:"token"`
}

func (h *sandboxAPI) previewURL(w http.ResponseWriter, r *http.Request) {
	sb, p, token, ok := h.exposeHTTP(w, r, false)
	if ok {
		api.WriteJSON(w, http.StatusOK, PreviewURL{SandboxID: sb.ID, URL: p.PublicURL, Token: token})
	}
}

// exposeHTTP exposes the {port} of the {idOrName} sandbox through the
// preview proxy, privately (only with the returned preview token or a
// signed URL) when private is set; on failure it has answered the request.
// Exposing is idempotent: asking again for the same port finds the existing
// exposure (the (sandbox, port) primary key decides). token is the port's
// preview token when the port is private.
func (h *sandboxAPI) exposeHTTP(w http.ResponseWriter, r *http.Request, private bool) (sandpit.Sandbox, sandpit.ExposedPort, string, bool) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		WriteError(w, r, badRequest("port must be an integer from 1 to 65535"))
		return sandpit.Sandbox{}, sandpit.ExposedPort{}, "", false
	}
	sb, err := h.lookup(r)
	if err != nil {
		WriteError(w, r, err)
		return sb, sandpit.ExposedPort{}, "", false
	}
	var (
		res   service.ExposeResult
		token string
	)
	if private {
		res, token, err = h.svc.ExposePrivatePort(r.Context(), sb.ID, port)
	} else {
		res, err = h.svc.ExposePort(r.Context(), sb.ID, port, service.ProtoHTTP)
		if err == nil {
			token, err = h.svc.PreviewToken(r.Context(), sb.ID, port)
		}
	}
	if err != nil {
		WriteError(w, r, err)
		return sb, sandpit.ExposedPort{}, "", false
	}
	return sb, res.Port, token, true
}
