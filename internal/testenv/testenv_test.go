package testenv_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

func TestModuleRoot(t *testing.T) {
	root := testenv.ModuleRoot(t)
	if _, err := os.Stat(filepath.Join(root, "scripts", "build-test-image.sh")); err != nil {
		t.Fatal(err)
	}
}

func TestImageAndCleanup(t *testing.T) {
	img := testenv.TestImage(t)
	if img2 := testenv.TestImage(t); img2 != img {
		t.Fatalf("%q then %q", img, img2)
	}
	run := testenv.RunLabel(t)
	if run[driver.LabelRun] == "" || testenv.RunLabel(t)[driver.LabelRun] == run[driver.LabelRun] {
		t.Fatalf("run labels not unique: %v", run)
	}

	ctx := context.Background()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for range 2 {
		c, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"sleep", "60"}, Labels: run}, nil, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	filter := filters.NewArgs(filters.Arg("label", driver.LabelRun+"="+run[driver.LabelRun]))
	count := func() int {
		list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filter})
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d containers, want 2", n)
	}
	testenv.CleanupRun(t, run[driver.LabelRun])
	if n := count(); n != 0 {
		t.Fatalf("%d containers left after CleanupRun", n)
	}
}
