package cluster

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

func TestFSMTemplates(t *testing.T) {
	f := NewFSM()
	tpl := func(id string) *TemplateRecord { return &TemplateRecord{ID: id, Owner: "alice", Name: "py"} }
	res := applyAll(t, f,
		command{Op: opClaimTemplate, At: t0, Node: "n1", Template: tpl("tpl1")},
		// A claim of the same name by the same owner from another node lands
		// on the first template.
		command{Op: opClaimTemplate, At: t0, Node: "n2", Template: tpl("tpl2")},
		// Another owner's name is its own.
		command{Op: opClaimTemplate, At: t0, Node: "n2", Template: &TemplateRecord{ID: "tpl3", Owner: "bob", Name: "py"}},
		command{Op: opRecordBuild, At: t0, Node: "n2", SandboxID: "bld1", Template: tpl("tpl1")},
		command{Op: opPublishTemplate, At: t0, Node: "n2", Template: &TemplateRecord{ID: "tpl1", Owner: "alice", Name: "py", Image: "img:1", StartCmd: "run", Tags: map[string]string{"v1": "img:1"}}},
		// A build of a template that lost its name publishes nothing.
		command{Op: opPublishTemplate, At: t0, Node: "n1", Template: &TemplateRecord{ID: "tpl2", Owner: "alice", Name: "py", Image: "img:2"}},
	)
	for i, want := range []string{"tpl1", "tpl1", "tpl3"} {
		if res[i].Err != nil || res[i].Template == nil || res[i].Template.ID != want {
			t.Fatalf("claim %d: %+v, want %s", i, res[i], want)
		}
	}
	if res[3].Err != nil || res[4].Err != nil || !errors.Is(res[5].Err, sandpit.ErrNotFound) {
		t.Fatalf("record/publish: %v %v %v", res[3].Err, res[4].Err, res[5].Err)
	}
	got, ok := f.Template("alice", "py")
	if !ok || got.Image != "img:1" || got.Node != "n2" || got.StartCmd != "run" || got.Tags["v1"] != "img:1" || got.ImageNodes["img:1"] != "n2" || !got.CreatedAt.Equal(t0) {
		t.Fatalf("record after publish: %+v", got)
	}
	if n, ok := f.BuildNode("bld1"); !ok || n != "n2" {
		t.Fatalf("build node: %q %v", n, ok)
	}
	if ts := f.Templates("alice"); len(ts) != 1 {
		t.Fatalf("alice's templates: %+v", ts)
	}
	// A snapshot carries the templates.
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if rt, ok := g.Template("alice", "py"); g.Digest() != f.Digest() || !ok || rt.Image != "img:1" {
		t.Fatal("the restored index lost the templates")
	}
	applyAll(t, f, command{Op: opDeleteTemplate, At: t0, Template: tpl("tpl1")})
	if _, ok := f.Template("alice", "py"); ok {
		t.Fatal("deleted template still named")
	}
	if _, ok := f.BuildNode("bld1"); ok {
		t.Fatal("deleted template's build still recorded")
	}
	res = applyAll(t, f, command{Op: opClaimTemplate, At: t0, Node: "n3", Template: tpl("tpl4")})
	if res[0].Template == nil || res[0].Template.ID != "tpl4" {
		t.Fatalf("claim after delete: %+v", res[0])
	}
}
