package templates

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/idempotency"
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

// buildRun is one build the engine runs in this process, and every build
// row that joined it (a duplicate request of the same content): they share
// its log and its end.
type buildRun struct {
	owner, hash string
	done        chan struct{}

	mu      sync.Mutex
	members []string
	// tags is, for each member, its template and the tags its own request
	// asked for: one content may be built for two templates, or under two
	// tags at once, and each member keeps its own.
	tags map[string]memberTags
	// lines is the log as readers see it: appended to, never rewritten,
	// so an offset into it stays valid (E2B's SDK polls by offset).
	lines   []LogEntry
	log     boundedLog
	files   []*os.File
	changed chan struct{} // closed and replaced whenever a line is added
	state   sandpit.BuildState
	image   string
	reason  string
}

// boundedLog keeps a build's log within a budget (Config.BuildLogMax): the
// first half of the budget as it comes (the head, visible at once), then a
// ring of the newest lines within the other half (the tail, which holds the
// error that ends a failing build), appended to the visible log with a line
// saying what was dropped between them when the build ends. Memory and the
// file on disk hold at most the budget, whatever a build prints.
type boundedLog struct {
	max       int64 // negative: no bound
	headBytes int64
	over      bool // the head is full: lines go to the tail
	tail      []LogEntry
	tailBytes int64
	dropped   int64 // lines
	droppedB  int64 // bytes
}

// maxLogLine bounds one entry's message: a single line of output may be
// any length.
const maxLogLine = 64 << 10

func (r *buildRun) add(level, msg string) {
	if len(msg) > maxLogLine {
		msg = msg[:maxLogLine] + fmt.Sprintf(" [... %d more bytes of this line dropped]", len(msg)-maxLogLine)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := LogEntry{Time: time.Now().UTC(), Level: level, Message: msg}
	line, _ := json.Marshal(e)
	size := int64(len(line) + 1)
	l := &r.log
	if l.max >= 0 && (l.over || l.headBytes+size > l.max/2) {
		// Past the head: the line joins the tail, which drops its oldest
		// lines to stay within its half. Readers see the tail at the end.
		l.over = true
		l.tail = append(l.tail, e)
		l.tailBytes += size
		for l.tailBytes > l.max/2 && len(l.tail) > 0 {
			old, _ := json.Marshal(l.tail[0])
			l.tail[0] = LogEntry{}
			l.tail = l.tail[1:]
			l.tailBytes -= int64(len(old) + 1)
			l.dropped++
			l.droppedB += int64(len(old) + 1)
		}
		return
	}
	l.headBytes += size
	r.appendLocked(e, line)
}

// appendLocked makes e visible: in memory, in every member's file, and to
// followers.
func (r *buildRun) appendLocked(e LogEntry, line []byte) {
	r.lines = append(r.lines, e)
	for _, f := range r.files {
		_, _ = f.Write(append(line, '\n'))
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// sealLog appends the tail, after a line saying how much was dropped
// before it, once no line can follow.
func (r *buildRun) sealLog() {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := &r.log
	if !l.over {
		return
	}
	if l.dropped > 0 {
		e := LogEntry{Time: time.Now().UTC(), Level: "warn", Message: fmt.Sprintf(
			"[%d lines (%d bytes) of build output dropped here: a build keeps the first and last %d KiB of its log (--build-log-max-mb)]",
			l.dropped, l.droppedB, l.max/2>>10)}
		line, _ := json.Marshal(e)
		r.appendLocked(e, line)
	}
	for _, e := range l.tail {
		line, _ := json.Marshal(e)
		r.appendLocked(e, line)
	}
	l.tail, l.tailBytes, l.over = nil, 0, false
}

// Write makes the run an io.Writer of the engine's log stream: one entry
// per line.
func (r *buildRun) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) != "" {
			r.add("info", line)
		}
	}
	return len(p), nil
}

type memberTags struct {
	templateID string
	tags       []string
}

// builds holds the runs of this process.
type builds struct {
	mu        sync.Mutex
	byBuild   map[string]*buildRun
	byContent map[string]*buildRun
	queue     *buildQueue
	// pinned counts the running builds that use each context file.
	pinned map[string]int
	// uploads orders the quota check and the rename of context uploads.
	uploads sync.Mutex
	ctx     context.Context
}

func newBuilds(n int) *builds {
	return &builds{byBuild: map[string]*buildRun{}, byContent: map[string]*buildRun{}, queue: newBuildQueue(n), ctx: context.Background()}
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

// Build returns a build of one of the caller's templates; a build that
// joined another's run reports the run's state.
func (s *Service) Build(ctx context.Context, buildID string) (sandpit.TemplateBuild, error) {
	b, err := s.store.GetBuild(ctx, buildID)
	if err != nil {
		return b, err
	}
	if _, err := s.template(ctx, b.TemplateID); err != nil {
		return sandpit.TemplateBuild{}, fmt.Errorf("get build %s: %w", buildID, sandpit.ErrNotFound)
	}
	return s.liveState(b), nil
}

func (s *Service) liveState(b sandpit.TemplateBuild) sandpit.TemplateBuild {
	if b.State.Done() {
		return b
	}
	s.builds.mu.Lock()
	run := s.builds.byBuild[b.ID]
	s.builds.mu.Unlock()
	if run != nil {
		b.State = sandpit.BuildBuilding
		// A build that waits for a slot says where it stands; a joined
		// build stands where the run it joined does.
		run.mu.Lock()
		first := run.members[0]
		run.mu.Unlock()
		b.QueuePosition = s.builds.queue.position(first)
	}
	return b
}

// StartBuild gives a waiting build its definition and starts it in the
// background; the build's state and log say how it goes. A duplicate of a
// build of the same content that runs in this process joins it (one engine
// build, one log, one end for both); one that already finished is replayed
// from the idempotency engine without building again. Starting a build
// that already started with the same content is a retry and changes
// nothing; with another content it is a conflict.
func (s *Service) StartBuild(ctx context.Context, buildID string, def BuildDefinition) (sandpit.TemplateBuild, error) {
	if err := s.buildsReady(); err != nil {
		return sandpit.TemplateBuild{}, err
	}
	b, err := s.Build(ctx, buildID)
	if err != nil {
		return b, err
	}
	t, err := s.template(ctx, b.TemplateID)
	if err != nil {
		return sandpit.TemplateBuild{}, err
	}
	if err := s.validateDefinition(t.Owner, &def); err != nil {
		return sandpit.TemplateBuild{}, err
	}
	if err := s.checkBuildBases(ctx, def.Dockerfile); err != nil {
		return sandpit.TemplateBuild{}, err
	}
	hash := def.contentHash()
	if def.NoCache {
		// A forced build is its own content: nothing joins or replays it.
		hash = hash + "-" + b.ID
	}
	if b.ContentHash != "" || b.State != sandpit.BuildWaiting {
		if b.ContentHash == hash || (def.NoCache && b.State != sandpit.BuildWaiting) {
			return b, nil
		}
		return sandpit.TemplateBuild{}, fmt.Errorf("build %s already started with another definition: %w", b.ID, sandpit.ErrBuildConflict)
	}
	b.ContentHash, b.Definition, b.Dockerfile = hash, def.Source, def.Dockerfile
	b.StartCmd, b.ReadyCmd, b.User, b.Workdir, b.CPU, b.MemoryMB = def.StartCmd, def.ReadyCmd, def.User, def.Workdir, def.CPU, def.MemoryMB

	key := t.Owner + "\x00" + hash
	// A joining build is announced under the run's lock, so before the
	// run's end (announced for every member) can be.
	run, outcome := s.joinOrReserve(key, b.ID, t.Owner, hash, memberTags{templateID: t.ID, tags: def.Tags},
		func() { _ = s.transition(ctx, buildChange{t: t, b: b, to: sandpit.BuildBuilding, joined: true}) })
	if outcome == runAlready {
		// The same build was started by a request that raced this one
		// (two identical E2B requests share one build): a retry with the
		// same content changes nothing, another content is a conflict.
		if run.hash != hash {
			return sandpit.TemplateBuild{}, fmt.Errorf("build %s already started with another definition: %w", b.ID, sandpit.ErrBuildConflict)
		}
		return s.Build(ctx, b.ID)
	}
	if outcome == runJoined {
		// The row stays waiting (the running one holds the template's one
		// running slot) and reports the run's state.
		if err := s.store.SetBuildDefinition(ctx, b, s.now()); err != nil {
			return sandpit.TemplateBuild{}, err
		}
		s.log.Info("template build joined a running build of the same content", "build", b.ID, "template", t.ID)
		return s.Build(ctx, b.ID)
	}
	start := func() error {
		if err := s.checkBuildQuota(ctx, t.Owner); err != nil {
			return err
		}
		return s.transition(ctx, buildChange{t: t, b: b, to: sandpit.BuildBuilding})
	}
	if err := start(); err != nil {
		// The build and whoever joined its reserved run end with the
		// refusal, so none is left waiting for a run that never starts.
		s.endRun(context.WithoutCancel(ctx), run, key, sandpit.BuildError, "", err.Error(), false)
		return sandpit.TemplateBuild{}, err
	}
	s.builds.mu.Lock()
	bctx := s.builds.ctx
	s.builds.mu.Unlock()
	s.audit(ctx, "template.build", b.ID, nil)
	s.cfg.Metrics.BuildStarted()
	go s.runBuild(bctx, t, b, def, run, key)
	return s.Build(ctx, b.ID)
}

// runOutcome says what joinOrReserve did.
type runOutcome int

const (
	// runReserved: a new run was reserved for the build, which starts it.
	runReserved runOutcome = iota + 1
	// runJoined: the build joined a running build of the same content.
	runJoined
	// runAlready: the build itself is already in a run of this process.
	runAlready
)

// joinOrReserve joins the running build of key, or, when there is none,
// reserves a run for build id that later duplicates join: the check and the
// reservation are one step, so two identical requests never both start,
// and two starts of one build never both run it.
func (s *Service) joinOrReserve(key, id, owner, hash string, tags memberTags, onJoin func()) (*buildRun, runOutcome) {
	s.builds.mu.Lock()
	defer s.builds.mu.Unlock()
	if run := s.builds.byBuild[id]; run != nil {
		return run, runAlready
	}
	if run := s.builds.byContent[key]; run != nil {
		run.mu.Lock()
		joinable := !run.state.Done()
		if joinable {
			run.members = append(run.members, id)
			run.tags[id] = tags
			if f := s.openBuildLog(id); f != nil {
				for _, e := range run.lines {
					line, _ := json.Marshal(e)
					_, _ = f.Write(append(line, '\n'))
				}
				run.files = append(run.files, f)
			}
			onJoin()
		}
		run.mu.Unlock()
		if joinable {
			s.builds.byBuild[id] = run
			return run, runJoined
		}
	}
	run := &buildRun{owner: owner, hash: hash, done: make(chan struct{}), members: []string{id}, tags: map[string]memberTags{id: tags},
		changed: make(chan struct{}), state: sandpit.BuildBuilding, log: boundedLog{max: s.cfg.BuildLogMax}}
	if f := s.openBuildLog(id); f != nil {
		run.files = []*os.File{f}
	}
	s.builds.byContent[key] = run
	s.builds.byBuild[id] = run
	return run, runReserved
}

// endRun ends a run and the build rows that joined it, so nothing joins a
// run whose members were ended; announce publishes each member's end, with
// its own template as the end left it (the image of a ready build set).
func (s *Service) endRun(ctx context.Context, run *buildRun, key string, state sandpit.BuildState, image, reason string, announce bool) {
	run.sealLog()
	s.builds.mu.Lock()
	run.mu.Lock()
	run.state, run.image, run.reason = state, image, reason
	members := append([]string(nil), run.members...)
	tags := maps.Clone(run.tags)
	run.mu.Unlock()
	if s.builds.byContent[key] == run {
		delete(s.builds.byContent, key)
	}
	s.builds.mu.Unlock()
	for _, id := range members {
		c := buildChange{b: sandpit.TemplateBuild{ID: id}, to: state, image: image, reason: reason, quiet: !announce}
		c.t.ID = tags[id].templateID
		if err := s.transition(ctx, c); err != nil {
			s.log.Error("record the end of a template build", "build", id, "err", err)
		}
	}
	run.mu.Lock()
	for _, f := range run.files {
		_ = f.Close()
	}
	run.files = nil
	close(run.changed)
	run.changed = make(chan struct{})
	run.mu.Unlock()
	close(run.done)
	s.builds.mu.Lock()
	for _, id := range members {
		delete(s.builds.byBuild, id)
	}
	s.builds.mu.Unlock()
}

// CheckBuildDefinition refuses a definition StartBuild would refuse, so a
// surface can check it before it makes a template or a build.
func (s *Service) CheckBuildDefinition(ctx context.Context, def BuildDefinition) error {
	if err := s.buildsReady(); err != nil {
		return err
	}
	if err := s.validateDefinition(identity.OwnerOf(ctx), &def); err != nil {
		return err
	}
	if err := s.checkBuildQuota(ctx, identity.OwnerOf(ctx)); err != nil {
		return err
	}
	return s.checkBuildBases(ctx, def.Dockerfile)
}

// checkBuildQuota refuses a build beyond the owner's running builds.
func (s *Service) checkBuildQuota(ctx context.Context, owner string) error {
	running, err := s.store.CountRunningBuilds(ctx, owner)
	if err != nil {
		return err
	}
	if limit := s.cfg.MaxBuildsPerOwner; limit > 0 && running >= limit {
		return fmt.Errorf("%w: owner %q already runs %d builds (the limit is %d)", sandpit.ErrQuotaExceeded, owner, running, limit)
	}
	return nil
}

func (s *Service) validateDefinition(owner string, def *BuildDefinition) error {
	if strings.TrimSpace(def.Dockerfile) == "" {
		return invalidf("a build needs a Dockerfile")
	}
	if def.CPU < 0 || def.MemoryMB < 0 {
		return invalidf("cpu and memory must not be negative")
	}
	for _, tag := range def.Tags {
		if !tagRE.MatchString(tag) {
			return invalidf("invalid tag %q", tag)
		}
	}
	for _, f := range def.Files {
		if !fileHashRE.MatchString(f.Hash) {
			return invalidf("invalid files hash %q", f.Hash)
		}
		if p := path.Clean("/" + f.Prefix); strings.Contains(f.Prefix, "..") || p == "" {
			return invalidf("invalid context prefix %q", f.Prefix)
		}
		if !s.HasTemplateFiles(owner, f.Hash) {
			return invalidf("the build's files %s were not uploaded", f.Hash)
		}
	}
	return nil
}

// runBuild builds one run's image and ends every build that joined it.
func (s *Service) runBuild(ctx context.Context, t sandpit.Template, b sandpit.TemplateBuild, def BuildDefinition, run *buildRun, key string) {
	start := time.Now()
	defer s.useContexts(b.ID, t.Owner, def.Files)()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.BuildTimeout)
	defer cancel()
	image, err := s.buildOnce(ctx, t, b, def, run)
	state, reason := sandpit.BuildReady, ""
	if err != nil {
		state, reason = sandpit.BuildError, buildReason(ctx, err, s.cfg.BuildTimeout)
		run.add("error", reason)
	} else {
		run.add("info", "built "+image)
	}
	sctx := context.WithoutCancel(ctx)
	run.mu.Lock()
	tags := maps.Clone(run.tags)
	run.mu.Unlock()
	if state == sandpit.BuildReady {
		// Tags go on before the builds end, so a build reported ready
		// already has its tags pointing at its image.
		for id, mt := range tags {
			if len(mt.tags) == 0 {
				continue
			}
			if err := s.store.SetTags(sctx, mt.templateID, id, mt.tags, s.now()); err != nil {
				s.log.Error("tag a template build", "build", id, "err", err)
			}
		}
		// Every node of a cluster finds the new image of each template
		// the run built for, before any node can see its build ready.
		published := map[string]bool{}
		for _, tid := range append([]string{t.ID}, tagTemplates(tags)...) {
			if !published[tid] {
				published[tid] = true
				s.cluster.publishTemplate(sctx, tid, &readyBuild{image: image, def: def})
			}
		}
	}
	s.endRun(sctx, run, key, state, image, reason, true)
	s.cfg.Metrics.BuildDone(string(state), time.Since(start))
	s.log.Info("template build ended", "template", t.ID, "build", b.ID, "state", state, "reason", reason, "took", time.Since(start).Round(time.Millisecond))
}

func buildReason(ctx context.Context, err error, limit time.Duration) string {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Sprintf("the build took longer than the daemon's limit of %s", limit)
	case errors.Is(ctx.Err(), context.Canceled):
		return "the daemon stopped during the build; build again"
	case errors.Is(err, driver.ErrBuildFailed):
		return strings.TrimPrefix(err.Error(), driver.ErrBuildFailed.Error()+": ")
	}
	return err.Error()
}

// buildOnce runs the engine build under the idempotency engine, keyed by
// the owner and the content hash: a build of a content this owner already
// built is replayed (the image is reused), and one another process is
// building is waited for.
func (s *Service) buildOnce(ctx context.Context, t sandpit.Template, b sandpit.TemplateBuild, def BuildDefinition, run *buildRun) (string, error) {
	image := s.templateImage(t.Owner, run.hash)
	release, err := s.builds.queue.acquire(ctx, t.Owner, b.ID, func() {
		run.add("info", fmt.Sprintf("waiting for a build slot: the daemon runs at most %d builds at once and serves owners in turn (position %d)",
			s.builds.queue.slots, s.builds.queue.position(b.ID)))
	})
	if err != nil {
		return "", err
	}
	defer release()

	scope := idempotency.OwnerScope("template-build", t.Owner)
	req := idempotency.Request{Scope: scope, Key: run.hash, PendingTTL: time.Minute, Wait: s.cfg.BuildTimeout, ReplayTTL: 30 * 24 * time.Hour}
	for attempt := 0; ; attempt++ {
		resp, outcome, err := s.idem.Do(ctx, req, func(ctx context.Context, a *idempotency.Attempt) (idempotency.Response, error) {
			if err := a.SetTarget(ctx, b.ID); err != nil {
				return idempotency.Response{}, err
			}
			if err := s.engineBuildRetrying(ctx, b, def, image, run); err != nil {
				return idempotency.Response{}, err
			}
			return idempotency.Response{Status: 200, Body: []byte(image), TargetID: b.ID}, nil
		})
		if err != nil {
			return "", err
		}
		if outcome != idempotency.Replayed {
			return image, nil
		}
		replayed := string(resp.Body)
		if ok, _ := s.ensureImage(ctx, replayed, run); ok {
			run.add("info", "the same definition was built before: reusing its image")
			return replayed, nil
		}
		if attempt > 0 {
			return "", fmt.Errorf("the image of an earlier build of this definition is gone and could not be rebuilt")
		}
		// The image of the earlier build is gone (removed with its
		// template): forget that build and run this one for real.
		if err := s.idem.Forget(ctx, scope, run.hash); err != nil {
			return "", err
		}
	}
}

// buildAttempts bounds how often a build whose cached image vanished is run
// again: each run reuses the cache afresh, so a second loss needs a second
// removal racing the same steps.
const buildAttempts = 3

// engineBuildRetrying runs engineBuild, and runs it again when an image the
// engine was reusing from its cache was removed under it (see
// driver.ErrBuildImageVanished): that failure is the engine's, not the
// definition's, and nothing was tagged.
func (s *Service) engineBuildRetrying(ctx context.Context, b sandpit.TemplateBuild, def BuildDefinition, image string, run *buildRun) error {
	for attempt := 1; ; attempt++ {
		err := s.engineBuild(ctx, b, def, image, run)
		if err == nil || !errors.Is(err, driver.ErrBuildImageVanished) || attempt == buildAttempts || ctx.Err() != nil {
			return err
		}
		s.log.Info("template build: an image the engine was reusing was removed mid-build; building again", "build", b.ID, "attempt", attempt, "err", err)
		run.add("info", "an image the build was reusing was removed by another build's cleanup: building again")
	}
}

// engineBuild streams the context to the engine, and with a registry,
// pushes the result so every node can pull it.
func (s *Service) engineBuild(ctx context.Context, b sandpit.TemplateBuild, def BuildDefinition, image string, run *buildRun) error {
	run.add("info", "building")
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(s.writeContext(pw, s.ownerDir(run.owner), def)) }()
	labels := s.imageLabels()
	labels[driver.LabelTemplateBuild] = b.ID
	limits, cacheFrom, err := s.buildBounds(ctx, run.owner)
	if err != nil {
		pr.Close()
		return err
	}
	_, err = s.cfg.Images.Build(ctx, driver.BuildSpec{
		Context: pr, Dockerfile: buildDockerfile, Tag: image, Labels: labels, NoCache: def.NoCache,
		CacheFrom: cacheFrom, Limits: limits,
	}, run)
	pr.Close()
	if err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.AfterImageBuild)
	if s.cfg.Registry != "" {
		run.add("info", "pushing to "+s.cfg.Registry)
		if err := s.cfg.Images.Push(ctx, image, run); err != nil {
			// An image the other nodes cannot pull is not a usable
			// template: the local tag goes too.
			_ = s.cfg.Images.RemoveImage(context.WithoutCancel(ctx), image)
			return err
		}
	}
	return nil
}

// ensureImage makes sure the engine has image, pulling it from the registry
// when the daemon has one.
func (s *Service) ensureImage(ctx context.Context, image string, logs io.Writer) (bool, error) {
	ok, err := s.cfg.Images.HasImage(ctx, image)
	if err != nil || ok || s.cfg.Registry == "" || !strings.HasPrefix(image, s.cfg.Registry+"/") {
		return ok, err
	}
	if err := s.cfg.Images.Pull(ctx, image, logs); err != nil {
		return false, err
	}
	return true, nil
}

// templateImage is the image reference a content builds to. It names the
// owner (hashed: owner names need not be valid references) so that one
// owner's builds are never another's.
func (s *Service) templateImage(owner, hash string) string {
	o := sha256.Sum256([]byte(owner))
	ref := templateRepo + "/" + hex.EncodeToString(o[:6]) + ":" + strings.ReplaceAll(hash[:min(len(hash), 40)], "-", "")
	if len(hash) > 64 {
		// A forced build's hash carries its build id.
		ref += "-" + hash[65:]
	}
	if s.cfg.Registry != "" {
		ref = s.cfg.Registry + "/" + ref
	}
	return ref
}

// buildDockerfile is the Dockerfile's name in a build context. It is not
// "Dockerfile", which the user's files may well contain.
const buildDockerfile = ".sandpit.Dockerfile"

var fileHashRE = regexp.MustCompile(`^[A-Za-z0-9_-]{8,128}$`)

// writeContext writes the build context: the Dockerfile, then the entries
// of every archive under its prefix. Names that would leave the context
// (absolute, "..") are refused rather than trusted to the engine.
func (s *Service) writeContext(w io.Writer, dir string, def BuildDefinition) error {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: buildDockerfile, Mode: 0o644, Size: int64(len(def.Dockerfile)), ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, def.Dockerfile); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, f := range def.Files {
		if err := copyArchive(tw, filepath.Join(dir, f.Hash), f, seen); err != nil {
			return fmt.Errorf("context files %s: %w", f.Hash, err)
		}
	}
	return tw.Close()
}

// copyArchive writes the entries of the archive file that f selects into
// the context, renamed as f places them. A hard link names another entry
// of its archive, so its target is renamed the same way; one whose target
// is not placed (or leaves the context) is refused, since the engine would
// otherwise resolve it against whatever the context holds under that name.
// Symlinks are written as they are: the engine resolves what a build reads
// through one within the context, never on the host. Entries beneath a
// symlink of the archive are left out: E2B's SDK archives a symlink to a
// directory with the files it reaches through it (on the caller's machine),
// which the engine will not extract through the link, failing the build;
// the link alone is what the copy keeps.
func copyArchive(tw *tar.Writer, file string, f ContextFiles, seen map[string]bool) error {
	prefix := strings.Trim(path.Clean("/"+f.Prefix), "/")
	fh, err := os.Open(file)
	if err != nil {
		return err
	}
	defer fh.Close()
	if f.Select != "" && !seen[prefix+"/"] {
		// The step's directory exists even when what it selects is an
		// empty directory, so the COPY of it finds it.
		seen[prefix+"/"] = true
		if err := tw.WriteHeader(&tar.Header{Name: prefix + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
	links := map[string]bool{}
	return eachEntry(fh, func(h *tar.Header, body io.Reader) error {
		if !insideContext(h.Name) {
			return invalidf("archive entry %q leaves the context", h.Name)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." || beneathLink(links, name) {
			return nil
		}
		if h.Typeflag == tar.TypeSymlink {
			links[name] = true
		}
		name, ok := f.place(name, h.Typeflag == tar.TypeDir)
		if !ok || name == "" {
			return nil
		}
		h.Name = path.Join(prefix, name)
		if h.Typeflag == tar.TypeDir {
			h.Name += "/"
		}
		if h.Typeflag == tar.TypeLink {
			target, placed := "", insideContext(h.Linkname)
			if placed {
				target, placed = f.place(path.Clean(strings.TrimPrefix(h.Linkname, "./")), false)
			}
			if !placed || target == "" {
				return invalidf("archive entry %q is a hard link to %q, which is not among the copied files", h.Name, h.Linkname)
			}
			h.Linkname = path.Join(prefix, target)
		}
		if seen[h.Name] {
			// Two archives (two COPY steps of one directory) may hold
			// the same entry; the first stands.
			return nil
		}
		seen[h.Name] = true
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := io.Copy(tw, body)
		return err
	})
}

// beneathLink reports whether one of name's parent directories is among
// links.
func beneathLink(links map[string]bool, name string) bool {
	for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
		if links[d] {
			return true
		}
	}
	return false
}

// eachEntry calls fn with every entry of a tar archive, gzipped or not.
func eachEntry(r io.Reader, fn func(*tar.Header, io.Reader) error) error {
	br := bufio.NewReader(r)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gz.Close()
		in = gz
	}
	tr := tar.NewReader(in)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(h, tr); err != nil {
			return err
		}
	}
}

func (s *Service) ownerDir(owner string) string {
	o := sha256.Sum256([]byte(owner))
	return filepath.Join(s.cfg.TemplateDir, "files", hex.EncodeToString(o[:8]))
}

// HasTemplateFiles reports whether the owner uploaded the archive.
func (s *Service) HasTemplateFiles(owner, hash string) bool {
	if !fileHashRE.MatchString(hash) || s.cfg.TemplateDir == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(s.ownerDir(owner), hash))
	return err == nil
}

// HasFiles reports whether the caller uploaded the archive.
func (s *Service) HasFiles(ctx context.Context, hash string) bool {
	return s.HasTemplateFiles(identity.OwnerOf(ctx), hash)
}

// PutTemplateFiles stores an archive (a tar, gzipped or not) of build
// context files for the caller under hash. An upload is idempotent: the
// same hash again replaces the file atomically. With verify, hash must be
// the SHA-256 of the bytes (the /v1 upload); E2B's hash is the SDK's own
// digest of the files and is taken as the name it is.
func (s *Service) PutTemplateFiles(ctx context.Context, hash string, r io.Reader, verify bool) error {
	if err := s.buildsReady(); err != nil {
		return err
	}
	if !fileHashRE.MatchString(hash) {
		return invalidf("invalid files hash %q", hash)
	}
	dir := s.ownerDir(identity.OwnerOf(ctx))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	limit := s.cfg.MaxContextBytes
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, limit+1))
	if err != nil {
		return fmt.Errorf("upload build files: %w", err)
	}
	if n > limit {
		return fmt.Errorf("%w: over the daemon's limit of %d bytes", ErrTooLarge, limit)
	}
	if verify && hex.EncodeToString(h.Sum(nil)) != hash {
		return invalidf("the uploaded files do not hash to %s", hash)
	}
	// The quota is checked with the upload on disk, under the lock that
	// orders every owner's uploads, so two uploads cannot both fit a
	// quota that holds one.
	s.builds.uploads.Lock()
	defer s.builds.uploads.Unlock()
	if err := s.checkContextQuota(dir, hash, n); err != nil {
		return err
	}
	if err := checkArchive(tmp); err != nil {
		return invalidf("the uploaded files are not a tar archive: %v", err)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, hash))
}

// checkArchive reads the archive through, so a corrupt upload is refused
// when it arrives rather than failing a build later.
func checkArchive(f *os.File) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return eachEntry(f, func(h *tar.Header, body io.Reader) error {
		if !insideContext(h.Name) {
			return fmt.Errorf("entry %q leaves the build context", h.Name)
		}
		_, err := io.Copy(io.Discard, body)
		return err
	})
}

// insideContext reports whether an archive entry's name stays inside the
// directory it is unpacked in.
func insideContext(name string) bool {
	n := path.Clean(strings.TrimPrefix(name, "./"))
	return !path.IsAbs(n) && n != ".." && !strings.HasPrefix(n, "../")
}

func (s *Service) openBuildLog(buildID string) *os.File {
	dir := filepath.Join(s.cfg.TemplateDir, "logs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.log.Warn("build log directory", "err", err)
		return nil
	}
	f, err := os.OpenFile(filepath.Join(dir, buildID+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.log.Warn("open build log", "build", buildID, "err", err)
		return nil
	}
	return f
}

// BuildLog returns the build's log entries from offset on, and whether the
// build has ended (so no entry will follow).
func (s *Service) BuildLog(ctx context.Context, buildID string, offset int) ([]LogEntry, bool, error) {
	b, err := s.Build(ctx, buildID)
	if err != nil {
		return nil, false, err
	}
	s.builds.mu.Lock()
	run := s.builds.byBuild[b.ID]
	s.builds.mu.Unlock()
	if run != nil {
		run.mu.Lock()
		defer run.mu.Unlock()
		return tail(run.lines, offset), run.state.Done(), nil
	}
	lines, err := s.readBuildLog(b.ID)
	return tail(lines, offset), b.State.Done(), err
}

func tail(lines []LogEntry, offset int) []LogEntry {
	if offset < 0 {
		offset = 0
	}
	if offset >= len(lines) {
		return []LogEntry{}
	}
	return append([]LogEntry(nil), lines[offset:]...)
}

func (s *Service) readBuildLog(buildID string) ([]LogEntry, error) {
	data, err := os.ReadFile(filepath.Join(s.cfg.TemplateDir, "logs", buildID+".jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []LogEntry
	for _, line := range bytes.Split(data, []byte("\n")) {
		var e LogEntry
		if len(line) > 0 && json.Unmarshal(line, &e) == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// FollowBuildLog calls fn with each log entry of the build from offset on,
// as they come, until the build ends or ctx does.
func (s *Service) FollowBuildLog(ctx context.Context, buildID string, offset int, fn func(LogEntry) error) error {
	for {
		s.builds.mu.Lock()
		run := s.builds.byBuild[buildID]
		s.builds.mu.Unlock()
		var changed chan struct{}
		if run != nil {
			run.mu.Lock()
			changed = run.changed
			run.mu.Unlock()
		}
		lines, done, err := s.BuildLog(ctx, buildID, offset)
		if err != nil {
			return err
		}
		for _, e := range lines {
			if err := fn(e); err != nil {
				return err
			}
		}
		offset += len(lines)
		if done {
			return nil
		}
		if changed == nil {
			// Waiting for a definition, or in another process: poll.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// WaitBuild waits until the build ends and returns it.
func (s *Service) WaitBuild(ctx context.Context, buildID string) (sandpit.TemplateBuild, error) {
	for {
		b, err := s.Build(ctx, buildID)
		if err != nil || b.State.Done() {
			return b, err
		}
		s.builds.mu.Lock()
		run := s.builds.byBuild[buildID]
		s.builds.mu.Unlock()
		wait := time.After(250 * time.Millisecond)
		if run != nil {
			select {
			case <-run.done:
			case <-wait:
			case <-ctx.Done():
				return b, ctx.Err()
			}
			continue
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return b, ctx.Err()
		}
	}
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

// RecoverBuilds ends the builds a previous process left unfinished: their
// engine build died with that process, so each becomes error (nothing was
// tagged: the engine tags only a finished build) and its claim is dropped,
// so that a retry builds again instead of waiting out a dead claim. Builds
// started later run under ctx.
func (s *Service) RecoverBuilds(ctx context.Context) error {
	s.builds.mu.Lock()
	s.builds.ctx = ctx
	s.builds.mu.Unlock()
	if s.cfg.TemplateDir == "" {
		return nil
	}
	bs, err := s.store.ListUnfinishedBuilds(ctx)
	if err != nil {
		return err
	}
	for _, b := range bs {
		reason := "the daemon stopped during the build; build again"
		if b.State == sandpit.BuildWaiting && b.ContentHash == "" {
			reason = "the daemon restarted before the build was started; build again"
		}
		if err := s.transition(ctx, buildChange{b: b, to: sandpit.BuildError, reason: reason, quiet: true}); err != nil {
			return err
		}
		// A surface that recorded an answer naming this build (E2B's
		// requested build, waiting for its steps) would hand the dead
		// build to a retry: the answer goes, and the retry makes a new one.
		if s.cfg.Cluster == nil {
			if _, err := s.store.DeleteIdempotentRequestsFor(ctx, "", b.ID); err != nil {
				s.log.Warn("forget the answers about an unfinished build", "build", b.ID, "err", err)
			}
		}
		if t, err := s.store.GetTemplate(ctx, b.TemplateID); err == nil && t.Kind.Or() != sandpit.KindBuild {
			s.recoverSnapshot(ctx, t, b)
		} else if err == nil && b.ContentHash != "" {
			_ = s.idem.Forget(ctx, idempotency.OwnerScope("template-build", t.Owner), b.ContentHash)
			// A keyed request whose answer said "building" would replay
			// that answer, about a build that will never end, to every
			// retry: its recorded answer goes, and a retry of the same key
			// builds again. (In a cluster the claims live in the
			// replicated index, which keeps them.)
			if s.cfg.Cluster == nil {
				if n, err := s.store.DeleteIdempotentRequestsFor(ctx, "", t.ID); err != nil {
					s.log.Warn("forget the answers about an unfinished build", "template", t.ID, "err", err)
				} else if n > 0 {
					s.log.Info("a retry of the request that started the unfinished build will build again", "template", t.ID, "build", b.ID)
				}
			}
			// The engine may have finished and tagged the image just
			// before the process died: an image no template records is
			// an orphan, and goes (a retry builds it again from the
			// engine's layer cache).
			if ref := s.templateImage(t.Owner, b.ContentHash); s.cfg.Images != nil {
				if used, err := s.store.ImageInUse(ctx, ref); err == nil && !used && !s.imageShared(ref) {
					if err := s.cfg.Images.RemoveImage(ctx, ref); err != nil {
						s.log.Warn("remove the image of an unfinished build", "image", ref, "err", err)
					}
				}
			}
		}
		if f := s.openBuildLog(b.ID); f != nil {
			line, _ := json.Marshal(LogEntry{Time: s.now(), Level: "error", Message: reason})
			_, _ = f.Write(append(line, '\n'))
			_ = f.Close()
		}
		s.log.Warn("template build left unfinished by the previous process ended as error", "build", b.ID)
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
