package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

// TemplateBackend is what the E2B Template API needs of the template
// aggregate every surface builds through; *templates.Service implements
// it. Without one (Config.Templates nil: the facade's unit-test fake) the
// template routes answer 501.
type TemplateBackend interface {
	EnsureTemplate(ctx context.Context, spec templates.Spec) (sandpit.Template, sandpit.AddOutcome, error)
	NewBuild(ctx context.Context, templateID string) (sandpit.TemplateBuild, error)
	HasFiles(ctx context.Context, hash string) bool
	PutTemplateFiles(ctx context.Context, hash string, r io.Reader, verify bool) error
	StartBuild(ctx context.Context, buildID string, def templates.BuildDefinition) (sandpit.TemplateBuild, error)
	Build(ctx context.Context, buildID string) (sandpit.TemplateBuild, error)
	BuildLog(ctx context.Context, buildID string, offset int) ([]templates.LogEntry, bool, error)
	Template(ctx context.Context, ref string) (sandpit.Template, error)
	Templates(ctx context.Context) ([]sandpit.Template, error)
	TemplateBuilds(ctx context.Context, templateID string) ([]sandpit.TemplateBuild, error)
	TemplateTags(ctx context.Context, templateID string) (map[string]string, error)
	TagBuild(ctx context.Context, buildID string, tags []string) error
	UntagTemplate(ctx context.Context, templateID string, tags []string) error
	DeleteTemplate(ctx context.Context, id string) error
	Snapshots(ctx context.Context, source, name string) ([]sandpit.Template, error)
}

var _ TemplateBackend = (*templates.Service)(nil)

// defaultTag is E2B's tag of a name given without one.
const defaultTag = "default"

// Upload URLs: the SDK PUTs the archive of a COPY step to the url the
// files check answered, without its API key, so the URL authorises itself:
// an HMAC of the owner, the template, the files hash and the expiry under a
// key of the daemon's.
const (
	paramUploadOwner   = "owner"
	paramUploadExpires = "expires"
	paramUploadSig     = "sig"
	// uploadURLLifetime bounds how long an upload URL works: long enough
	// for a large context over a slow link, short enough that a leaked URL
	// soon stops working.
	uploadURLLifetime = time.Hour
	// pendingLifetime bounds how long a requested build (POST
	// /v3/templates) waits for its steps before its entry is forgotten.
	pendingLifetime = time.Hour
)

// pendingBuild is a build requested through POST /v3/templates whose
// steps have not arrived yet: what the request said that the steps do not.
// It travels as the recorded answer of the request (JSON), so a retry of
// the request, the steps' arrival and a status poll find it from any
// process of the cluster, before and after a restart.
type pendingBuild struct {
	Key        string   `json:"key"` // the request's fingerprint, its idempotency key
	TemplateID string   `json:"template_id"`
	BuildID    string   `json:"build_id"`
	Tags       []string `json:"tags"`
	Names      []string `json:"names"`
	Alias      string   `json:"alias"`
	CPU        float64  `json:"cpu"`
	MemoryMB   int64    `json:"memory_mb"`
}

// Scopes of the template requests in the idempotency engine: a request by
// its fingerprint (a retry of it, or two identical Template.build calls at
// once, get one build), and what a requested build carries, by its id.
const (
	scopeTemplateRequest = "e2b:template-request"
	scopeTemplatePending = "e2b:template-pending"
)

// pending reads back what the request of buildID said, or nil when no
// request of the caller's recorded it (a build made otherwise, or one whose
// record expired after pendingLifetime).
func (h *Handler) pending(ctx context.Context, buildID string) *pendingBuild {
	resp, found, err := h.idem.Lookup(ctx, identity.OwnerScope(ctx, scopeTemplatePending), buildID)
	if err != nil || !found {
		return nil
	}
	var p pendingBuild
	if json.Unmarshal(resp.Body, &p) != nil || p.BuildID != buildID {
		return nil
	}
	return &p
}

// templateRoutes registers the Template API. A build runs the caller's
// commands on the engine, so requesting and starting one needs the execute
// action, as the native API's builds do.
func (h *Handler) templateRoutes() {
	route, keyed := h.routes.Handle, h.routes.HandleKeyed
	keyed("POST /v3/templates", sandpit.ActionExecute, api.Keying{Mode: api.Keyed}, h.requestBuild)
	route("GET /templates/{templateID}/files/{hash}", sandpit.ActionExecute, h.filesLink)
	// The upload is authorised by its URL's signature (see ServeHTTP),
	// which acts as the owner that asked for the link.
	route("PUT /templates/{templateID}/files/{hash}", sandpit.ActionExecute, h.uploadFiles)
	keyed("POST /v2/templates/{templateID}/builds/{buildID}", sandpit.ActionExecute, api.Keying{Mode: api.Keyed}, h.startBuild)
	route("GET /templates/{templateID}/builds/{buildID}/status", sandpit.ActionRead, h.buildStatus)
	// GET /templates/aliases/{alias} (Template.exists) and GET
	// /templates/{templateID}/tags overlap as mux patterns (a template
	// named "aliases"), so one route serves both.
	route("GET /templates/{templateID}/{sub}", sandpit.ActionRead, h.templateSub)
	route("GET /templates", sandpit.ActionRead, h.listTemplates)
	keyed("DELETE /templates/{templateID}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.deleteTemplate)
	route("POST /templates/tags", sandpit.ActionManage, h.assignTags)
	route("DELETE /templates/tags", sandpit.ActionManage, h.removeTags)
}

// templates returns the template backend, or answers 501 without one.
func (h *Handler) templates(w http.ResponseWriter) (TemplateBackend, bool) {
	if h.tpl == nil {
		writeError(w, http.StatusNotImplemented, "template builds are not available on this daemon")
		return nil, false
	}
	return h.tpl, true
}

// failTemplate renders a template error in E2B's shape. The build errors
// of the template core get the statuses E2B's API documents for them.
func failTemplate(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, sandpit.ErrBuildConflict):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, templates.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, err.Error())
	case errors.Is(err, templates.ErrBuildsUnavailable):
		writeError(w, http.StatusNotImplemented, err.Error())
	default:
		WriteError(w, nil, err)
	}
}

// RequestBuildBody is POST /v3/templates (TemplateBuildRequestV3).
type RequestBuildBody struct {
	Name     string   `json:"name"`
	Alias    string   `json:"alias"`
	Tags     []string `json:"tags"`
	CPUCount int      `json:"cpuCount"`
	MemoryMB int64    `json:"memoryMB"`
}

// RequestBuildResponse is TemplateRequestResponseV3.
type RequestBuildResponse struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Names      []string `json:"names"`
	Aliases    []string `json:"aliases"`
	Tags       []string `json:"tags"`
	Public     bool     `json:"public"`
}

// requestBuild serves POST /v3/templates: the caller's template of the
// name (made if missing) and a build waiting for its steps.
func (h *Handler) requestBuild(w http.ResponseWriter, r *http.Request) {
	tb, ok := h.templates(w)
	if !ok {
		return
	}
	var body RequestBuildBody
	raw, err := decodeRaw(r, &body)
	if err != nil {
		failTemplate(w, err)
		return
	}
	if body.Name == "" {
		body.Name = body.Alias
	}
	name, tag, tagged := strings.Cut(body.Name, ":")
	if name == "" || (tagged && tag == "") {
		writeError(w, http.StatusBadRequest, "a template name (name or name:tag) is required")
		return
	}
	if err := templates.ValidName(name); err != nil {
		failTemplate(w, err)
		return
	}
	if body.CPUCount < 0 || body.MemoryMB < 0 {
		writeError(w, http.StatusBadRequest, "cpuCount and memoryMB must not be negative")
		return
	}
	tags := []string{}
	if tagged {
		tags = append(tags, tag)
	}
	for _, t := range body.Tags {
		if t != "" && !contains(tags, t) {
			tags = append(tags, t)
		}
	}
	if len(tags) == 0 {
		tags = []string{defaultTag}
	}
	ctx := r.Context()
	sum := sha256.Sum256(raw)
	key := hex.EncodeToString(sum[:])
	// One request, one build: the fingerprint is the key of the request in
	// the idempotency engine (store-backed, cluster-wide), so a retry, an
	// identical request racing it, or one after a restart, gets the build
	// the first made, until that build starts.
	req := idempotency.Request{Scope: identity.OwnerScope(ctx, scopeTemplateRequest), Key: key,
		PendingTTL: h.cfg.PendingTTL, Wait: h.cfg.WaitBudget, ReplayTTL: pendingLifetime}
	resp, _, err := h.idem.Do(ctx, req, func(ctx context.Context, a *idempotency.Attempt) (idempotency.Response, error) {
		t, _, err := tb.EnsureTemplate(ctx, templates.Spec{Name: name, CPU: float64(body.CPUCount), MemoryMB: body.MemoryMB})
		if err != nil {
			return idempotency.Response{}, err
		}
		b, err := tb.NewBuild(ctx, t.ID)
		if err != nil {
			return idempotency.Response{}, err
		}
		p := pendingBuild{Key: key, TemplateID: t.ID, BuildID: b.ID, Tags: tags, Alias: name, CPU: float64(body.CPUCount), MemoryMB: body.MemoryMB}
		for _, tg := range tags {
			p.Names = append(p.Names, name+":"+tg)
		}
		rec, _ := json.Marshal(p)
		out := idempotency.Response{Status: http.StatusAccepted, Body: rec, TargetID: b.ID}
		// What the build carries is recorded under its id as well, for
		// its steps and its status, which name only the build.
		byBuild := idempotency.Request{Scope: identity.OwnerScope(ctx, scopeTemplatePending), Key: b.ID, PendingTTL: h.cfg.PendingTTL, ReplayTTL: pendingLifetime}
		if _, _, err := h.idem.Do(ctx, byBuild, func(context.Context, *idempotency.Attempt) (idempotency.Response, error) {
			return out, nil
		}); err != nil {
			return idempotency.Response{}, err
		}
		return out, nil
	})
	switch {
	case errors.Is(err, idempotency.ErrKeyInFlight):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "an identical template build request is still in progress; retry shortly")
		return
	case err != nil:
		failTemplate(w, err)
		return
	}
	var p pendingBuild
	if err := json.Unmarshal(resp.Body, &p); err != nil {
		failTemplate(w, fmt.Errorf("read the recorded template request: %w", err))
		return
	}
	api.WriteJSON(w, http.StatusAccepted, p.response())
}

func (p *pendingBuild) response() RequestBuildResponse {
	return RequestBuildResponse{TemplateID: p.TemplateID, BuildID: p.BuildID, Names: p.Names,
		Aliases: []string{p.Alias}, Tags: p.Tags, Public: false}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// decodeRaw decodes a JSON body leniently (the SDK sends keys this facade
// does not use) and returns its bytes.
func decodeRaw(r *http.Request, v any) ([]byte, error) {
	var raw json.RawMessage
	if err := api.DecodeJSON(r, &raw, false); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("%w: %v", api.ErrBadJSON, err)
	}
	return raw, nil
}

func principalOwner(ctx context.Context) string {
	if p, ok := sandpit.PrincipalFrom(ctx); ok && p.Owner != "" {
		return p.Owner
	}
	return sandpit.AdminOwner
}

// ownTemplate finds the caller's template named by the path's templateID
// (an id or a name).
func ownTemplate(tb TemplateBackend, r *http.Request) (sandpit.Template, error) {
	t, err := tb.Template(r.Context(), r.PathValue("templateID"))
	if errors.Is(err, sandpit.ErrNotFound) {
		return t, notFound("template " + r.PathValue("templateID") + " not found")
	}
	return t, err
}

func notFound(msg string) error {
	return api.Problem{Status: http.StatusNotFound, Message: msg}
}

// FilesLink is TemplateBuildFileUpload.
type FilesLink struct {
	Present bool              `json:"present"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// filesLink serves GET /templates/{templateID}/files/{hash}: whether the
// caller already uploaded the archive, and a URL to upload it to. The URL
// is always given, so the SDK's forceUpload uploads again.
func (h *Handler) filesLink(w http.ResponseWriter, r *http.Request) {
	tb, ok := h.templates(w)
	if !ok {
		return
	}
	t, err := ownTemplate(tb, r)
	if err != nil {
		failTemplate(w, err)
		return
	}
	hash := r.PathValue("hash")
	if !filesHashRE.MatchString(hash) {
		writeError(w, http.StatusBadRequest, "invalid files hash "+strconv.Quote(hash))
		return
	}
	owner := principalOwner(r.Context())
	exp := strconv.FormatInt(h.now().Add(uploadURLLifetime).Unix(), 10)
	q := url.Values{}
	q.Set(paramUploadOwner, owner)
	q.Set(paramUploadExpires, exp)
	q.Set(paramUploadSig, h.uploadSig(owner, t.ID, hash, exp))
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: r.Host, Path: Prefix + "/templates/" + t.ID + "/files/" + hash, RawQuery: q.Encode()}
	api.WriteJSON(w, http.StatusCreated, FilesLink{Present: tb.HasFiles(r.Context(), hash), URL: u.String(), Headers: map[string]string{}})
}

var filesHashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// uploadSig is the signature of an upload URL.
func (h *Handler) uploadSig(owner, templateID, hash, expires string) string {
	m := hmac.New(sha256.New, h.uploadKey)
	m.Write([]byte("e2b-template-files\x00" + owner + "\x00" + templateID + "\x00" + hash + "\x00" + expires))
	return hex.EncodeToString(m.Sum(nil))
}

// uploadKeyFrom derives the upload URLs' key from the daemon's secret, or
// makes a key of this process's own when there is none (URLs then stop
// working when the daemon restarts, and the SDK asks again on its retry).
func uploadKeyFrom(secret []byte) []byte {
	if len(secret) == 0 {
		k := make([]byte, 32)
		_, _ = rand.Read(k)
		return k
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("sandpit e2b template upload URLs"))
	return m.Sum(nil)
}

// signedUpload authorises a PUT of an upload URL by its signature: it
// returns r acting as the owner the URL was made for. rest is the path
// under Prefix.
func (h *Handler) signedUpload(r *http.Request, rest string) (*http.Request, error) {
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	if len(parts) != 4 || parts[0] != "templates" || parts[2] != "files" {
		return r, fmt.Errorf("%w: not an upload URL", sandpit.ErrUnauthorized)
	}
	q := r.URL.Query()
	owner, exp := q.Get(paramUploadOwner), q.Get(paramUploadExpires)
	want := h.uploadSig(owner, parts[1], parts[3], exp)
	if subtle.ConstantTimeCompare([]byte(want), []byte(q.Get(paramUploadSig))) != 1 {
		return r, api.Problem{Status: http.StatusForbidden, Message: "the upload URL's signature is not valid"}
	}
	if sec, err := strconv.ParseInt(exp, 10, 64); err != nil || h.now().After(time.Unix(sec, 0)) {
		return r, api.Problem{Status: http.StatusForbidden, Message: "the upload URL has expired; build again for a new one"}
	}
	p := sandpit.Principal{TokenName: "e2b upload URL", Owner: owner, Scopes: []string{sandpit.ScopeSandboxesWrite}}
	return r.WithContext(sandpit.WithPrincipal(r.Context(), p)), nil
}

// uploadFiles serves the PUT of an upload URL: the archive (tar or
// tar.gz) of one COPY step, stored under its files hash for the owner. The
// service bounds its size by the daemon's context limit. The hash is the
// SDK's digest of the files, not of the archive, so it is not verified.
func (h *Handler) uploadFiles(w http.ResponseWriter, r *http.Request) {
	tb, ok := h.templates(w)
	if !ok {
		return
	}
	hash := r.PathValue("hash")
	if !filesHashRE.MatchString(hash) {
		writeError(w, http.StatusBadRequest, "invalid files hash "+strconv.Quote(hash))
		return
	}
	if err := tb.PutTemplateFiles(r.Context(), hash, r.Body, false); err != nil {
		failTemplate(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// startBuild serves POST /v2/templates/{templateID}/builds/{buildID}: the
// steps, turned into a Dockerfile over the base they name, start the
// build. The answer is a 202 with no body, which the SDK takes only with
// an explicit Content-Length: 0.
func (h *Handler) startBuild(w http.ResponseWriter, r *http.Request) {
	tb, ok := h.templates(w)
	if !ok {
		return
	}
	var body BuildStartBody
	raw, err := decodeRaw(r, &body)
	if err != nil {
		failTemplate(w, err)
		return
	}
	ctx := r.Context()
	t, err := ownTemplate(tb, r)
	if err != nil {
		failTemplate(w, err)
		return
	}
	buildID := r.PathValue("buildID")
	b, err := tb.Build(ctx, buildID)
	if err == nil && b.TemplateID != t.ID {
		err = sandpit.ErrNotFound
	}
	if err != nil {
		if errors.Is(err, sandpit.ErrNotFound) {
			err = notFound("build " + buildID + " of template " + t.ID + " not found")
		}
		failTemplate(w, err)
		return
	}
	if len(body.FromImageRegistry) > 0 && string(body.FromImageRegistry) != "null" {
		writeError(w, http.StatusBadRequest, "registry credentials (fromImage with a username, fromAWSRegistry, fromGCPRegistry) are not supported by sandpit: the engine pulls images with its own credentials")
		return
	}
	base, baseTpl, err := h.baseImage(ctx, tb, body)
	if err != nil {
		failTemplate(w, err)
		return
	}
	conv, err := toDockerfile(body, base)
	if err != nil {
		failTemplate(w, err)
		return
	}
	def := templates.BuildDefinition{
		Dockerfile: conv.Dockerfile, Files: conv.Files, StartCmd: body.StartCmd, ReadyCmd: body.ReadyCmd,
		User: conv.User, Workdir: conv.Workdir, CPU: t.CPU, MemoryMB: t.MemoryMB, Tags: []string{defaultTag},
		NoCache: conv.NoCache, Source: string(raw),
	}
	if baseTpl != nil {
		// A template built from another keeps what it does not set.
		if def.User == "" {
			def.User = baseTpl.User
		}
		if def.Workdir == "" {
			def.Workdir = baseTpl.Workdir
		}
	}
	p := h.pending(ctx, b.ID)
	if p != nil {
		def.Tags, def.CPU, def.MemoryMB = p.Tags, p.CPU, p.MemoryMB
	}
	if _, err := tb.StartBuild(ctx, b.ID, def); err != nil {
		failTemplate(w, err)
		return
	}
	if p != nil {
		// A started build is no longer a request a retry may land on: the
		// next identical request is a new build (which joins or replays
		// this one by content).
		if err := h.idem.Forget(ctx, identity.OwnerScope(ctx, scopeTemplateRequest), p.Key); err != nil {
			h.log.Warn("forget a started template request", "build", b.ID, "err", err)
		}
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusAccepted)
}

// baseImage resolves what a build starts from: fromTemplate's template of
// the caller (its image, at a tag if one is named), the daemon's base image
// for E2B's, or fromImage as it is.
func (h *Handler) baseImage(ctx context.Context, tb TemplateBackend, body BuildStartBody) (string, *sandpit.Template, error) {
	if body.FromTemplate != "" {
		t, image, err := templateImage(ctx, tb, body.FromTemplate)
		if p := (api.Problem{}); errors.As(err, &p) && p.Status == http.StatusNotFound {
			// E2B's own names (fromTemplate('base'), and the templates
			// the daemon registers with --template) are not the caller's
			// templates, but a build may start from them as on E2B.
			name, _, _ := strings.Cut(body.FromTemplate, ":")
			if image, rerr := h.registeredImage(name); rerr == nil {
				return image, nil, nil
			}
		}
		if err != nil {
			return "", nil, err
		}
		return image, &t, nil
	}
	img := body.FromImage
	if img == "" || img == defaultBaseImage || strings.HasPrefix(img, defaultBaseImage+":") {
		base, err := h.registeredImage("base")
		return base, nil, err
	}
	if _, err := h.be.ResolveImage(img, ""); err != nil {
		return "", nil, err
	}
	return img, nil, nil
}

// registeredImage is the image of a template the daemon registers (its
// --template names); "base" is the daemon's base image, or its default
// image when no base is registered.
func (h *Handler) registeredImage(name string) (string, error) {
	img, err := h.be.ResolveImage("", name)
	if err != nil && name == "base" {
		img, err = h.be.ResolveImage("", "")
	}
	return img, err
}

// templateImage is the image of the caller's template ref ("name",
// "name:tag" or an id).
func templateImage(ctx context.Context, tb TemplateBackend, ref string) (sandpit.Template, string, error) {
	t, err := tb.Template(ctx, ref)
	if errors.Is(err, sandpit.ErrNotFound) {
		return t, "", notFound("template " + ref + " not found")
	}
	if err != nil {
		return t, "", err
	}
	_, tag, tagged := strings.Cut(ref, ":")
	image := t.Image
	if tagged && tag != "" {
		tags, err := tb.TemplateTags(ctx, t.ID)
		if err != nil {
			return t, "", err
		}
		image = ""
		if id, ok := tags[tag]; ok {
			b, err := tb.Build(ctx, id)
			if err != nil {
				return t, "", err
			}
			image = b.Image
		} else if tag == defaultTag {
			image = t.Image
		}
	}
	if image == "" {
		return t, "", fmt.Errorf("%w: template %q has no ready build", sandpit.ErrInvalid, ref)
	}
	return t, image, nil
}

// BuildLogEntryBody is BuildLogEntry.
type BuildLogEntryBody struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

// BuildReason is BuildStatusReason.
type BuildReason struct {
	Message string `json:"message"`
	Step    string `json:"step,omitempty"`
}

// BuildStatus is TemplateBuildInfo.
type BuildStatus struct {
	TemplateID string              `json:"templateID"`
	BuildID    string              `json:"buildID"`
	Status     string              `json:"status"`
	LogEntries []BuildLogEntryBody `json:"logEntries"`
	Logs       []string            `json:"logs"`
	Reason     *BuildReason        `json:"reason,omitempty"`
}

// buildStatus serves GET .../builds/{buildID}/status?logsOffset=N: the
// build's state and its log from entry N on. Once the offset reaches the
// end the list is empty, which is how the SDK knows it has every line.
func (h *Handler) buildStatus(w http.ResponseWriter, r *http.Request) {
	tb, ok := h.templates(w)
	if !ok {
		return
	}
	ctx := r.Context()
	t, err := ownTemplate(tb, r)
	if err != nil {
		failTemplate(w, err)
		return
	}
	b, err := tb.Build(ctx, r.PathValue("buildID"))
	if err == nil && b.TemplateID != t.ID {
		err = sandpit.ErrNotFound
	}
	if err != nil {
		if errors.Is(err, sandpit.ErrNotFound) {
			err = notFound("build " + r.PathValue("buildID") + " of template " + t.ID + " not found")
		}
		failTemplate(w, err)
		return
	}
	offset := 0
	if v := r.URL.Query().Get("logsOffset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			writeError(w, http.StatusBadRequest, "logsOffset must be a non-negative integer")
			return
		}
	}
	// The whole log is read so each entry can be given the step it
	// belongs to (the engine names steps only where they start).
	lines, _, err := tb.BuildLog(ctx, b.ID, 0)
	if err != nil {
		failTemplate(w, err)
		return
	}
	var labels []string
	var src BuildStartBody
	if json.Unmarshal([]byte(b.Definition), &src) == nil && src.Steps != nil {
		if conv, err := toDockerfile(src, "base"); err == nil {
			labels = conv.Steps
		}
	}
	out := BuildStatus{TemplateID: t.ID, BuildID: b.ID, Status: string(b.State), LogEntries: []BuildLogEntryBody{}, Logs: []string{}}
	step := ""
	texts := make([]string, 0, len(lines))
	for i, e := range lines {
		texts = append(texts, e.Message)
		if m := stepRE.FindStringSubmatch(e.Message); m != nil {
			if k, err := strconv.Atoi(m[1]); err == nil && k >= 1 && k <= len(labels) {
				step = labels[k-1]
			}
		}
		if i < offset {
			continue
		}
		level := e.Level
		switch level {
		case "debug", "info", "warn", "error":
		default:
			level = "info"
		}
		out.LogEntries = append(out.LogEntries, BuildLogEntryBody{Timestamp: e.Time, Level: level, Message: e.Message, Step: step})
	}
	switch b.State {
	case sandpit.BuildError:
		msg, st := buildReason(b.Error, texts, labels)
		out.Reason = &BuildReason{Message: msg, Step: st}
	case sandpit.BuildReady:
		// The tags are set just after the build is recorded ready; until
		// then a create of name:tag would not find it, so it is not ready
		// yet for the caller.
		if tags, err := tb.TemplateTags(ctx, t.ID); err == nil && !tagged(ctx, tb, tags, b, h.buildTags(ctx, b.ID)) {
			out.Status = string(sandpit.BuildBuilding)
		}
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// buildTags are the tags the build was requested with, while its request's
// record lasts.
func (h *Handler) buildTags(ctx context.Context, buildID string) []string {
	if p := h.pending(ctx, buildID); p != nil {
		return p.Tags
	}
	return nil
}

// tagged reports whether every tag in want is at the build's image: at
// the build itself, or at another build of the same content (builds that
// joined one engine build are tagged one after the other, and the tag
// ends at the last of them).
func tagged(ctx context.Context, tb TemplateBackend, tags map[string]string, b sandpit.TemplateBuild, want []string) bool {
	for _, t := range want {
		id, ok := tags[t]
		if !ok {
			return false
		}
		if id == b.ID {
			continue
		}
		if o, err := tb.Build(ctx, id); err != nil || o.Image != b.Image {
			return false
		}
	}
	return true
}

// templateSub dispatches GET /templates/aliases/{alias} and GET
// /templates/{templateID}/tags. A template id never is "aliases" (ids start
// with "tpl"), and the E2B name "aliases" is reached by its id.
func (h *Handler) templateSub(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.PathValue("templateID") == "aliases":
		h.aliasExists(w, r, r.PathValue("sub"))
	case r.PathValue("sub") == "tags":
		h.listTags(w, r)
	default:
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+Prefix+r.URL.Path)
	}
}

// AliasBody is TemplateAliasResponse.
type AliasBody struct {
	TemplateID string `json:"templateID"`
	Public     bool   `json:"public"`
}

// aliasExists serves GET /templates/aliases/{alias} (Template.exists): the
// caller's template of that name, or one of the daemon's own templates,
// which every caller can create from.
func (h *Handler) aliasExists(w http.ResponseWriter, r *http.Request, alias string) {
	name, _, _ := strings.Cut(alias, ":")
	// A template whose image is being built exists: a create of it waits
	// for the build.
	if _, err := h.be.ResolveImage("", name); err == nil || errors.Is(err, sandpit.ErrImageBuilding) {
		api.WriteJSON(w, http.StatusOK, AliasBody{TemplateID: name, Public: true})
		return
	}
	tb, ok := h.templates(w)
	if !ok {
		return
	}
	t, err := tb.Template(r.Context(), alias)
	if errors.Is(err, sandpit.ErrNotFound) {
		writeError(w, http.StatusNotFound, "template "+alias+" not found")
		return
	}
	if err != nil {
		failTemplate(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, AliasBody{TemplateID: t.ID, Public: false})
}

// TemplateListItem is one template of GET /templates.
type TemplateListItem struct {
	TemplateID    string    `json:"templateID"`
	BuildID       string    `json:"buildID"`
	CPUCount      float64   `json:"cpuCount"`
	MemoryMB      int64     `json:"memoryMB"`
	Public        bool      `json:"public"`
	Aliases       []string  `json:"aliases"`
	Names         []string  `json:"names"`
	CreatedAt     time.Time `json:"createdAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
	BuildStatus   string    `json:"buildStatus"`
	SpawnCount    int       `json:"spawnCount"`
	BuildCount    int       `json:"buildCount"`
	EnvdVersion   string    `json:"envdVersion"`
	DiskSizeMB    int64     `json:"diskSizeMB"`
	LastSpawnedAt *string   `json:"lastSpawnedAt"`
}

func (h *Handler) listTemplates(w http.ResponseWriter, r *http.Request) {
	tb, ok := h.templates(w)
	if !ok {
		return
	}
	ts, err := tb.Templates(r.Context())
	if err != nil {
		failTemplate(w, err)
		return
	}
	out := make([]TemplateListItem, 0, len(ts))
	for _, t := range ts {
		it := TemplateListItem{TemplateID: t.ID, BuildID: t.BuildID, CPUCount: t.CPU, MemoryMB: t.MemoryMB,
			Aliases: []string{}, Names: []string{}, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, BuildStatus: string(sandpit.BuildWaiting),
			EnvdVersion: EnvdVersion, DiskSizeMB: h.cfg.DiskSizeMB}
		if t.Name != "" {
			it.Aliases = append(it.Aliases, t.Name)
			it.Names = append(it.Names, t.Name)
		}
		if bs, err := tb.TemplateBuilds(r.Context(), t.ID); err == nil {
			it.BuildCount = len(bs)
			if len(bs) > 0 {
				it.BuildStatus = string(bs[len(bs)-1].State)
			}
		}
		out = append(out, it)
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	tb, ok := h.templates(w)
	if !ok {
		return
	}
	t, err := ownTemplate(tb, r)
	if err == nil {
		err = tb.DeleteTemplate(r.Context(), t.ID)
	}
	if err != nil {
		failTemplate(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// TagBody is one entry of GET /templates/{templateID}/tags.
type TagBody struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"buildID"`
	CreatedAt time.Time `json:"createdAt"`
}

func (h *Handler) listTags(w http.ResponseWriter, r *http.Request) {
	tb, ok := h.templates(w)
	if !ok {
		return
	}
	t, err := ownTemplate(tb, r)
	if err != nil {
		failTemplate(w, err)
		return
	}
	tags, err := tb.TemplateTags(r.Context(), t.ID)
	if err != nil {
		failTemplate(w, err)
		return
	}
	out := make([]TagBody, 0, len(tags))
	for tag, id := range tags {
		e := TagBody{Tag: tag, BuildID: id}
		if b, err := tb.Build(r.Context(), id); err == nil {
			e.CreatedAt = b.CreatedAt
			if !b.EndedAt.IsZero() {
				e.CreatedAt = b.EndedAt
			}
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	api.WriteJSON(w, http.StatusOK, out)
}

// AssignTagsBody is POST /templates/tags.
type AssignTagsBody struct {
	Target string   `json:"target"`
	Tags   []string `json:"tags"`
}

// AssignTagsResponse answers it.
type AssignTagsResponse struct {
	BuildID string   `json:"buildID"`
	Tags    []string `json:"tags"`
}

// assignTags points tags at the build the target ("name:tag", or a name
// for its default tag) is at.
func (h *Handler) assignTags(w http.ResponseWriter, r *http.Request) {
	tb, ok := h.templates(w)
	if !ok {
		return
	}
	var body AssignTagsBody
	if _, err := decodeRaw(r, &body); err != nil {
		failTemplate(w, err)
		return
	}
	if body.Target == "" || len(body.Tags) == 0 {
		writeError(w, http.StatusBadRequest, "target and tags are required")
		return
	}
	ctx := r.Context()
	t, err := findTemplate(ctx, tb, body.Target)
	if err != nil {
		failTemplate(w, err)
		return
	}
	_, tag, _ := strings.Cut(body.Target, ":")
	if tag == "" {
		tag = defaultTag
	}
	tags, err := tb.TemplateTags(ctx, t.ID)
	if err != nil {
		failTemplate(w, err)
		return
	}
	buildID, ok := tags[tag]
	if !ok && tag == defaultTag {
		buildID, ok = newestReady(ctx, tb, t.ID)
	}
	if !ok {
		writeError(w, http.StatusNotFound, "template "+t.Name+" has no tag "+tag)
		return
	}
	if err := tb.TagBuild(ctx, buildID, body.Tags); err != nil {
		failTemplate(w, err)
		return
	}
	api.WriteJSON(w, http.StatusCreated, AssignTagsResponse{BuildID: buildID, Tags: body.Tags})
}

// findTemplate finds the caller's template ref, answering a missing one in
// E2B's not-found wording.
func findTemplate(ctx context.Context, tb TemplateBackend, ref string) (sandpit.Template, error) {
	t, err := tb.Template(ctx, ref)
	if errors.Is(err, sandpit.ErrNotFound) {
		err = notFound("template " + ref + " not found")
	}
	return t, err
}

func newestReady(ctx context.Context, tb TemplateBackend, templateID string) (string, bool) {
	bs, err := tb.TemplateBuilds(ctx, templateID)
	if err != nil {
		return "", false
	}
	for i := len(bs) - 1; i >= 0; i-- {
		if bs[i].State == sandpit.BuildReady {
			return bs[i].ID, true
		}
	}
	return "", false
}

// RemoveTagsBody is DELETE /templates/tags.
type RemoveTagsBody struct {
	Name string   `json:"name"`
	Tags []string `json:"tags"`
}

func (h *Handler) removeTags(w http.ResponseWriter, r *http.Request) {
	tb, ok := h.templates(w)
	if !ok {
		return
	}
	var body RemoveTagsBody
	if _, err := decodeRaw(r, &body); err != nil {
		failTemplate(w, err)
		return
	}
	t, err := findTemplate(r.Context(), tb, body.Name)
	if err == nil {
		err = tb.UntagTemplate(r.Context(), t.ID, body.Tags)
	}
	if err != nil {
		failTemplate(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
