package sandpit_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestInterpreterTemplateBuiltAfterStart: the daemon serves without the
// code interpreter's image (a build of minutes), says in the create how to
// get it, and serves the template once the image exists, with no restart.
// The image is a fresh tag of the test image, so that the shared
// interpreter image of the machine is never touched.
func TestInterpreterTemplateBuiltAfterStart(t *testing.T) {
	t.Parallel()
	ref := "sandpit-test/late-interpreter-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + ":" + time.Now().Format("150405.000000000")[7:]
	t.Cleanup(func() { _ = exec.Command("docker", "image", "rm", ref).Run() })
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--interpreter-image", ref}})
	ctx := ctxFor(t, 2*time.Minute)
	c := d.Client()
	_, err := c.Create(ctx, client.CreateRequest{Template: "code-interpreter-v1"})
	if !client.IsCode(err, apitypes.CodeUnknownTemplate) || !strings.Contains(err.Error(), "no restart needed") {
		t.Fatalf("create before the image exists: %v; want unknown_template saying how to get it", err)
	}
	if !strings.Contains(d.Logs(), "served once it is") {
		t.Errorf("the daemon's log does not say the template comes later")
	}
	awaited := "template  code-interpreter-v1: image " + ref + " not built yet"
	if out, errOut, code := runCLI(t, ctx, d, nil, "status"); code != 0 || !strings.Contains(out, awaited) {
		t.Errorf("status before the image exists: %d %q %q; want %q", code, out, errOut, awaited)
	}
	if out, err := exec.Command("docker", "tag", testBase, ref).CombinedOutput(); err != nil {
		t.Fatalf("docker tag: %v %s", err, out)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		sb, err := c.Create(ctx, client.CreateRequest{Template: "code-interpreter-v1"})
		if err == nil {
			if sb.Image != ref {
				t.Fatalf("created from image %s, want %s", sb.Image, ref)
			}
			break
		}
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != apitypes.CodeUnknownTemplate || time.Now().After(deadline) {
			t.Fatalf("create after the image was built: %v", err)
		}
	}
	if !strings.Contains(d.Logs(), "template available: its image was built") {
		t.Errorf("the daemon's log does not say the template became available")
	}
	if out, _, _ := runCLI(t, ctx, d, nil, "status"); strings.Contains(out, "not built yet") {
		t.Errorf("status once the image exists still awaits it:\n%s", out)
	}
}
