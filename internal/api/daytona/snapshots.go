package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

// Snapshots: Daytona's snapshots are the images sandboxes start from. The
// daemon's own templates (name -> image) and its default image are listed
// read-only, always active. Every other snapshot is one of the caller's
// templates (see internal/templates): POST /snapshots builds it from the
// Dockerfile the SDK's Image generates, or from an existing image, and its
// state is that of its newest build.

// Snapshot is Daytona's SnapshotDto.
type Snapshot struct {
	ID             string   `json:"id"`
	OrganizationID string   `json:"organizationId"`
	General        bool     `json:"general"`
	Name           string   `json:"name"`
	ImageName      string   `json:"imageName"`
	State          string   `json:"state"`
	Size           *float64 `json:"size"`
	Entrypoint     []string `json:"entrypoint"`
	CPU            float64  `json:"cpu"`
	GPU            float64  `json:"gpu"`
	Mem            float64  `json:"mem"`
	Disk           float64  `json:"disk"`
	ErrorReason    *string  `json:"errorReason"`
	CreatedAt      string   `json:"createdAt"`
	UpdatedAt      string   `json:"updatedAt"`
	LastUsedAt     *string  `json:"lastUsedAt"`
	SourceSandbox  *string  `json:"sourceSandboxId"`
	SandboxClass   string   `json:"sandboxClass"`
	// BuildInfo is what a snapshot built from an Image was built from.
	BuildInfo *SnapshotBuildInfo `json:"buildInfo,omitempty"`
}

// SnapshotBuildInfo is Daytona's BuildInfo of a snapshot.
type SnapshotBuildInfo struct {
	DockerfileContent string   `json:"dockerfileContent"`
	ContextHashes     []string `json:"contextHashes"`
	CreatedAt         string   `json:"createdAt"`
	UpdatedAt         string   `json:"updatedAt"`
	SnapshotRef       string   `json:"snapshotRef"`
}

// PaginatedSnapshots is the answer of GET /snapshots.
type PaginatedSnapshots struct {
	Items      []Snapshot `json:"items"`
	Total      int        `json:"total"`
	Page       int        `json:"page"`
	TotalPages int        `json:"totalPages"`
}

// snapshots lists the daemon's templates, and its default image under its
// own reference unless a template already names it, sorted by name.
func (h *sandboxAPI) snapshots() []Snapshot {
	cfg := h.svc.Config()
	images := map[string]string{}
	for name, img := range cfg.Templates {
		images[name] = img
	}
	if cfg.DefaultImage != "" {
		named := false
		for _, img := range cfg.Templates {
			named = named || img == cfg.DefaultImage
		}
		if !named {
			images[cfg.DefaultImage] = cfg.DefaultImage
		}
	}
	// The daemon's start is the closest thing to a creation time it knows.
	ts := h.started.UTC().Format(isoMillis)
	out := make([]Snapshot, 0, len(images))
	for name, img := range images {
		out = append(out, Snapshot{
			ID: name, OrganizationID: organizationID, General: true, Name: name, ImageName: img,
			State: "active", Entrypoint: []string{},
			// What a sandbox made from it gets: the daemon's defaults.
			CPU: h.res.cpu(min(cfg.DefaultCPU, cfg.MaxCPU)), Mem: h.res.memoryGiB(min(cfg.DefaultMemoryMB, cfg.MaxMemoryMB)), Disk: h.res.diskGiB(0),
			CreatedAt: ts, UpdatedAt: ts, SandboxClass: "container",
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Daytona snapshot states.
const (
	snapPending     = "pending"
	snapBuilding    = "building"
	snapActive      = "active"
	snapError       = "error"
	snapBuildFailed = "build_failed"
)

// snapshotSource is what a snapshot was made from, kept as its builds'
// source text so that it can be shown back as Daytona shows it.
type snapshotSource struct {
	ImageName  string     `json:"imageName,omitempty"`
	Entrypoint []string   `json:"entrypoint,omitempty"`
	BuildInfo  *BuildInfo `json:"buildInfo,omitempty"`
}

// CreateSnapshotRequest is the body of POST /snapshots: an existing image
// (imageName) or an Image's Dockerfile and context (buildInfo).
type CreateSnapshotRequest struct {
	Name         string     `json:"name"`
	ImageName    string     `json:"imageName"`
	Entrypoint   []string   `json:"entrypoint"`
	BuildInfo    *BuildInfo `json:"buildInfo"`
	CPU          *float64   `json:"cpu"`
	GPU          *float64   `json:"gpu"`
	GPUType      []string   `json:"gpuType"`
	Memory       *float64   `json:"memory"` // GiB
	Disk         *float64   `json:"disk"`   // GiB
	RegionID     string     `json:"regionId"`
	SandboxClass string     `json:"sandboxClass"`
}

// currentBuild is the build a template's snapshot state is read from: its
// newest started one. A build row that never got its definition (a start
// refused as a conflict) is skipped; the newest row stands when none
// started.
func (h *sandboxAPI) currentBuild(ctx context.Context, t sandpit.Template) (sandpit.TemplateBuild, bool) {
	bs, err := h.tpl.TemplateBuilds(ctx, t.ID)
	if err != nil || len(bs) == 0 {
		return sandpit.TemplateBuild{}, false
	}
	for i := len(bs) - 1; i >= 0; i-- {
		if bs[i].ContentHash != "" {
			return bs[i], true
		}
	}
	return bs[len(bs)-1], true
}

// snapshotOf renders one of the caller's templates as a snapshot.
func (h *sandboxAPI) snapshotOf(ctx context.Context, t sandpit.Template) Snapshot {
	cfg := h.svc.Config()
	cpu, mem := t.CPU, t.MemoryMB
	if cpu == 0 {
		cpu = min(cfg.DefaultCPU, cfg.MaxCPU)
	}
	if mem == 0 {
		mem = min(cfg.DefaultMemoryMB, cfg.MaxMemoryMB)
	}
	out := Snapshot{
		ID: t.ID, OrganizationID: organizationID, Name: t.Name, State: snapPending,
		CPU: h.res.cpu(cpu), Mem: h.res.memoryGiB(mem), Disk: h.res.diskGiB(0),
		CreatedAt: t.CreatedAt.UTC().Format(isoMillis), UpdatedAt: t.UpdatedAt.UTC().Format(isoMillis),
		SandboxClass: "container",
	}
	b, ok := h.currentBuild(ctx, t)
	if !ok {
		return out
	}
	var src snapshotSource
	_ = json.Unmarshal([]byte(b.Definition), &src)
	out.ImageName, out.Entrypoint = src.ImageName, src.Entrypoint
	if src.BuildInfo != nil {
		hashes := src.BuildInfo.ContextHashes
		if hashes == nil {
			hashes = []string{}
		}
		at := b.CreatedAt.UTC().Format(isoMillis)
		out.BuildInfo = &SnapshotBuildInfo{DockerfileContent: src.BuildInfo.DockerfileContent, ContextHashes: hashes, CreatedAt: at, UpdatedAt: at, SnapshotRef: b.Image}
	}
	switch b.State {
	case sandpit.BuildWaiting:
		out.State = snapPending
	case sandpit.BuildBuilding:
		out.State = snapBuilding
	case sandpit.BuildReady:
		out.State = snapActive
	case sandpit.BuildError:
		// Daytona fails a build as build_failed and a pull as error.
		out.State = snapBuildFailed
		if src.BuildInfo == nil {
			out.State = snapError
		}
		reason := b.Error
		out.ErrorReason = &reason
	}
	if !b.EndedAt.IsZero() {
		out.UpdatedAt = b.EndedAt.UTC().Format(isoMillis)
	}
	return out
}

// allSnapshots lists the daemon's snapshots, then the caller's named
// templates, each part sorted by name.
func (h *sandboxAPI) allSnapshots(ctx context.Context) ([]Snapshot, error) {
	out := h.snapshots()
	ts, err := h.tpl.Templates(ctx)
	if errors.Is(err, templates.ErrBuildsUnavailable) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	for _, t := range ts {
		if t.Name != "" {
			out = append(out, h.snapshotOf(ctx, t))
		}
	}
	return out, nil
}

func (h *sandboxAPI) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, limit := 1, 100
	for _, p := range []struct {
		name string
		v    *int
	}{{"page", &page}, {"limit", &limit}} {
		if s := q.Get(p.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 1000 {
				WriteError(w, r, badRequest("%s must be an integer from 1 to 1000", p.name))
				return
			}
			*p.v = n
		}
	}
	all, err := h.allSnapshots(r.Context())
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if name := q.Get("name"); name != "" {
		kept := all[:0]
		for _, s := range all {
			if strings.Contains(s.Name, name) {
				kept = append(kept, s)
			}
		}
		all = kept
	}
	if q.Get("sourceSandboxId") != "" {
		// No snapshot is made from a sandbox.
		all = nil
	}
	out := PaginatedSnapshots{Items: []Snapshot{}, Total: len(all), Page: page, TotalPages: (len(all) + limit - 1) / limit}
	if lo := (page - 1) * limit; lo < len(all) {
		out.Items = append(out.Items, all[lo:min(lo+limit, len(all))]...)
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// snapshotNotFound is Daytona's 404 of a snapshot lookup, which the SDK
// shows verbatim.
func snapshotNotFound(x string) error {
	return newProblem(http.StatusNotFound, "Snapshot with ID or name %s not found", x)
}

// lookupSnapshot resolves the {idOrName} path value: one of the daemon's
// snapshots (daemon is true), or one of the caller's templates.
func (h *sandboxAPI) lookupSnapshot(r *http.Request) (s Snapshot, t sandpit.Template, daemon bool, err error) {
	x := r.PathValue("idOrName")
	for _, s := range h.snapshots() {
		if s.ID == x || s.Name == x {
			return s, t, true, nil
		}
	}
	t, err = h.tpl.Template(r.Context(), x)
	if errors.Is(err, sandpit.ErrNotFound) || errors.Is(err, templates.ErrBuildsUnavailable) {
		return s, t, false, snapshotNotFound(x)
	}
	if err != nil {
		return s, t, false, err
	}
	return h.snapshotOf(r.Context(), t), t, false, nil
}

func (h *sandboxAPI) getSnapshot(w http.ResponseWriter, r *http.Request) {
	s, _, _, err := h.lookupSnapshot(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, s)
}

// activateSnapshot answers POST /snapshots/{id}/activate. Sandpit keeps a
// built image until its template is deleted, so a snapshot never goes
// inactive: activating one changes nothing.
func (h *sandboxAPI) activateSnapshot(w http.ResponseWriter, r *http.Request) {
	h.getSnapshot(w, r)
}

func (h *sandboxAPI) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	s, t, daemon, err := h.lookupSnapshot(r)
	if err == nil && daemon {
		err = badRequest("snapshot %s is one of the daemon's own (--template or --default-image) and cannot be deleted through the API", s.Name)
	}
	if err == nil {
		err = h.tpl.DeleteTemplate(r.Context(), t.ID)
		if errors.Is(err, sandpit.ErrBuildConflict) {
			err = newProblem(http.StatusConflict, "Snapshot %s is being built; delete it once its build has ended", s.Name)
		}
	}
	if err != nil {
		WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// maxSnapshotNameLen bounds a snapshot name, which becomes a template name.
const maxSnapshotNameLen = 63

func (h *sandboxAPI) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req CreateSnapshotRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	def, err := snapshotDefinition(req)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	for _, s := range h.snapshots() {
		if s.Name == req.Name {
			WriteError(w, r, newProblem(http.StatusConflict, "Snapshot with name %q already exists for this organization", req.Name))
			return
		}
	}
	ctx := r.Context()
	if err := h.checkContext(ctx, def.Files); err != nil {
		WriteError(w, r, err)
		return
	}
	// The name is the template: a retry of this request, or a rebuild of
	// the name, lands on the same one, and a build of a content already
	// built or being built is joined or replayed, never run twice.
	t, _, err := h.tpl.EnsureTemplate(ctx, templates.Spec{Name: req.Name, CPU: def.CPU, MemoryMB: def.MemoryMB})
	if errors.Is(err, sandpit.ErrNameConflict) {
		err = newProblem(http.StatusConflict, "Snapshot with name %q already exists for this organization", req.Name)
	}
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if _, err := h.startBuild(ctx, t, def); err != nil {
		if errors.Is(err, sandpit.ErrBuildConflict) {
			err = newProblem(http.StatusConflict, "Snapshot %s is being built from another definition; wait for that build to end", req.Name)
		}
		WriteError(w, r, err)
		return
	}
	if t, err = h.tpl.Template(ctx, t.ID); err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.snapshotOf(ctx, t))
}

// startBuild adds a build of def to the template and starts it. Two starts
// of one content at once (concurrent creates of one Image) join one build:
// the service reserves the run before either starts it.
func (h *sandboxAPI) startBuild(ctx context.Context, t sandpit.Template, def templates.BuildDefinition) (sandpit.TemplateBuild, error) {
	b, err := h.tpl.NewBuild(ctx, t.ID)
	if err != nil {
		return b, err
	}
	return h.tpl.StartBuild(ctx, b.ID, def)
}

// checkContext refuses a build whose context archives were not uploaded
// before a build row is made for it.
func (h *sandboxAPI) checkContext(ctx context.Context, files []templates.ContextFiles) error {
	for _, f := range files {
		if !h.tpl.HasFiles(ctx, f.Hash) {
			return badRequest("the build context %s was not uploaded (the SDK uploads it through GET /object-storage/push-access first)", f.Hash)
		}
	}
	return nil
}

// snapshotDefinition validates a POST /snapshots and turns it into a build.
func snapshotDefinition(req CreateSnapshotRequest) (templates.BuildDefinition, error) {
	var def templates.BuildDefinition
	switch {
	case req.Name == "":
		return def, badRequest("name is required")
	case len(req.Name) > maxSnapshotNameLen || templates.ValidName(req.Name) != nil:
		return def, badRequest("Invalid snapshot name format %q: Sandpit's snapshot names are 1-63 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", req.Name)
	case req.BuildInfo != nil && req.ImageName != "":
		return def, badRequest("give either imageName or buildInfo, not both")
	case req.BuildInfo == nil && req.ImageName == "":
		return def, badRequest("imageName or buildInfo is required")
	case req.GPU != nil && *req.GPU > 0, len(req.GPUType) > 0:
		return def, badRequest("GPUs are not supported")
	}
	src := snapshotSource{ImageName: req.ImageName, Entrypoint: req.Entrypoint, BuildInfo: req.BuildInfo}
	if req.BuildInfo != nil {
		def.Dockerfile = req.BuildInfo.DockerfileContent
		def.Files = contextFiles(req.BuildInfo.ContextHashes)
	} else {
		if strings.ContainsAny(req.ImageName, " \t\r\n") {
			return def, badRequest("invalid imageName %q", req.ImageName)
		}
		// Registering an existing image is a build of just its FROM line:
		// the image is taken from the engine (or pulled by it) and tagged
		// as the template's, through the same path as every build.
		def.Dockerfile = "FROM " + req.ImageName + "\n"
	}
	if req.CPU != nil {
		if *req.CPU < 0 {
			return def, badRequest("cpu must not be negative")
		}
		def.CPU = *req.CPU
	}
	if req.Memory != nil {
		if *req.Memory < 0 {
			return def, badRequest("memory must not be negative")
		}
		def.MemoryMB = int64(*req.Memory * 1024)
	}
	b, _ := json.Marshal(src)
	def.Source = string(b)
	return def, nil
}

// contextFiles places every uploaded context archive at the context's
// root: their entries carry the paths the Image's COPY lines name.
func contextFiles(hashes []string) []templates.ContextFiles {
	var out []templates.ContextFiles
	seen := map[string]bool{}
	for _, h := range hashes {
		if !seen[h] {
			seen[h] = true
			out = append(out, templates.ContextFiles{Hash: h})
		}
	}
	return out
}
