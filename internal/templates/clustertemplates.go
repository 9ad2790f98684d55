package templates

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

// In a cluster a template is made in the store of the node a request
// reaches, but its name is the owner's across the cluster and a create on
// any node must find it. The replicated index holds one record per named
// template (cluster.TemplateRecord): EnsureTemplate claims the name there
// first, so every node makes the template under the id of the first claim;
// a build that becomes ready publishes what a create needs (image,
// defaults, commands, tags) to it; a delete frees it. A create on a node
// whose store lacks the template takes it from the record, and the node
// pulls the image from --registry (ensureImage). Without a registry only the
// node that built an image has it: TemplateNodes tells placement which.

// templateCluster is how cluster mode enters the template aggregate:
// singleNode is a daemon on its own, replicated a node of a cluster.
type templateCluster interface {
	// clustered reports whether this daemon is a node of a cluster.
	clustered() bool
	// claimTemplate takes t's name for its owner cluster-wide and returns
	// the id the name holds (t.ID when the claim is the first).
	claimTemplate(ctx context.Context, t sandpit.Template) (string, error)
	// publishTemplate writes the template's ready state to the index;
	// ready, when set, is a build about to be recorded ready, whose tags
	// are already stored (published first, so that no node sees the build
	// ready before the index has its image).
	publishTemplate(ctx context.Context, templateID string, ready *readyBuild)
	// forgetTemplate frees a deleted template's name.
	forgetTemplate(ctx context.Context, t sandpit.Template) error
	// recordBuild records that this node runs a build.
	recordBuild(ctx context.Context, buildID, templateID string) error
	// sharedTemplate finds a template of the owner in the index by name or
	// id.
	sharedTemplate(owner, ref string) (cluster.TemplateRecord, bool)
	// sharedTemplates lists the owner's templates in the index ("" =
	// everyone's).
	sharedTemplates(owner string) []cluster.TemplateRecord
	// buildNode is the node that runs a build ("" = unknown, or this one).
	buildNode(ctx context.Context, buildID string) string
	// catchUp waits until this node's copy of the index holds everything
	// committed before it was called (a read barrier).
	catchUp(ctx context.Context) error
}

// singleNode is a daemon on its own: its store alone decides names.
type singleNode struct{}

func (singleNode) clustered() bool { return false }

func (singleNode) claimTemplate(_ context.Context, t sandpit.Template) (string, error) {
	return t.ID, nil
}
func (singleNode) publishTemplate(context.Context, string, *readyBuild)   {}
func (singleNode) forgetTemplate(context.Context, sandpit.Template) error { return nil }
func (singleNode) recordBuild(context.Context, string, string) error      { return nil }
func (singleNode) sharedTemplate(string, string) (cluster.TemplateRecord, bool) {
	return cluster.TemplateRecord{}, false
}
func (singleNode) sharedTemplates(string) []cluster.TemplateRecord { return nil }
func (singleNode) buildNode(context.Context, string) string        { return "" }
func (singleNode) catchUp(context.Context) error                   { return nil }

// replicated is a node of a cluster: r is the replicated index, s the
// node's template aggregate.
type replicated struct {
	s *Service
	r *cluster.Replica
}

func (*replicated) clustered() bool { return true }

func (c *replicated) claimTemplate(ctx context.Context, t sandpit.Template) (string, error) {
	rec, err := c.r.ClaimTemplate(ctx, cluster.TemplateRecord{ID: t.ID, Owner: t.Owner, Name: t.Name, CPU: t.CPU, MemoryMB: t.MemoryMB})
	if err != nil {
		return "", err
	}
	// A row of this name under another id is what a template deleted on
	// another node left here: the name now belongs to rec.
	if old, err := c.s.store.GetTemplateByName(ctx, t.Owner, t.Name); err == nil && old.ID != rec.ID {
		c.s.log.Info("cluster: dropping a template row whose name another template holds", "template", old.ID, "name", t.Name)
		if err := c.s.store.DeleteTemplate(ctx, old.ID); err != nil {
			return "", err
		}
	}
	return rec.ID, nil
}

// readyBuild is a build that ends ready: its image and the definition
// whose defaults and commands it sets on its template.
type readyBuild struct {
	image string
	def   BuildDefinition
}

func (c *replicated) publishTemplate(ctx context.Context, templateID string, ready *readyBuild) {
	s := c.s
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	t, err := s.store.GetTemplate(ctx, templateID)
	if err != nil || t.Name == "" {
		return
	}
	if ready != nil {
		// What FinishBuild is about to set on the row.
		d := ready.def
		t.Image, t.StartCmd, t.ReadyCmd, t.User, t.Workdir, t.CPU, t.MemoryMB = ready.image, d.StartCmd, d.ReadyCmd, d.User, d.Workdir, d.CPU, d.MemoryMB
	}
	if t.Image == "" {
		return
	}
	rec := cluster.TemplateRecord{ID: t.ID, Owner: t.Owner, Name: t.Name, Image: t.Image, CPU: t.CPU, MemoryMB: t.MemoryMB,
		StartCmd: t.StartCmd, ReadyCmd: t.ReadyCmd, User: t.User, Workdir: t.Workdir, Tags: map[string]string{}, ImageNodes: map[string]string{}}
	tags, err := s.store.ListTags(ctx, t.ID)
	if err != nil {
		s.log.Error("cluster: publish template", "template", t.ID, "err", err)
		return
	}
	for _, tg := range tags {
		b, err := s.store.GetBuild(ctx, tg.BuildID)
		if err != nil {
			continue
		}
		if b.Image == "" && ready != nil && !b.State.Done() {
			// A member of the run that is ending: tagged just now, its
			// row ends after this publish.
			b.Image = ready.image
		}
		if b.Image != "" {
			rec.Tags[tg.Tag] = b.Image
			rec.ImageNodes[b.Image] = s.cfg.NodeName
		}
	}

	if err := c.r.PublishTemplate(ctx, rec); err != nil {
		s.log.Error("cluster: publish template", "template", t.ID, "err", err)
	}
}

func (c *replicated) forgetTemplate(ctx context.Context, t sandpit.Template) error {
	if t.Name == "" {
		return nil
	}
	return c.r.DeleteTemplate(ctx, t.ID, t.Owner, t.Name)
}

func (c *replicated) recordBuild(ctx context.Context, buildID, templateID string) error {
	return c.r.RecordBuild(ctx, buildID, templateID)
}

func (c *replicated) sharedTemplate(owner, ref string) (cluster.TemplateRecord, bool) {
	if t, ok := c.r.FSM().Template(owner, ref); ok {
		return t, true
	}
	if t, ok := c.r.FSM().TemplateByID(ref); ok && (owner == "" || t.Owner == owner) {
		return t, true
	}
	return cluster.TemplateRecord{}, false
}

func (c *replicated) sharedTemplates(owner string) []cluster.TemplateRecord {
	return c.r.FSM().Templates(owner)
}

func (c *replicated) buildNode(ctx context.Context, buildID string) string {
	n, ok := c.r.FSM().BuildNode(buildID)
	if !ok {
		if _, err := c.s.store.GetBuild(ctx, buildID); err == nil {
			return ""
		}
		// A build another node started a moment ago may not have reached
		// this node's copy of the index yet.
		if c.catchUp(ctx) == nil {
			n, ok = c.r.FSM().BuildNode(buildID)
		}
	}
	if !ok || n == c.s.cfg.NodeName {
		return ""
	}
	return n
}

func (c *replicated) catchUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.r.CatchUp(ctx)
}

// sharedTemplate finds a template the caller may see in the cluster's
// index (admins: anyone's).
func (s *Service) sharedTemplate(ctx context.Context, ref string) (cluster.TemplateRecord, bool) {
	owner := ""
	if p := identity.Of(ctx); !p.Admin {
		owner = p.Owner
	}
	if rec, ok := s.cluster.sharedTemplate(identity.OwnerOf(ctx), ref); ok {
		return rec, true
	}
	if owner == "" {
		return s.cluster.sharedTemplate("", ref)
	}
	return cluster.TemplateRecord{}, false
}

// freshSharedTemplate is sharedTemplate after this node's copy of the
// index caught up with the log, when it lacks the template or the
// template's image: a template made, or a build ended, on another node a
// moment ago, whose entry this node may not have applied yet, is found.
func (s *Service) freshSharedTemplate(ctx context.Context, ref string) (cluster.TemplateRecord, bool) {
	rec, ok := s.sharedTemplate(ctx, ref)
	if (!ok || rec.Image == "") && s.cluster.clustered() && s.cluster.catchUp(ctx) == nil {
		return s.sharedTemplate(ctx, ref)
	}
	return rec, ok
}

// inCluster reports whether a template of this node's store is still the
// cluster's: every named template of a cluster node is in the index, so one
// that is not there (after this node caught up) was deleted through
// another node, and its row here is what a build on this node left.
func (s *Service) inCluster(ctx context.Context, t sandpit.Template) bool {
	if !s.cluster.clustered() || t.Name == "" {
		return true
	}
	rec, ok := s.cluster.sharedTemplate(t.Owner, t.Name)
	if !ok || rec.ID != t.ID {
		if s.cluster.catchUp(ctx) != nil {
			// No leader to ask: the row stands.
			return true
		}
		rec, ok = s.cluster.sharedTemplate(t.Owner, t.Name)
	}
	return ok && rec.ID == t.ID
}

func recordTemplate(r cluster.TemplateRecord) sandpit.Template {
	return sandpit.Template{ID: r.ID, Owner: r.Owner, Name: r.Name, Image: r.Image, CPU: r.CPU, MemoryMB: r.MemoryMB,
		StartCmd: r.StartCmd, ReadyCmd: r.ReadyCmd, User: r.User, Workdir: r.Workdir, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// BuildNode names the node that runs a build, when it is another node of
// the cluster: the build's state and log are there. "" means this node.
func (s *Service) BuildNode(ctx context.Context, buildID string) string {
	return s.cluster.buildNode(ctx, buildID)
}

// TemplateNodes returns, for a create from the caller's template ref, the
// nodes that have its image when only they can run it: a cluster without a
// registry, where an image stays on the engine that built it. nil means any
// node can (a registry, the daemon's own templates, no such template).
func (s *Service) TemplateNodes(ctx context.Context, ref string) []string {
	if s.cfg.Registry != "" || ref == "" {
		return nil
	}
	name, tag, tagged := strings.Cut(ref, ":")
	if _, ok := s.cfg.DaemonTemplates[name]; ok {
		return nil
	}
	rec, ok := s.sharedTemplate(ctx, name)
	if !ok {
		return nil
	}
	image := (sharedRecord{rec}).imageOf(tag, tagged)
	if image == "" && s.cluster.catchUp(ctx) == nil {
		// A build that ended on another node a moment ago.
		if rec, ok = s.sharedTemplate(ctx, name); !ok {
			return nil
		}
		image = (sharedRecord{rec}).imageOf(tag, tagged)
	}
	if n := rec.ImageNodes[image]; n != "" {
		return []string{n}
	}
	if rec.Node != "" && image != "" {
		return []string{rec.Node}
	}
	return nil
}

// resolveShared is resolveOwnedTemplate for a template found in the
// cluster's index.
func (s *Service) resolveShared(ctx context.Context, rec cluster.TemplateRecord, ref, tag string, tagged bool) (Resolved, bool, error) {
	if (sharedRecord{rec}).imageOf(tag, tagged) == "" && s.cluster.catchUp(ctx) == nil {
		// A build that ended on another node a moment ago.
		if again, ok := s.sharedTemplate(ctx, rec.Name); ok && again.ID == rec.ID {
			rec = again
		}
	}
	image := rec.Image
	if tagged && tag != "" {
		if img, ok := rec.Tags[tag]; ok {
			image = img
		} else if tag != "default" {
			return Resolved{}, true, fmt.Errorf("%w: %q has no tag %q", sandpit.ErrUnknownTemplate, rec.Name, tag)
		}
	}
	if image == "" {
		return Resolved{}, true, fmt.Errorf("%w: %q has no ready build yet", sandpit.ErrUnknownTemplate, ref)
	}
	if ok, err := s.ensureImage(ctx, image, io.Discard); err != nil || !ok {
		return Resolved{}, true, fmt.Errorf("%w: the image of template %q is not on this node (it was built on %s; without --registry only that node runs it): %v", sandpit.ErrUnknownImage, ref, rec.ImageNodes[image], err)
	}
	return Resolved{Template: recordTemplate(rec), Image: image}, true, nil
}

// sharedRecord reads a template record's image for a tag.
type sharedRecord struct{ cluster.TemplateRecord }

// imageOf is the image a create of the template (with tag, when tagged)
// runs; "" when there is none yet.
func (r sharedRecord) imageOf(tag string, tagged bool) string {
	if tagged && tag != "" {
		if img, ok := r.Tags[tag]; ok {
			return img
		}
		if tag != "default" {
			return ""
		}
	}
	return r.Image
}

// imageShared reports whether a template of the cluster's index runs image
// (one built on another node, on an engine or registry this node shares).
func (s *Service) imageShared(image string) bool {
	for _, rec := range s.cluster.sharedTemplates("") {
		if rec.Image == image {
			return true
		}
		for _, img := range rec.Tags {
			if img == image {
				return true
			}
		}
	}
	return false
}

// tagTemplates lists the templates a run's members tag.
func tagTemplates(tags map[string]memberTags) []string {
	var out []string
	for _, mt := range tags {
		out = append(out, mt.templateID)
	}
	return out
}
