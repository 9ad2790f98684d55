package templates

import (
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
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

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
