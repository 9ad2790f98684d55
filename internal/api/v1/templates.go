package v1

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

// templateRoutes are the native template API. A build runs the caller's
// commands on the engine, so it needs the execute action, as exec does.
func (h *Handler) templateRoutes() {
	route, keyed := h.routes.Handle, h.routes.HandleKeyed
	route("PUT /v1/templates/files/{hash}", sandpit.ActionExecute, h.putTemplateFiles)
	route("GET /v1/templates/files/{hash}", sandpit.ActionRead, h.hasTemplateFiles)
	keyed("POST /v1/templates", sandpit.ActionExecute, api.Keying{Mode: api.KeyedCreate, Prefix: templates.IDPrefix}, h.buildTemplate)
	route("GET /v1/templates", sandpit.ActionRead, h.listTemplates)
	route("GET /v1/templates/{name}", sandpit.ActionRead, h.getTemplate)
	keyed("DELETE /v1/templates/{name}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.deleteTemplate)
	route("GET /v1/templates/{name}/builds/{build}", sandpit.ActionRead, h.getBuild)
	route("GET /v1/templates/{name}/builds/{build}/logs", sandpit.ActionRead, h.buildLogs)
	// In a cluster the templates are found from any node (the replicated
	// index has every named one), a build runs on the node its request
	// reached, and a build's status and log are served by the node that
	// runs it, which holds them.
	buildNode := func(r *http.Request) string { return h.tpl.BuildNode(r.Context(), r.PathValue("build")) }
	h.routes.Forward("GET /v1/templates/{name}/builds/{build}", api.Forwarding{Locate: api.LocateNode, Node: buildNode})
	h.routes.Forward("GET /v1/templates/{name}/builds/{build}/logs", api.Forwarding{Locate: api.LocateNode, Node: buildNode})
}

// putTemplateFiles stores a context archive under its SHA-256, which the
// daemon checks. Uploads are idempotent by content: the same bytes again
// change nothing.
func (h *Handler) putTemplateFiles(w http.ResponseWriter, r *http.Request) {
	if err := h.tpl.PutTemplateFiles(r.Context(), r.PathValue("hash"), r.Body, true); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) hasTemplateFiles(w http.ResponseWriter, r *http.Request) {
	if !h.tpl.HasFiles(r.Context(), r.PathValue("hash")) {
		fail(w, api.Problem{Status: http.StatusNotFound, Code: apitypes.CodeNotFound, Message: "no uploaded files " + r.PathValue("hash")})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) buildTemplate(w http.ResponseWriter, r *http.Request) {
	var req apitypes.BuildTemplateRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	ctx := r.Context()
	def := templates.BuildDefinition{
		Dockerfile: req.Dockerfile, StartCmd: req.StartCmd, ReadyCmd: req.ReadyCmd, User: req.User, Workdir: req.Workdir,
		CPU: req.CPU, MemoryMB: req.MemoryMB, Tags: req.Tags, NoCache: req.NoCache,
	}
	if req.Context != "" {
		def.Files = append(def.Files, templates.ContextFiles{Hash: req.Context})
	}
	for _, f := range req.Files {
		def.Files = append(def.Files, templates.ContextFiles{Prefix: f.Prefix, Hash: f.Hash})
	}
	src, _ := json.Marshal(req)
	def.Source = string(src)
	// A definition that cannot build is refused before anything is made.
	if err := h.tpl.CheckBuildDefinition(ctx, def); err != nil {
		fail(w, err)
		return
	}
	t, _, err := h.tpl.EnsureTemplate(ctx, templates.Spec{ID: IDFromContext(ctx), Name: req.Name, CPU: req.CPU, MemoryMB: req.MemoryMB})
	if err != nil {
		fail(w, err)
		return
	}
	b, err := h.tpl.NewBuild(ctx, t.ID)
	if err != nil {
		fail(w, err)
		return
	}
	b, err = h.tpl.StartBuild(ctx, b.ID, def)
	if err != nil {
		fail(w, err)
		return
	}
	t, err = h.tpl.Template(ctx, t.ID)
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusAccepted, apitypes.BuildTemplateResponse{Template: h.toTemplate(r, t), Build: toBuild(b)})
}

func (h *Handler) listTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := h.tpl.Templates(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.ListTemplatesResponse{Templates: make([]apitypes.Template, 0, len(ts))}
	for _, t := range ts {
		out.Templates = append(out.Templates, h.toTemplate(r, t))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) getTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := h.tpl.Template(r.Context(), r.PathValue("name"))
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toTemplate(r, t))
}

func (h *Handler) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := h.tpl.Template(r.Context(), r.PathValue("name"))
	if err == nil {
		err = h.tpl.DeleteTemplate(r.Context(), t.ID)
	}
	if err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// build finds the path's build, which must be of the path's template.
func (h *Handler) build(r *http.Request) (sandpit.TemplateBuild, error) {
	t, err := h.tpl.Template(r.Context(), r.PathValue("name"))
	if err != nil {
		return sandpit.TemplateBuild{}, err
	}
	b, err := h.tpl.Build(r.Context(), r.PathValue("build"))
	if err != nil {
		return b, err
	}
	if b.TemplateID != t.ID {
		return sandpit.TemplateBuild{}, errors.Join(sandpit.ErrNotFound, errors.New("template "+t.ID+" has no build "+b.ID))
	}
	return b, nil
}

func (h *Handler) getBuild(w http.ResponseWriter, r *http.Request) {
	b, err := h.build(r)
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, toBuild(b))
}

// buildLogs streams a build's log as newline-delimited JSON from ?offset=
// (default 0): with ?follow=true until the build ends, otherwise what there
// is now.
func (h *Handler) buildLogs(w http.ResponseWriter, r *http.Request) {
	b, err := h.build(r)
	if err != nil {
		fail(w, err)
		return
	}
	offset := 0
	if v := r.URL.Query().Get("offset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			fail(w, errors.Join(sandpit.ErrInvalid, errors.New("offset must be a non-negative integer")))
			return
		}
	}
	follow, _ := strconv.ParseBool(r.URL.Query().Get("follow"))
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	write := func(e templates.LogEntry) error {
		if err := enc.Encode(apitypes.BuildLogEntry{Time: e.Time, Level: e.Level, Message: e.Message}); err != nil {
			return err
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		return nil
	}
	if follow {
		_ = h.tpl.FollowBuildLog(r.Context(), b.ID, offset, write)
		return
	}
	lines, _, err := h.tpl.BuildLog(r.Context(), b.ID, offset)
	if err != nil {
		return
	}
	for _, e := range lines {
		if write(e) != nil {
			return
		}
	}
}

func (h *Handler) toTemplate(r *http.Request, t sandpit.Template) apitypes.Template {
	out := apitypes.Template{ID: t.ID, Name: t.Name, Owner: t.Owner, Image: t.Image, CPU: t.CPU, MemoryMB: t.MemoryMB,
		StartCmd: t.StartCmd, ReadyCmd: t.ReadyCmd, User: t.User, Workdir: t.Workdir, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
		Kind: string(t.Kind.Or()), SourceSandbox: t.SourceSandbox}
	if tags, err := h.tpl.TemplateTags(r.Context(), t.ID); err == nil && len(tags) > 0 {
		out.Tags = tags
	}
	if t.BuildID != "" {
		if b, err := h.tpl.Build(r.Context(), t.BuildID); err == nil {
			ab := toBuild(b)
			out.Build = &ab
		}
	}
	return out
}

func toBuild(b sandpit.TemplateBuild) apitypes.TemplateBuild {
	out := apitypes.TemplateBuild{ID: b.ID, TemplateID: b.TemplateID, State: string(b.State), Image: b.Image, Error: b.Error,
		Dockerfile: b.Dockerfile, CreatedAt: b.CreatedAt, QueuePosition: b.QueuePosition}
	out.StartedAt, out.EndedAt = timePtr(b.StartedAt), timePtr(b.EndedAt)
	return out
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
