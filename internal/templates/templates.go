package templates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/identity"
)

// Errors of template builds.
var (
	// ErrBuildsUnavailable: the daemon was started without an image
	// builder (unit tests) or without a directory for build files.
	ErrBuildsUnavailable = errors.New("template builds are not available on this daemon")
	// ErrTooLarge: an uploaded build context is over the daemon's limit.
	ErrTooLarge = errors.New("build context too large")
)

// Defaults of the build limits (see Config).
const (
	DefaultBuildTimeout      = 30 * time.Minute
	DefaultMaxContextBytes   = 512 << 20
	DefaultMaxBuilds         = 2
	DefaultMaxBuildsPerOwner = 2
	DefaultBuildLogMax       = 8 << 20
	DefaultContextQuota      = 2 << 30
	// templateRepo is the repository templates' images are tagged in, under
	// the registry when the daemon has one.
	templateRepo = "sandpit-template"
)

// IDPrefix starts every template id, so ids and names of templates
// are told apart and a template id never looks like a sandbox's.
const IDPrefix = "tpl"

// Spec names a template to build into.
type Spec struct {
	// ID, when set, is the id to make the template under (a keyed /v1
	// request records it before anything is made); "" picks one.
	ID string
	// Name is unique per owner; "" makes an anonymous template.
	Name     string
	CPU      float64
	MemoryMB int64
	// Kind and SourceSandbox are a snapshot's (see CreateSnapshot); a
	// zero Kind is a built template.
	Kind          sandpit.TemplateKind
	SourceSandbox string
}

// ContextFiles places one uploaded archive (see PutTemplateFiles) in a
// build context under Prefix ("" = the context's root).
//
// With Select, only the archive's entry Select ("." for all of it) and what
// lies under it are placed, renamed As: the entry itself becomes As and
// what lies under it As/.... With Select and no As, what lies under a
// directory Select is placed at Prefix itself, and a file or symlink Select
// as its own base name there. A Dockerfile that copies Prefix as a
// directory then copies symlinks as symlinks, which the engine does for a
// directory's contents only (a source that names a symlink, or a wildcard,
// is followed).
type ContextFiles struct {
	Prefix string
	Hash   string
	Select string `json:",omitempty"`
	As     string `json:",omitempty"`
}

// place is where the archive entry name (cleaned, relative) lands under
// Prefix, or false when f does not select it ("" is Prefix itself).
func (f ContextFiles) place(name string, dir bool) (string, bool) {
	if f.Select == "" {
		return name, true
	}
	sel := path.Clean(f.Select)
	var rest string
	switch {
	case sel == ".":
		rest = name
	case name == sel:
		if f.As != "" {
			return f.As, true
		}
		if dir {
			return "", true
		}
		return path.Base(sel), true
	case strings.HasPrefix(name, sel+"/"):
		rest = strings.TrimPrefix(name, sel+"/")
	default:
		return "", false
	}
	return path.Join(f.As, rest), true
}

// BuildDefinition is what a build builds: a Dockerfile and the archives its
// context is made of, with what its template's sandboxes start with. Every
// surface turns its own builder (E2B's steps, Daytona's Image, a Dockerfile
// sent to /v1) into one.
type BuildDefinition struct {
	Dockerfile string
	Files      []ContextFiles
	StartCmd   string
	ReadyCmd   string
	User       string
	Workdir    string
	CPU        float64
	MemoryMB   int64
	// Tags are set on the build once it is ready.
	Tags []string
	// NoCache forces a build of its own (E2B's skipCache/force): it neither
	// joins nor replays another build, and the engine's layer cache is
	// not used.
	NoCache bool
	// Source is the definition as the surface received it, kept for the
	// user to see what a template was built from.
	Source string
}

// contentHash identifies what a definition builds, so two builds of one
// owner with one content make one image. Tags and the source text are not
// part of it: they do not change the image.
func (d BuildDefinition) contentHash() string {
	files := append([]ContextFiles(nil), d.Files...)
	sort.Slice(files, func(i, j int) bool {
		if files[i].Prefix != files[j].Prefix {
			return files[i].Prefix < files[j].Prefix
		}
		return files[i].Hash < files[j].Hash
	})
	b, _ := json.Marshal(struct {
		Dockerfile, StartCmd, ReadyCmd, User, Workdir string
		Files                                         []ContextFiles
		CPU                                           float64
		MemoryMB                                      int64
	}{d.Dockerfile, d.StartCmd, d.ReadyCmd, d.User, d.Workdir, files, d.CPU, d.MemoryMB})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// LogEntry is one line of a build's log.
type LogEntry struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
}

var tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

var templateNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidName reports why a template name is refused, or nil. Names
// appear in image references and URLs, so they take the engine's repository
// grammar: lower case, digits, '.', '_' and '-'.
func ValidName(name string) error {
	if !templateNameRE.MatchString(name) {
		return invalidf("invalid template name %q: use 1-63 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

func (s *Service) buildsReady() error {
	if s.cfg.Images == nil || s.cfg.TemplateDir == "" {
		return ErrBuildsUnavailable
	}
	return nil
}

// EnsureTemplate returns the caller's template of spec.Name, making it when
// there is none; a retry or a rebuild of a name lands on the same template.
func (s *Service) EnsureTemplate(ctx context.Context, spec Spec) (sandpit.Template, sandpit.AddOutcome, error) {
	if err := s.buildsReady(); err != nil {
		return sandpit.Template{}, 0, err
	}
	if spec.Name != "" {
		if err := ValidName(spec.Name); err != nil {
			return sandpit.Template{}, 0, err
		}
		if _, ok := s.cfg.DaemonTemplates[spec.Name]; ok {
			return sandpit.Template{}, 0, fmt.Errorf("template %q is one of the daemon's own: %w", spec.Name, sandpit.ErrNameConflict)
		}
	}
	if spec.CPU < 0 || spec.MemoryMB < 0 {
		return sandpit.Template{}, 0, invalidf("cpu and memory must not be negative")
	}
	id := spec.ID
	if id == "" {
		id = IDPrefix + newID()
	}
	claimed := id
	if spec.Name != "" {
		// In a cluster the name is decided by the replicated index first:
		// a template of this name made on another node gives its id here.
		var err error
		if claimed, err = s.cluster.claimTemplate(ctx, sandpit.Template{ID: id, Owner: identity.OwnerOf(ctx), Name: spec.Name, CPU: spec.CPU, MemoryMB: spec.MemoryMB}); err != nil {
			return sandpit.Template{}, 0, err
		}
	}
	t, outcome, err := s.store.EnsureTemplate(ctx, sandpit.Template{
		ID: claimed, Owner: identity.OwnerOf(ctx), Name: spec.Name, CPU: spec.CPU, MemoryMB: spec.MemoryMB,
		Kind: spec.Kind.Or(), SourceSandbox: spec.SourceSandbox,
	}, s.now())
	if err == nil && claimed != id {
		// Another node's claim made this template: this request made none.
		outcome = sandpit.AlreadyBound
	}
	if errors.Is(err, sandpit.ErrSandboxExists) {
		// The retry of a keyed request that made this template already.
		t, err = s.template(ctx, claimed)
		if err == nil && t.Name != spec.Name {
			return sandpit.Template{}, 0, fmt.Errorf("template %s exists under another name: %w", id, sandpit.ErrNameConflict)
		}
		return t, sandpit.AlreadyBound, err
	}
	if err == nil && outcome == sandpit.Added {
		s.audit(ctx, "template.create", t.ID, nil)
	}
	return t, outcome, err
}

// NewBuild adds a waiting build to the caller's template: the id a surface
// hands out before it has the definition (E2B uploads files in between).
func (s *Service) NewBuild(ctx context.Context, templateID string) (sandpit.TemplateBuild, error) {
	t, err := s.template(ctx, templateID)
	if err != nil {
		return sandpit.TemplateBuild{}, err
	}
	b := sandpit.TemplateBuild{ID: "bld" + newID(), TemplateID: t.ID}
	if err := s.store.CreateBuild(ctx, b, s.now()); err != nil {
		return sandpit.TemplateBuild{}, err
	}
	// In a cluster the build's status and log are served by this node,
	// whichever node is asked.
	if err := s.cluster.recordBuild(ctx, b.ID, t.ID); err != nil {
		return sandpit.TemplateBuild{}, err
	}
	return s.store.GetBuild(ctx, b.ID)
}

// template returns the template with the id if the caller may see it.
func (s *Service) template(ctx context.Context, id string) (sandpit.Template, error) {
	t, err := s.store.GetTemplate(ctx, id)
	if err != nil {
		return t, err
	}
	if p := identity.Of(ctx); !p.Admin && p.Owner != t.Owner {
		return sandpit.Template{}, fmt.Errorf("get template %s: %w", id, sandpit.ErrNotFound)
	}
	if !s.inCluster(ctx, t) {
		return sandpit.Template{}, fmt.Errorf("get template %s: deleted through another node: %w", id, sandpit.ErrNotFound)
	}
	return t, nil
}

// Template finds one of the caller's templates by id or name (a "name:tag"
// finds the template; see ResolveTemplate for the image of a tag).
func (s *Service) Template(ctx context.Context, ref string) (sandpit.Template, error) {
	name, _, _ := strings.Cut(ref, ":")
	if t, err := s.store.GetTemplateByName(ctx, identity.OwnerOf(ctx), name); err == nil && s.inCluster(ctx, t) {
		return t, nil
	} else if err == nil {
		return sandpit.Template{}, fmt.Errorf("get template %q: deleted through another node: %w", name, sandpit.ErrNotFound)
	} else if !errors.Is(err, sandpit.ErrNotFound) {
		return sandpit.Template{}, err
	}
	t, err := s.template(ctx, name)
	if errors.Is(err, sandpit.ErrNotFound) {
		// Made on another node of the cluster.
		if rec, ok := s.freshSharedTemplate(ctx, name); ok {
			return recordTemplate(rec), nil
		}
	}
	return t, err
}

// Templates lists the caller's templates (an admin's: everyone's).
func (s *Service) Templates(ctx context.Context) ([]sandpit.Template, error) {
	owner := ""
	if p := identity.Of(ctx); !p.Admin {
		owner = p.Owner
	}
	ts, err := s.store.ListTemplates(ctx, owner)
	if err != nil {
		return nil, err
	}
	// In a cluster, the named templates built on other nodes too, and
	// not those deleted through another node.
	have := map[string]bool{}
	kept := ts[:0]
	for _, t := range ts {
		if s.inCluster(ctx, t) {
			have[t.ID] = true
			kept = append(kept, t)
		}
	}
	ts = kept
	kept = ts[:0]
	for _, t := range ts {
		// A fork's base snapshot is the daemon's, made and removed with
		// the fork; it is no template of the owner's.
		if t.Kind != sandpit.KindFork {
			kept = append(kept, t)
		}
	}
	ts = kept
	for _, rec := range s.cluster.sharedTemplates(owner) {
		if !have[rec.ID] {
			ts = append(ts, recordTemplate(rec))
		}
	}
	return ts, nil
}

// TemplateBuilds lists a template's builds, oldest first.
func (s *Service) TemplateBuilds(ctx context.Context, templateID string) ([]sandpit.TemplateBuild, error) {
	if _, err := s.template(ctx, templateID); err != nil {
		return nil, err
	}
	bs, err := s.store.ListBuilds(ctx, templateID)
	for i := range bs {
		bs[i] = s.liveState(bs[i])
	}
	return bs, err
}

// TemplateTags lists a template's tags.
func (s *Service) TemplateTags(ctx context.Context, templateID string) (map[string]string, error) {
	if _, err := s.template(ctx, templateID); err != nil {
		return nil, err
	}
	tags, err := s.store.ListTags(ctx, templateID)
	out := map[string]string{}
	for _, t := range tags {
		out[t.Tag] = t.BuildID
	}
	return out, err
}

// TagBuild points tags of the build's template at the build, which must be
// ready.
func (s *Service) TagBuild(ctx context.Context, buildID string, tags []string) error {
	b, err := s.Build(ctx, buildID)
	if err != nil {
		return err
	}
	if b.State != sandpit.BuildReady {
		return invalidf("build %s is %s: only a ready build can be tagged", b.ID, b.State)
	}
	for _, tag := range tags {
		if !tagRE.MatchString(tag) {
			return invalidf("invalid tag %q", tag)
		}
	}
	if err := s.store.SetTags(ctx, b.TemplateID, b.ID, tags, s.now()); err != nil {
		return err
	}
	s.cluster.publishTemplate(ctx, b.TemplateID, nil)
	return nil
}

// UntagTemplate removes tags from a template.
func (s *Service) UntagTemplate(ctx context.Context, templateID string, tags []string) error {
	if _, err := s.template(ctx, templateID); err != nil {
		return err
	}
	if err := s.store.RemoveTags(ctx, templateID, tags); err != nil {
		return err
	}
	s.cluster.publishTemplate(ctx, templateID, nil)
	return nil
}

// DeleteTemplate removes one of the caller's templates and the images only
// it used. A template with a build running cannot be deleted: the build
// would tag an image nobody owns.
func (s *Service) DeleteTemplate(ctx context.Context, id string) (err error) {
	defer func() { s.audit(ctx, "template.delete", id, err) }()
	t, err := s.template(ctx, id)
	if errors.Is(err, sandpit.ErrNotFound) {
		// Made on another node of the cluster: freeing its name there
		// deletes it for every node (its image stays in the registry).
		if rec, ok := s.sharedTemplate(ctx, id); ok {
			return s.cluster.forgetTemplate(ctx, recordTemplate(rec))
		}
	}
	if err != nil {
		return err
	}
	if err := s.snapshotInUse(ctx, t); err != nil {
		return err
	}
	bs, err := s.store.ListBuilds(ctx, t.ID)
	if err != nil {
		return err
	}
	for _, b := range bs {
		if s.liveState(b).State == sandpit.BuildBuilding {
			return fmt.Errorf("template %s has a build running: %w", t.ID, sandpit.ErrBuildConflict)
		}
	}
	if err := s.store.DeleteTemplate(ctx, t.ID); err != nil {
		return err
	}
	if err := s.cluster.forgetTemplate(ctx, t); err != nil {
		return err
	}
	images := map[string]bool{}
	for _, b := range bs {
		if b.Image != "" {
			images[b.Image] = true
		}
		s.removeBuildFiles(t.Owner, b)
	}
	for img := range images {
		if used, err := s.store.ImageInUse(ctx, img); err != nil || used {
			continue
		}
		// An image a sandbox still runs is kept by the engine (it refuses
		// to remove it); it goes when that sandbox does not need it.
		if err := s.cfg.Images.RemoveImage(ctx, img); err != nil {
			s.log.Info("template image kept", "image", img, "err", err)
		}
	}
	return nil
}

// Resolved is what a create from an owned template takes from it: the
// template (its defaults, start and ready commands) and the image of the
// tag asked for.
type Resolved struct {
	Template sandpit.Template
	Image    string
}

// ResolveOwned finds the caller's template ref ("name", "name:tag"
// or an id) with a ready image; found is false when the caller has no
// template of that name, so the daemon's own templates are looked up next.
func (s *Service) ResolveOwned(ctx context.Context, ref string) (Resolved, bool, error) {
	if ref == "" || s.cfg.TemplateDir == "" {
		return Resolved{}, false, nil
	}
	name, tag, tagged := strings.Cut(ref, ":")
	if rec, ok := s.sharedTemplate(ctx, name); ok {
		// In a cluster the index is where a template's newest image is,
		// whichever node built it; the image is pulled from the registry
		// below when this node lacks it.
		return s.resolveShared(ctx, rec, ref, tag, tagged)
	}
	t, err := s.store.GetTemplateByName(ctx, identity.OwnerOf(ctx), name)
	if errors.Is(err, sandpit.ErrNotFound) {
		t, err = s.template(ctx, name)
	}
	if errors.Is(err, sandpit.ErrNotFound) && s.cluster.clustered() {
		// A template made on another node a moment ago may not have
		// reached this node's copy of the index yet.
		if s.cluster.catchUp(ctx) == nil {
			if rec, ok := s.sharedTemplate(ctx, name); ok {
				return s.resolveShared(ctx, rec, ref, tag, tagged)
			}
		}
	}
	if errors.Is(err, sandpit.ErrNotFound) {
		return Resolved{}, false, nil
	}
	if err != nil {
		return Resolved{}, false, err
	}
	if s.cluster.clustered() && t.Name != "" {
		// Every named template of a cluster node is in the index; one
		// that is not (after this node caught up) was deleted through
		// another node, and this row is what its build here left.
		rec, ok := s.freshSharedTemplate(ctx, t.Name)
		if !ok || rec.ID != t.ID {
			return Resolved{}, false, nil
		}
		return s.resolveShared(ctx, rec, ref, tag, tagged)
	}
	image := t.Image
	if tagged && tag != "" {
		tags, err := s.store.ListTags(ctx, t.ID)
		if err != nil {
			return Resolved{}, true, err
		}
		image = ""
		for _, tg := range tags {
			if tg.Tag == tag {
				b, err := s.store.GetBuild(ctx, tg.BuildID)
				if err != nil {
					return Resolved{}, true, err
				}
				image = b.Image
			}
		}
		if image == "" && !(tag == "default" && t.Image != "") {
			return Resolved{}, true, fmt.Errorf("%w: %q has no tag %q", sandpit.ErrUnknownTemplate, name, tag)
		}
		if image == "" {
			image = t.Image
		}
	}
	if image == "" {
		return Resolved{}, true, fmt.Errorf("%w: %q has no ready build yet", sandpit.ErrUnknownTemplate, ref)
	}
	if ok, err := s.ensureImage(ctx, image, io.Discard); err != nil || !ok {
		return Resolved{}, true, fmt.Errorf("%w: the image of template %q is not on this node: %v", sandpit.ErrUnknownImage, ref, err)
	}
	return Resolved{Template: t, Image: image}, true, nil
}
