package cluster

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// Templates are per node in each node's SQLite store, but their names must be
// unique per owner across the cluster, and a create on any node must find
// the caller's template. The index therefore holds one record per named
// template: claimed when the name is first ensured (the first committed
// claim wins and every later one, on any node, lands on its id), and
// completed with what a create needs (image, defaults, commands, tags) when
// a build of it becomes ready. Builds are recorded too, with the node that
// runs them, so that a build's status and log are served where they are.

// TemplateRecord is one named template as the cluster knows it.
type TemplateRecord struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	Name  string `json:"name"`
	// Node is the node whose build made Image (the node that claimed the
	// name until a build is ready). Without a registry only it has the image.
	Node     string  `json:"node"`
	Image    string  `json:"image,omitempty"`
	CPU      float64 `json:"cpu,omitempty"`
	MemoryMB int64   `json:"memory_mb,omitempty"`
	StartCmd string  `json:"start_cmd,omitempty"`
	ReadyCmd string  `json:"ready_cmd,omitempty"`
	User     string  `json:"user,omitempty"`
	Workdir  string  `json:"workdir,omitempty"`
	// Tags maps each tag to the image of the build it points at.
	Tags map[string]string `json:"tags,omitempty"`
	// ImageNodes maps each image of the template to the node that built it.
	ImageNodes map[string]string `json:"image_nodes,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	UpdatedAt  time.Time         `json:"updated_at"`
}

func (t *TemplateRecord) clone() TemplateRecord {
	c := *t
	c.Tags = maps.Clone(t.Tags)
	c.ImageNodes = maps.Clone(t.ImageNodes)
	return c
}

// BuildRecord says which node runs (ran) a build of a template.
type BuildRecord struct {
	Template string `json:"template"` // template id
	Node     string `json:"node"`
}

func templateKey(owner, name string) string { return owner + "\x00" + name }

// Operations of templates.
const (
	opClaimTemplate   = "claim_template"
	opPublishTemplate = "publish_template"
	opDeleteTemplate  = "delete_template"
	opRecordBuild     = "record_build"
)

func (x *Index) applyTemplate(c command) Result {
	switch c.Op {
	case opClaimTemplate:
		t := c.Template
		if t == nil || t.ID == "" || t.Name == "" {
			return Result{Err: ErrInvalidCommand}
		}
		k := templateKey(t.Owner, t.Name)
		if cur, ok := x.Templates[k]; ok {
			// The name is taken: the claim lands on the template that took
			// it, whichever node asks.
			out := cur.clone()
			return Result{Template: &out}
		}
		rec := &TemplateRecord{ID: t.ID, Owner: t.Owner, Name: t.Name, Node: c.Node, CPU: t.CPU, MemoryMB: t.MemoryMB, CreatedAt: c.At, UpdatedAt: c.At}
		x.Templates[k] = rec
		out := rec.clone()
		return Result{Template: &out}
	case opPublishTemplate:
		t := c.Template
		if t == nil {
			return Result{Err: ErrInvalidCommand}
		}
		cur, ok := x.Templates[templateKey(t.Owner, t.Name)]
		if !ok || cur.ID != t.ID {
			// Deleted (or taken by another template) meanwhile: a build
			// that ends after its template's delete publishes nothing.
			return Result{Err: fmt.Errorf("publish template %s: %w", t.ID, sandpit.ErrNotFound)}
		}
		created := cur.CreatedAt
		images := maps.Clone(cur.ImageNodes)
		if images == nil {
			images = map[string]string{}
		}
		maps.Copy(images, t.ImageNodes)
		*cur = t.clone()
		cur.Node, cur.CreatedAt, cur.UpdatedAt, cur.ImageNodes = c.Node, created, c.At, images
		if cur.Image != "" {
			cur.ImageNodes[cur.Image] = c.Node
		}
		return Result{}
	case opDeleteTemplate:
		t := c.Template
		if t == nil {
			return Result{Err: ErrInvalidCommand}
		}
		k := templateKey(t.Owner, t.Name)
		if cur, ok := x.Templates[k]; ok && cur.ID == t.ID {
			delete(x.Templates, k)
		}
		for id, b := range x.Builds {
			if b.Template == t.ID {
				delete(x.Builds, id)
			}
		}
		return Result{}
	case opRecordBuild:
		if c.SandboxID == "" || c.Template == nil {
			return Result{Err: ErrInvalidCommand}
		}
		if _, ok := x.Builds[c.SandboxID]; !ok {
			x.Builds[c.SandboxID] = &BuildRecord{Template: c.Template.ID, Node: c.Node}
		}
		return Result{}
	}
	return Result{Err: fmt.Errorf("%w: unknown op %q", ErrInvalidCommand, c.Op)}
}

// ClaimTemplate takes the name of t for its owner cluster-wide, or finds
// the template that holds it: the record returned is the one whose id
// every node uses for that name.
func (r *Replica) ClaimTemplate(ctx context.Context, t TemplateRecord) (TemplateRecord, error) {
	res, err := r.propose(ctx, command{Op: opClaimTemplate, Template: &t})
	if err != nil {
		return TemplateRecord{}, err
	}
	if res.Err != nil {
		return TemplateRecord{}, res.Err
	}
	if res.Template == nil {
		return TemplateRecord{}, ErrInvalidCommand
	}
	return *res.Template, nil
}

// PublishTemplate records what a create needs of a template after a build
// of it became ready on this node; sandpit.ErrNotFound when the template's
// name is no longer its own (it was deleted).
func (r *Replica) PublishTemplate(ctx context.Context, t TemplateRecord) error {
	return r.do(ctx, command{Op: opPublishTemplate, Template: &t})
}

// DeleteTemplate frees a template's name and forgets its builds.
func (r *Replica) DeleteTemplate(ctx context.Context, id, owner, name string) error {
	return r.do(ctx, command{Op: opDeleteTemplate, Template: &TemplateRecord{ID: id, Owner: owner, Name: name}})
}

// RecordBuild records that this node runs a build of a template.
func (r *Replica) RecordBuild(ctx context.Context, buildID, templateID string) error {
	return r.do(ctx, command{Op: opRecordBuild, SandboxID: buildID, Template: &TemplateRecord{ID: templateID}})
}

// Template returns the owner's template of a name.
func (f *FSM) Template(owner, name string) (TemplateRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t, ok := f.idx.Templates[templateKey(owner, name)]
	if !ok {
		return TemplateRecord{}, false
	}
	return t.clone(), true
}

// TemplateByID returns the template with an id.
func (f *FSM) TemplateByID(id string) (TemplateRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, t := range f.idx.Templates {
		if t.ID == id {
			return t.clone(), true
		}
	}
	return TemplateRecord{}, false
}

// Templates lists the owner's templates ("" = everyone's).
func (f *FSM) Templates(owner string) []TemplateRecord {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []TemplateRecord
	for _, t := range f.idx.Templates {
		if owner == "" || t.Owner == owner {
			out = append(out, t.clone())
		}
	}
	return out
}

// BuildNode returns the node that runs (ran) a build.
func (f *FSM) BuildNode(buildID string) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, ok := f.idx.Builds[buildID]
	if !ok {
		return "", false
	}
	return b.Node, true
}
