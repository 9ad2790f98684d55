package docker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/driver"
)

var _ driver.Images = (*Docker)(nil)

// Build runs a build with the engine's classic builder, which every engine
// version offers without a BuildKit session: the context is streamed as
// the request body. Intermediate containers are removed whether or not the
// build succeeds, and the tag is applied by the engine only at the end of a
// successful build.
func (d *Docker) Build(ctx context.Context, spec driver.BuildSpec, logs io.Writer) (string, error) {
	cacheFrom := spec.CacheFrom
	if len(cacheFrom) == 0 {
		// With no source the classic builder would reuse any image on
		// the engine; a name that resolves to nothing makes it reuse none.
		cacheFrom = []string{noCacheSource}
	}
	opts := build.ImageBuildOptions{
		Dockerfile:  spec.Dockerfile,
		Labels:      spec.Labels,
		NoCache:     spec.NoCache,
		CacheFrom:   cacheFrom,
		Remove:      true,
		ForceRemove: true,
		Version:     build.BuilderV1,
	}
	l := spec.Limits
	if l.MemoryMB > 0 {
		opts.Memory = l.MemoryMB << 20
		opts.MemorySwap = opts.Memory // no swap beyond the memory, as in a sandbox
	}
	if l.CPU > 0 {
		opts.CPUPeriod = cpuPeriod
		opts.CPUQuota = int64(l.CPU * cpuPeriod)
	}
	if l.Isolated {
		opts.NetworkMode = d.network
	}
	if l.PidsLimit > 0 {
		// The classic builder takes no pids limit, but it puts every
		// step's container under the cgroup parent it is given: a parent
		// of the build's own whose pids.max bounds the steps together.
		parent, cleanup, err := makeBuildCgroup(l.PidsLimit)
		if err != nil {
			return "", fmt.Errorf("build %s: %w", spec.Tag, err)
		}
		defer cleanup()
		opts.CgroupParent = parent
	}
	if spec.Tag != "" {
		opts.Tags = []string{spec.Tag}
	}
	resp, err := d.cli.ImageBuild(ctx, spec.Context, opts)
	if err != nil {
		return "", fmt.Errorf("build %s: %w", spec.Tag, err)
	}
	defer resp.Body.Close()
	var id string
	// steps are the images the build's steps made; a FROM step's image is
	// its base, which is not the build's to remove.
	var steps []string
	base := false
	err = decodeStream(resp.Body, logs, func(m jsonmessage.JSONMessage) {
		if fromStep.MatchString(m.Stream) {
			base = true
		} else if s := stepImage.FindStringSubmatch(m.Stream); s != nil {
			if !base {
				steps = append(steps, s[1])
			}
			base = false
		}
		if m.Aux == nil {
			return
		}
		var aux struct{ ID string }
		if json.Unmarshal(*m.Aux, &aux) == nil && aux.ID != "" {
			id = aux.ID
		}
	})
	// What the build made and no image keeps goes now, on success and on
	// failure alike (see removeStepImages).
	defer func() { d.removeStepImages(context.WithoutCancel(ctx), steps, id) }()
	if err != nil {
		return "", err
	}
	if id == "" && spec.Tag != "" {
		// Old engines report the id only as a "Successfully built" line.
		img, _, ierr := d.cli.ImageInspectWithRaw(ctx, spec.Tag)
		if ierr != nil {
			return "", fmt.Errorf("build %s: inspect result: %w", spec.Tag, ierr)
		}
		id = img.ID
	}
	return id, nil
}

// fromStep matches the classic builder's line starting a FROM step.
var fromStep = regexp.MustCompile(`(?i)^Step \d+/\d+ : FROM\s`)

// stepImage matches the classic builder's line naming the image a step
// ended with (" ---> 3f2a9c1b7d6e").
var stepImage = regexp.MustCompile(`^ ---> ([0-9a-f]{12,64})\s*$`)

// removeStepImages removes the images a build's steps left that nothing
// keeps: those of a build that failed, and the stages a multi-stage build
// did not end with. Nothing else would ever remove them (no tag names them,
// and with the build's cache restricted to its owner's images they are
// never reused), so a tenant whose builds fail would fill the engine's disk
// one layer at a time. The newest go first, each with the untagged parents
// only it held; an image that is tagged, or that another image builds on
// (the final image's own chain, a layer another build shares), is left, as
// the engine refuses to remove it without force.
func (d *Docker) removeStepImages(ctx context.Context, steps []string, final string) {
	for i := len(steps) - 1; i >= 0; i-- {
		img, _, err := d.cli.ImageInspectWithRaw(ctx, steps[i])
		if err != nil || img.ID == final || len(img.RepoTags) > 0 || len(img.RepoDigests) > 0 {
			continue
		}
		if _, err := d.cli.ImageRemove(ctx, img.ID, image.RemoveOptions{PruneChildren: true}); err != nil && !errdefs.IsConflict(err) && !errdefs.IsNotFound(err) {
			d.log.Debug("build: a step's image was not removed", "image", img.ID, "err", err)
		}
	}
}

// noCacheSource is a cache source that names no image (see Build).
const noCacheSource = "sandpit-no-cache-source/none:none"

// decodeStream copies an engine progress stream to logs and turns an error
// message in it into an error wrapping ErrBuildFailed (not copied to logs). A stream that breaks
// off (the engine went away, the context ended) is a plain error.
func decodeStream(r io.Reader, logs io.Writer, aux func(jsonmessage.JSONMessage)) error {
	dec := json.NewDecoder(r)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read engine stream: %w", err)
		}
		if m.Error != nil {
			// The message goes into the error only: the build's log gets
			// it once, as the error entry its caller adds.
			msg := strings.TrimSpace(m.Error.Message)
			if imageVanished(msg) {
				return fmt.Errorf("%w: %s (%w)", driver.ErrBuildFailed, msg, driver.ErrBuildImageVanished)
			}
			return fmt.Errorf("%w: %s", driver.ErrBuildFailed, msg)
		}
		if aux != nil {
			aux(m)
		}
		if logs == nil {
			continue
		}
		switch {
		case m.Stream != "":
			io.WriteString(logs, m.Stream)
		case m.Status != "" && m.Progress == nil:
			// Pull and push progress bars would flood the log; their
			// status lines (one per layer and phase) are enough.
			line := m.Status
			if m.ID != "" {
				line = m.ID + ": " + line
			}
			fmt.Fprintln(logs, line)
		}
	}
}

// imageVanished reports whether a build's error says that an image it
// named by id is gone. The builder names images by id only for the ones it
// resolved itself (a base it looked up, a cached step): a missing base
// image by name is the user's mistake and reads differently.
func imageVanished(msg string) bool {
	for _, prefix := range []string{`unable to find image "sha256:`, "No such image: sha256:"} {
		if strings.Contains(msg, prefix) {
			return true
		}
	}
	return false
}

// ListImages lists the images carrying every one of labels.
func (d *Docker) ListImages(ctx context.Context, labels map[string]string) ([]driver.Image, error) {
	f := filters.NewArgs()
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	list, err := d.cli.ImageList(ctx, image.ListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	out := make([]driver.Image, 0, len(list))
	for _, img := range list {
		var tags []string
		for _, t := range img.RepoTags {
			if t != "<none>:<none>" {
				tags = append(tags, t)
			}
		}
		out = append(out, driver.Image{ID: img.ID, Tags: tags, Labels: img.Labels})
	}
	return out, nil
}

// RemoveImage removes ref; its layers go when no other tag holds them.
func (d *Docker) RemoveImage(ctx context.Context, ref string) error {
	_, err := d.cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true})
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove image %s: %w", ref, err)
	}
	return nil
}

// Push sends ref to its registry. The registries templates use are the
// operator's (--registry), reached without credentials.
func (d *Docker) Push(ctx context.Context, ref string, logs io.Writer) error {
	rc, err := d.cli.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: emptyAuth()})
	if err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	defer rc.Close()
	if err := decodeStream(rc, logs, nil); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// Pull fetches ref from its registry.
func (d *Docker) Pull(ctx context.Context, ref string, logs io.Writer) error {
	rc, err := d.cli.ImagePull(ctx, ref, image.PullOptions{RegistryAuth: emptyAuth()})
	if err != nil {
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("pull %s: %w", ref, driver.ErrImageNotFound)
		}
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	defer rc.Close()
	if err := decodeStream(rc, logs, nil); err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	return nil
}

func emptyAuth() string {
	b, _ := json.Marshal(registry.AuthConfig{})
	return base64.URLEncoding.EncodeToString(b)
}

// Commit commits the container's filesystem as ref. The engine would copy
// the container's labels and environment into the image, and so into every
// container made from it: sandpit's own labels (its sandbox id, pool slot,
// run) are blanked, and the agent's token is emptied, so a sandbox made from
// the snapshot is labelled and authenticated as itself alone.
func (d *Docker) Commit(ctx context.Context, containerID, ref string, labels map[string]string) (string, error) {
	c, err := d.cli.ContainerInspect(ctx, containerID)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return "", fmt.Errorf("commit %s: %w", containerID, driver.ErrNotFound)
		}
		return "", fmt.Errorf("commit %s: %w", containerID, err)
	}
	cfg := &container.Config{Labels: map[string]string{}}
	if c.Config != nil {
		for k := range c.Config.Labels {
			if strings.HasPrefix(k, "sandpit.") {
				cfg.Labels[k] = ""
			}
		}
		for _, kv := range c.Config.Env {
			if k, _, _ := strings.Cut(kv, "="); k == agentapi.TokenEnv {
				kv = k + "="
			}
			cfg.Env = append(cfg.Env, kv)
		}
	}
	for k, v := range labels {
		cfg.Labels[k] = v
	}
	resp, err := d.cli.ContainerCommit(ctx, containerID, container.CommitOptions{Reference: ref, Pause: true, Config: cfg})
	if err != nil {
		return "", fmt.Errorf("commit %s as %s: %w", containerID, ref, err)
	}
	return resp.ID, nil
}
