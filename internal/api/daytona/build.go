package daytona

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

// Images built on the fly: daytona.create({image: Image...}) sends the
// Image's Dockerfile in buildInfo. The facade builds it into a template of
// the caller's named after its content (so one content is built once, and
// a later create of the same Image starts from the built image), answers
// at once with the sandbox in Daytona's pending_build state, and creates
// the sandbox from the template when the build ends. Until then the sandbox
// exists only here, in memory: a daemon restart forgets a create still
// building (the build itself ends as error), as it would end its request.

// Daytona sandbox states of a create that builds its image.
const (
	statePendingBuild     = "pending_build"
	stateBuildingSnapshot = "building_snapshot"
	stateBuildFailed      = "build_failed"
)

// keepEnded is how long a create that built its image is remembered after
// it ended: its build log stays reachable by the sandbox's id, and a failed
// one answers GET /sandbox/{id} with its reason.
const keepEnded = 15 * time.Minute

// onTheFlyPrefix names the templates daytona.create builds its Images into;
// Daytona lists such snapshots too.
const onTheFlyPrefix = "daytona-"

// pendingCreate is one create building its image.
type pendingCreate struct {
	id, owner, name string
	templateID      string
	buildID         string
	req             service.CreateRequest
	createdAt       time.Time

	// Under pendingCreates.mu:
	state     string // statePendingBuild until the build ends, then stateCreating, stateStarted, stateBuildFailed or stateError
	reason    string
	endedAt   time.Time
	cancelled bool
}

// pendingCreates holds the creates that build their image.
type pendingCreates struct {
	mu   sync.Mutex
	byID map[string]*pendingCreate
}

func newPendingCreates() *pendingCreates {
	return &pendingCreates{byID: map[string]*pendingCreate{}}
}

// callerOwner is the owner the request acts for.
func callerOwner(ctx context.Context) (string, bool) {
	p, ok := sandpit.PrincipalFrom(ctx)
	if !ok {
		return sandpit.AdminOwner, true
	}
	if p.Owner == "" {
		return sandpit.AdminOwner, p.Admin
	}
	return p.Owner, p.Admin
}

// find returns the caller's pending create of the id or name.
func (p *pendingCreates) find(ctx context.Context, idOrName string) *pendingCreate {
	owner, admin := callerOwner(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.byID[idOrName]; c != nil && (admin || c.owner == owner) {
		return c
	}
	for _, c := range p.byID {
		if c.name == idOrName && c.owner == owner {
			return c
		}
	}
	return nil
}

// add records c unless the owner has a live create of its name; it drops
// the entries that ended long ago.
func (p *pendingCreates) add(c *pendingCreate, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, o := range p.byID {
		if !o.endedAt.IsZero() && now.Sub(o.endedAt) > keepEnded {
			delete(p.byID, id)
			continue
		}
		if o.owner == c.owner && o.name == c.name && (o.state == statePendingBuild || o.state == stateCreating) {
			return false
		}
	}
	p.byID[c.id] = c
	return true
}

func (p *pendingCreates) end(c *pendingCreate, state, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.state, c.reason, c.endedAt = state, reason, time.Now()
}

// contentName is the template an Image's content builds into.
func contentName(bi BuildInfo) string {
	sum := sha256.Sum256([]byte(bi.DockerfileContent + "\x00" + strings.Join(bi.ContextHashes, ",")))
	return onTheFlyPrefix + hex.EncodeToString(sum[:12])
}

// createBuilt answers a create whose image must be built first.
func (h *sandboxAPI) createBuilt(w http.ResponseWriter, r *http.Request, bi BuildInfo, sreq service.CreateRequest) {
	ctx := r.Context()
	def := templates.BuildDefinition{Dockerfile: bi.DockerfileContent, Files: contextFiles(bi.ContextHashes)}
	src, _ := json.Marshal(snapshotSource{BuildInfo: &bi})
	def.Source = string(src)
	if err := h.checkContext(ctx, def.Files); err != nil {
		WriteError(w, r, err)
		return
	}
	owner, _ := callerOwner(ctx)
	if sreq.Name != "" {
		if _, err := h.svc.GetSandboxByIDOrName(ctx, sreq.Name); err == nil {
			WriteError(w, r, nameConflict(sreq.Name))
			return
		} else if !errors.Is(err, sandpit.ErrNotFound) {
			WriteError(w, r, err)
			return
		}
	}
	// A keyed create makes its sandbox under the id its claim recorded.
	if sreq.ID = api.TargetID(ctx); sreq.ID == "" {
		sreq.ID = service.NewSandboxID()
	}
	if sreq.Name == "" {
		sreq.Name = sreq.ID
	}
	t, _, err := h.tpl.EnsureTemplate(ctx, templates.Spec{Name: contentName(bi)})
	if err != nil {
		WriteError(w, r, err)
		return
	}
	b, err := h.startBuild(ctx, t, def)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	c := &pendingCreate{id: sreq.ID, owner: owner, name: sreq.Name, templateID: t.ID, buildID: b.ID, req: sreq, createdAt: time.Now(), state: statePendingBuild}
	if !h.pending.add(c, time.Now()) {
		WriteError(w, r, nameConflict(sreq.Name))
		return
	}
	// The create outlives its request (the SDK polls for it) but not the
	// daemon, and acts as the caller.
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(h.ctx, cancel)
	go func() {
		defer cancel()
		defer stop()
		h.finishBuilt(bctx, c)
	}()
	h.log.Info("daytona create builds its image first", "sandbox", c.id, "template", t.ID, "build", b.ID)
	// Always pending_build first: the SDK streams the build's log only to
	// a create that answered so.
	api.WriteJSON(w, http.StatusOK, h.renderPending(r, c, statePendingBuild))
}

// finishBuilt waits for the build of c, then creates its sandbox.
func (h *sandboxAPI) finishBuilt(ctx context.Context, c *pendingCreate) {
	b, err := h.tpl.WaitBuild(ctx, c.buildID)
	if err != nil {
		h.pending.end(c, stateError, "waiting for the image build: "+err.Error())
		return
	}
	if b.State != sandpit.BuildReady {
		h.pending.end(c, stateBuildFailed, b.Error)
		return
	}
	h.pending.mu.Lock()
	if c.cancelled {
		h.pending.mu.Unlock()
		return
	}
	c.state = stateCreating
	h.pending.mu.Unlock()
	req := c.req
	req.Template = c.templateID
	if _, err := h.svc.CreateSandbox(ctx, req); err != nil {
		msg := err.Error()
		if errors.Is(err, sandpit.ErrNameConflict) {
			msg = nameConflict(req.Name).Error()
		}
		h.pending.end(c, stateError, msg)
		return
	}
	h.pending.end(c, stateStarted, "")
}

// pendingState is what a pending create reports now.
func (h *sandboxAPI) pendingState(ctx context.Context, c *pendingCreate) (string, string) {
	h.pending.mu.Lock()
	state, reason := c.state, c.reason
	h.pending.mu.Unlock()
	if state != statePendingBuild {
		return state, reason
	}
	if b, err := h.tpl.Build(ctx, c.buildID); err == nil && b.State != sandpit.BuildWaiting {
		return stateBuildingSnapshot, ""
	}
	return statePendingBuild, ""
}

// renderPending renders a create that builds its image, in state.
func (h *sandboxAPI) renderPending(r *http.Request, c *pendingCreate, state string) Sandbox {
	cfg := h.svc.Config()
	cpu, mem := c.req.CPU, c.req.MemoryMB
	if cpu == 0 {
		cpu = min(cfg.DefaultCPU, cfg.MaxCPU)
	}
	if mem == 0 {
		mem = min(cfg.DefaultMemoryMB, cfg.MaxMemoryMB)
	}
	ts := c.createdAt.UTC().Format(isoMillis)
	out := Sandbox{
		owner: c.owner, ID: c.id, OrganizationID: organizationID, Name: c.name, Snapshot: c.templateID, User: defaultUser,
		Env: c.req.Env, Labels: c.req.Labels, Public: true, Target: defaultTarget, RunnerID: cfg.NodeName,
		CPU: h.res.cpu(cpu), Memory: h.res.memoryGiB(mem), Disk: h.res.diskGiB(c.req.DiskMB),
		State: state, DesiredState: stateStarted, BackupState: "None",
		CreatedAt: ts, UpdatedAt: ts, SandboxClass: "container", ToolboxProxyURL: h.toolboxBase(r),
	}
	if c.req.AutoStop != nil {
		out.AutoStopInterval = *c.req.AutoStop
	}
	if c.req.AutoArchive != nil {
		out.AutoArchiveInterval = *c.req.AutoArchive
	}
	if c.req.AutoDelete != nil {
		out.AutoDeleteInterval = *c.req.AutoDelete
	}
	if out.Env == nil {
		out.Env = map[string]string{}
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Env = sandpit.RedactEnv(r.Context(), out.Env)
	h.pending.mu.Lock()
	if state == stateBuildFailed || state == stateError {
		out.ErrorReason = c.reason
		out.DesiredState = state
	}
	h.pending.mu.Unlock()
	return out
}

// getPending answers GET /sandbox/{id} for a create that builds its image
// and has no sandbox yet; false when there is none.
func (h *sandboxAPI) getPending(w http.ResponseWriter, r *http.Request) bool {
	c := h.pending.find(r.Context(), r.PathValue("idOrName"))
	if c == nil {
		return false
	}
	state, _ := h.pendingState(r.Context(), c)
	if state == stateStarted {
		// The sandbox was made between the store lookup and now.
		if sb, err := h.svc.GetSandboxByIDOrName(r.Context(), c.id); err == nil {
			api.WriteJSON(w, http.StatusOK, h.toSandbox(r, sb, true))
			return true
		}
		state = stateCreating
	}
	api.WriteJSON(w, http.StatusOK, h.renderPending(r, c, state))
	return true
}

// deletePending deletes a create that builds its image and has no sandbox
// yet: the sandbox is not made (the build goes on: another create of the
// same Image may be waiting for it); false when there is none.
func (h *sandboxAPI) deletePending(w http.ResponseWriter, r *http.Request) bool {
	c := h.pending.find(r.Context(), r.PathValue("idOrName"))
	if c == nil {
		return false
	}
	h.pending.mu.Lock()
	state := c.state
	if state == statePendingBuild {
		c.cancelled = true
		c.state, c.reason, c.endedAt = stateDestroyed, "", time.Now()
	}
	h.pending.mu.Unlock()
	switch state {
	case statePendingBuild, stateBuildFailed, stateError, stateDestroyed:
		h.pending.mu.Lock()
		delete(h.pending.byID, c.id)
		h.pending.mu.Unlock()
		out := h.renderPending(r, c, stateDestroyed)
		out.DesiredState = stateDestroyed
		api.WriteJSON(w, http.StatusOK, out)
		return true
	case stateStarted:
		// Made meanwhile: the store's delete takes it.
		return false
	}
	WriteError(w, r, newProblem(http.StatusConflict, "Sandbox %s is being created from its built image; delete it once it has started", c.id))
	return true
}

// buildLogsURL answers .../build-logs-url: the absolute URL of the log
// stream, without a query (the SDK appends ?follow=true).
func (h *sandboxAPI) buildLogsURL(kind, id string, r *http.Request) map[string]string {
	return map[string]string{"url": baseURL(r) + h.prefix + "/" + kind + "/" + url.PathEscape(id) + "/build-logs"}
}

func (h *sandboxAPI) snapshotBuildLogsURL(w http.ResponseWriter, r *http.Request) {
	s, _, daemon, err := h.lookupSnapshot(r)
	if err == nil && daemon {
		err = newProblem(http.StatusNotFound, "Snapshot %s was not built by this daemon and has no build logs", s.Name)
	}
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.buildLogsURL("snapshots", s.ID, r))
}

func (h *sandboxAPI) snapshotBuildLogs(w http.ResponseWriter, r *http.Request) {
	s, t, daemon, err := h.lookupSnapshot(r)
	if err == nil && daemon {
		err = newProblem(http.StatusNotFound, "Snapshot %s was not built by this daemon and has no build logs", s.Name)
	}
	if err != nil {
		WriteError(w, r, err)
		return
	}
	b, ok := h.currentBuild(r.Context(), t)
	if !ok {
		WriteError(w, r, newProblem(http.StatusNotFound, "Snapshot %s has no build", s.Name))
		return
	}
	h.streamBuildLog(w, r, b.ID)
}

// sandboxBuild finds the build of a sandbox whose create built its image.
func (h *sandboxAPI) sandboxBuild(r *http.Request) (*pendingCreate, error) {
	x := r.PathValue("idOrName")
	c := h.pending.find(r.Context(), x)
	if c == nil {
		if sb, err := h.svc.GetSandboxByIDOrName(r.Context(), x); err == nil {
			c = h.pending.find(r.Context(), sb.ID)
		} else if !errors.Is(err, sandpit.ErrNotFound) {
			return nil, err
		}
	}
	if c == nil {
		return nil, newProblem(http.StatusNotFound, "Sandbox with ID or name %s has no image build", x)
	}
	return c, nil
}

func (h *sandboxAPI) sandboxBuildLogsURL(w http.ResponseWriter, r *http.Request) {
	c, err := h.sandboxBuild(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.buildLogsURL("sandbox", c.id, r))
}

func (h *sandboxAPI) sandboxBuildLogs(w http.ResponseWriter, r *http.Request) {
	c, err := h.sandboxBuild(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	h.streamBuildLog(w, r, c.buildID)
}

// streamBuildLog answers a build's log as plain text, one line per entry as
// docker build prints them: with ?follow=true from the start until the
// build ends, which closes the stream (the SDK stops reading then),
// otherwise what there is now.
func (h *sandboxAPI) streamBuildLog(w http.ResponseWriter, r *http.Request, buildID string) {
	if _, err := h.tpl.Build(r.Context(), buildID); err != nil {
		WriteError(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	// A build may take longer than the server's write timeout.
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	write := func(e templates.LogEntry) error {
		if _, err := io.WriteString(w, e.Message+"\n"); err != nil {
			return err
		}
		return rc.Flush()
	}
	if r.URL.Query().Get("follow") == "true" {
		_ = h.tpl.FollowBuildLog(r.Context(), buildID, 0, write)
		return
	}
	lines, _, err := h.tpl.BuildLog(r.Context(), buildID, 0)
	if err != nil {
		return
	}
	for _, e := range lines {
		if write(e) != nil {
			return
		}
	}
}
