package daytona

import (
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// Snapshots: Daytona's snapshots are the images sandboxes start from. The
// daemon's are its templates (name -> image) and its default image; they are
// presented read-only, always active, since Sandpit builds none.

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
	all := h.snapshots()
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

func (h *sandboxAPI) getSnapshot(w http.ResponseWriter, r *http.Request) {
	x := r.PathValue("idOrName")
	for _, s := range h.snapshots() {
		if s.ID == x || s.Name == x {
			api.WriteJSON(w, http.StatusOK, s)
			return
		}
	}
	WriteError(w, r, newProblem(http.StatusNotFound, "Snapshot with ID or name %s not found", x))
}
