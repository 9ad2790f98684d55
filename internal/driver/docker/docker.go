// Package docker implements driver.Driver on a Docker Engine through the
// official Go client, negotiating the API version so that old engines
// (Debian's docker.io 20.10, API 1.41) work.
//
// Every sandbox is one container named "sandpit-<sandbox id>" whose PID 1 is
// the sandpit executable itself ("sandpit agent"), bind-mounted read-only from
// the host at AgentPath. Containers run untrusted code, so they are never
// privileged, keep Docker's default seccomp profile, get a pids limit and a
// reduced capability set, and no-new-privileges unless they have a default
// user (see Spec.AgentUser) who may need sudo.
package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs" // same checks as containerd/errdefs, which go.mod only has as indirect
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/driver"
)

const (
	// AgentPath is where the agent executable is mounted inside a container.
	AgentPath = "/.sandpit/sandpit"
	// NamePrefix prefixes the sandbox id in container names.
	NamePrefix = "sandpit-"
	// DefaultNetwork is the engine network containers join unless told otherwise.
	DefaultNetwork = "bridge"
	// DefaultPidsLimit applies when Spec.PidsLimit is 0.
	DefaultPidsLimit = 1024
)

// droppedCaps are removed from Docker's default capability set. What stays
// (CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP,
// NET_BIND_SERVICE) is enough for a root shell, package managers and the agent
// switching to another user; what goes is raw sockets, device nodes, chroot,
// audit and file capabilities. SYS_PTRACE is not in Docker's default set;
// it is dropped by name so that no engine default can give it back: without
// it root in the sandbox cannot attach to the agent, which makes itself
// non-dumpable.
var droppedCaps = []string{"NET_RAW", "MKNOD", "SYS_CHROOT", "AUDIT_WRITE", "SETFCAP", "SYS_PTRACE"}

// Options configures New.
type Options struct {
	// Logger receives debug and warning messages; nil discards them.
	Logger *slog.Logger
	// Network is the engine network sandboxes join and whose address Inspect
	// reports; "" means DefaultNetwork.
	Network string
}

// Docker is a driver.Driver backed by a Docker Engine.
type Docker struct {
	cli     *client.Client
	log     *slog.Logger
	network string
}

var _ driver.Driver = (*Docker)(nil)

// New connects to the engine named by the environment (DOCKER_HOST, ...,
// default the local socket), negotiates the API version and checks that the
// engine answers.
func New(ctx context.Context, opts Options) (*Docker, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker engine at %s: %w", cli.DaemonHost(), err)
	}
	cli.NegotiateAPIVersion(ctx)
	d := &Docker{cli: cli, log: opts.Logger, network: opts.Network}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.network == "" {
		d.network = DefaultNetwork
	}
	if n := sweepBuildCgroups(); n > 0 {
		d.log.Info("removed the cgroups of builds whose daemon died", "count", n)
	}
	d.log.Debug("docker runtime ready", "host", cli.DaemonHost(), "api", cli.ClientVersion(), "network", d.network)
	return d, nil
}

// Close releases the client's connections.
func (d *Docker) Close() error { return d.cli.Close() }

// Ping checks that the engine answers.
func (d *Docker) Ping(ctx context.Context) error {
	_, err := d.cli.Ping(ctx)
	return err
}

// HasImage reports whether the engine has the image ref locally.
func (d *Docker) HasImage(ctx context.Context, ref string) (bool, error) {
	_, _, err := d.cli.ImageInspectWithRaw(ctx, ref)
	switch {
	case err == nil:
		return true, nil
	case errdefs.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("inspect image %s: %w", ref, err)
	}
}

// ImageLabels returns the labels of ref's image configuration.
func (d *Docker) ImageLabels(ctx context.Context, ref string) (map[string]string, error) {
	img, _, err := d.cli.ImageInspectWithRaw(ctx, ref)
	switch {
	case errdefs.IsNotFound(err):
		return nil, fmt.Errorf("%w: %s", driver.ErrImageNotFound, ref)
	case err != nil:
		return nil, fmt.Errorf("inspect image %s: %w", ref, err)
	case img.Config == nil:
		return map[string]string{}, nil
	}
	return img.Config.Labels, nil
}

// ContainerName is the name of the container of a sandbox.
func ContainerName(sandboxID string) string { return NamePrefix + sandboxID }

// Create makes (does not start) the sandbox's container and returns its id.
func (d *Docker) Create(ctx context.Context, spec driver.Spec) (string, error) {
	cfg, hostCfg, err := d.configs(spec)
	if err != nil {
		return "", err
	}
	name := spec.Name
	if name == "" {
		name = ContainerName(spec.SandboxID)
	}
	if err := d.blankImageLabels(ctx, spec.Image, cfg.Labels); err != nil {
		return "", err
	}
	resp, err := d.cli.ContainerCreate(ctx, cfg, hostCfg, &network.NetworkingConfig{}, nil, name)
	if err != nil {
		if errdefs.IsNotFound(err) && strings.Contains(strings.ToLower(err.Error()), "image") {
			return "", fmt.Errorf("%w: %s", driver.ErrImageNotFound, spec.Image)
		}
		return "", fmt.Errorf("create container %s: %w", name, err)
	}
	for _, w := range resp.Warnings {
		d.log.Debug("docker create warning", "container", name, "warning", w)
	}
	d.log.Debug("container created", "container", name, "id", resp.ID, "image", spec.Image)
	return resp.ID, nil
}

// blankImageLabels keeps the daemon's labels the daemon's: the engine copies
// an image's labels into every container made from it, and an image is
// whatever its builder wrote (a tenant's LABEL sandpit.pool=... would make
// the janitor treat the sandbox as a pooled container). Every sandpit.*
// label of the image that labels does not set is set to "", which the
// daemon reads as absent.
func (d *Docker) blankImageLabels(ctx context.Context, ref string, labels map[string]string) error {
	img, _, err := d.cli.ImageInspectWithRaw(ctx, ref)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("%w: %s", driver.ErrImageNotFound, ref)
		}
		return fmt.Errorf("inspect image %s: %w", ref, err)
	}
	if img.Config == nil {
		return nil
	}
	for k := range img.Config.Labels {
		if _, ours := labels[k]; !ours && strings.HasPrefix(k, "sandpit.") {
			labels[k] = ""
		}
	}
	return nil
}

// configs turns a Spec into the engine's container and host configuration.
func (d *Docker) configs(spec driver.Spec) (*container.Config, *container.HostConfig, error) {
	switch {
	case spec.SandboxID == "":
		return nil, nil, errors.New("spec: empty sandbox id")
	case spec.Image == "":
		return nil, nil, errors.New("spec: empty image")
	case spec.AgentBinary == "" || !filepath.IsAbs(spec.AgentBinary):
		return nil, nil, fmt.Errorf("spec: agent binary %q is not an absolute path", spec.AgentBinary)
	case spec.CPU < 0 || math.IsNaN(spec.CPU) || math.IsInf(spec.CPU, 0):
		return nil, nil, fmt.Errorf("spec: invalid cpu %v", spec.CPU)
	case spec.MemoryMB < 0:
		return nil, nil, fmt.Errorf("spec: invalid memory %d MB", spec.MemoryMB)
	case spec.DiskMB < 0:
		return nil, nil, fmt.Errorf("spec: invalid disk size %d MB", spec.DiskMB)
	case spec.PidsLimit < 0:
		return nil, nil, fmt.Errorf("spec: invalid pids limit %d", spec.PidsLimit)
	}

	env := make([]string, 0, len(spec.Env)+1)
	for k, v := range spec.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
			return nil, nil, fmt.Errorf("spec: invalid environment variable %q", k)
		}
		if k == agentapi.TokenEnv || k == agentapi.UserEnv {
			continue
		}
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	env = append(env, agentapi.TokenEnv+"="+spec.AgentToken)
	if spec.AgentUser != "" {
		env = append(env, agentapi.UserEnv+"="+spec.AgentUser)
	}

	// The managed labels go last so that spec.Labels cannot override them.
	labels := make(map[string]string, len(spec.Labels)+2)
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[driver.LabelManaged] = "true"
	labels[driver.LabelSandboxID] = spec.SandboxID

	pids := spec.PidsLimit
	if pids == 0 {
		pids = DefaultPidsLimit
	}
	noInit := false

	cfg := &container.Config{
		Image:  spec.Image,
		Env:    env,
		Labels: labels,
		// The agent runs as root whatever USER the image names: it starts
		// processes (and creates files) as the user each request asks for,
		// or as the sandbox's default user.
		User:       "0:0",
		Entrypoint: []string{AgentPath},
		Cmd:        []string{"agent"},
		// WorkingDir stays empty: the image's, or "/" when it names none.
		Tty:          false,
		OpenStdin:    false,
		AttachStdin:  false,
		AttachStdout: false,
		AttachStderr: false,
	}
	hostCfg := &container.HostConfig{
		NetworkMode: container.NetworkMode(d.network),
		Mounts: []mount.Mount{{
			// A mount (unlike a bind string) fails when the source is missing
			// rather than creating an empty directory in its place.
			Type:     mount.TypeBind,
			Source:   spec.AgentBinary,
			Target:   AgentPath,
			ReadOnly: true,
		}},
		Privileged:    false,
		CapDrop:       append([]string(nil), droppedCaps...),
		Init:          &noInit, // the agent is PID 1 and reaps
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Resources: container.Resources{
			PidsLimit: &pids,
		},
	}
	if spec.CAFile != "" {
		if !filepath.IsAbs(spec.CAFile) {
			return nil, nil, fmt.Errorf("spec: CA file %q is not an absolute path", spec.CAFile)
		}
		hostCfg.Mounts = append(hostCfg.Mounts, mount.Mount{Type: mount.TypeBind, Source: spec.CAFile, Target: agentapi.CAPath, ReadOnly: true})
	}
	for _, m := range spec.Mounts {
		if m.Source == "" || !filepath.IsAbs(m.Target) {
			return nil, nil, fmt.Errorf("spec: mount %q at %q: need a volume name and an absolute path", m.Source, m.Target)
		}
		// A volume mount (not a bind) names an engine volume, so a
		// sandbox can never reach a host path through it.
		hostCfg.Mounts = append(hostCfg.Mounts, mount.Mount{Type: mount.TypeVolume, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	if spec.AgentUser == "" {
		// A sandbox whose processes run as an unprivileged user by default
		// goes without no-new-privileges: sudo, which E2B's images offer for
		// root's work, needs its setuid bit honoured, and root inside the
		// container is what a request naming root gets anyway.
		hostCfg.SecurityOpt = []string{"no-new-privileges"}
	}
	if spec.CPU > 0 {
		hostCfg.NanoCPUs = int64(math.Round(spec.CPU * 1e9))
	}
	if spec.MemoryMB > 0 {
		hostCfg.Memory = spec.MemoryMB << 20
		hostCfg.MemorySwap = hostCfg.Memory // no swap beyond the limit
	}
	if spec.DiskMB > 0 {
		hostCfg.StorageOpt = map[string]string{"size": strconv.FormatInt(spec.DiskMB, 10) + "M"}
	}
	hostCfg.Runtime = spec.Runtime
	return cfg, hostCfg, nil
}

// HasRuntime reports whether the engine has an OCI runtime of that name
// registered (runc always is).
func (d *Docker) HasRuntime(ctx context.Context, name string) (bool, error) {
	info, err := d.cli.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("engine info: %w", err)
	}
	_, ok := info.Runtimes[name]
	return ok, nil
}

// HostResources are the memory (MiB) and CPUs of the engine's host, which
// bound what a sandbox can be given.
func (d *Docker) HostResources(ctx context.Context) (memoryMB int64, cpus float64, err error) {
	info, err := d.cli.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("engine info: %w", err)
	}
	return info.MemTotal >> 20, float64(info.NCPU), nil
}

// DiskQuota says whether the engine can limit a container's writable layer
// (the "size" storage option) and, when it cannot, why.
type DiskQuota struct {
	Supported bool
	Reason    string
}

// DiskQuota finds out whether the storage driver enforces a writable-layer
// size. overlay2 does only on xfs mounted with pquota, which the engine's
// info does not reveal, so there the engine is asked to create (not start) a
// container with the option: it refuses at create time when it cannot.
func (d *Docker) DiskQuota(ctx context.Context, image string) DiskQuota {
	info, err := d.cli.Info(ctx)
	if err != nil {
		return DiskQuota{Reason: "engine info: " + err.Error()}
	}
	backing := ""
	for _, kv := range info.DriverStatus {
		if kv[0] == "Backing Filesystem" {
			backing = kv[1]
		}
	}
	where := "storage driver " + info.Driver
	if backing != "" {
		where += " on " + backing
	}
	switch {
	case slices.Contains([]string{"btrfs", "zfs", "devicemapper", "windowsfilter"}, info.Driver):
		return DiskQuota{Supported: true, Reason: where}
	case info.Driver != "overlay2" || backing != "xfs":
		return DiskQuota{Reason: where + " cannot limit a container's writable layer (overlay2 needs xfs with the pquota mount option)"}
	}
	resp, err := d.cli.ContainerCreate(ctx, &container.Config{Image: image, Labels: map[string]string{driver.LabelManaged: "probe"}},
		&container.HostConfig{StorageOpt: map[string]string{"size": "64M"}}, nil, nil, "")
	if err != nil {
		return DiskQuota{Reason: where + ": " + err.Error()}
	}
	_ = d.cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true})
	return DiskQuota{Supported: true, Reason: where + " with project quotas"}
}

// Start starts a created or stopped container.
func (d *Docker) Start(ctx context.Context, containerID string) error {
	if err := d.cli.ContainerStart(ctx, containerID, container.StartOptions{}); err != nil {
		return d.wrap("start", containerID, err)
	}
	d.log.Debug("container started", "container", containerID)
	return nil
}

// Update changes a running container's cpu and memory limits; 0 leaves a
// limit as it is (the engine cannot lift one). Swap stays equal to memory,
// as at create.
func (d *Docker) Update(ctx context.Context, containerID string, cpu float64, memoryMB int64) error {
	if cpu < 0 || math.IsNaN(cpu) || math.IsInf(cpu, 0) || memoryMB < 0 {
		return fmt.Errorf("update %s: invalid cpu %v or memory %d MB", containerID, cpu, memoryMB)
	}
	res := container.Resources{NanoCPUs: int64(math.Round(cpu * 1e9))}
	if memoryMB > 0 {
		res.Memory = memoryMB << 20
		res.MemorySwap = res.Memory
	}
	if _, err := d.cli.ContainerUpdate(ctx, containerID, container.UpdateConfig{Resources: res}); err != nil {
		return d.wrap("update", containerID, err)
	}
	return nil
}

// Stop sends SIGTERM, then SIGKILL after timeout (rounded up to whole
// seconds; 0 kills at once). Stopping a stopped container is not an error.
func (d *Docker) Stop(ctx context.Context, containerID string, timeout time.Duration) error {
	secs := int(math.Ceil(timeout.Seconds()))
	if secs < 0 {
		secs = 0
	}
	if err := d.cli.ContainerStop(ctx, containerID, container.StopOptions{Timeout: &secs}); err != nil {
		return d.wrap("stop", containerID, err)
	}
	d.log.Debug("container stopped", "container", containerID)
	return nil
}

// Remove force-removes the container and its anonymous volumes; a missing
// container is not an error.
func (d *Docker) Remove(ctx context.Context, containerID string) error {
	err := d.cli.ContainerRemove(ctx, containerID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	switch {
	case err == nil, errdefs.IsNotFound(err):
		d.log.Debug("container removed", "container", containerID)
		return nil
	case errdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress"):
		// Someone else is removing it: wait until it is gone.
		return d.waitGone(ctx, containerID)
	}
	return d.wrap("remove", containerID, err)
}

func (d *Docker) waitGone(ctx context.Context, containerID string) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		_, err := d.cli.ContainerInspect(ctx, containerID)
		if errdefs.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove container %s: %w", containerID, ctx.Err())
		case <-t.C:
		}
	}
}

// Inspect returns the engine's view of one container (by id or name).
func (d *Docker) Inspect(ctx context.Context, containerID string) (driver.Container, error) {
	info, err := d.cli.ContainerInspect(ctx, containerID)
	if err != nil {
		return driver.Container{}, d.wrap("inspect", containerID, err)
	}
	c := driver.Container{
		ID:   info.ID,
		Name: strings.TrimPrefix(info.Name, "/"),
	}
	if info.Config != nil {
		c.Image = info.Config.Image
		c.Labels = info.Config.Labels
		c.SandboxID = info.Config.Labels[driver.LabelSandboxID]
		for _, kv := range info.Config.Env {
			if v, ok := strings.CutPrefix(kv, agentapi.UserEnv+"="); ok {
				c.AgentUser = v
			}
		}
	}
	if info.State != nil {
		c.State = string(info.State.Status)
		c.ExitCode = info.State.ExitCode
		c.OOMKilled = info.State.OOMKilled
	}
	if info.NetworkSettings != nil {
		c.IP = d.pickIP(info.NetworkSettings.Networks)
	}
	if info.HostConfig != nil {
		c.Limits = true
		c.CPU = float64(info.HostConfig.NanoCPUs) / 1e9
		c.MemoryMB = info.HostConfig.Memory >> 20
	}
	if t, err := time.Parse(time.RFC3339Nano, info.Created); err == nil {
		c.CreatedAt = t
	}
	return c, nil
}

// Output returns the last tail lines of the container's stdout and stderr,
// interleaved as the engine kept them.
func (d *Docker) Output(ctx context.Context, containerID string, tail int) (string, error) {
	rc, err := d.cli.ContainerLogs(ctx, containerID, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: strconv.Itoa(tail)})
	if err != nil {
		return "", d.wrap("logs", containerID, err)
	}
	defer rc.Close()
	// Sandbox containers have no TTY, so the engine multiplexes the two
	// streams; both go to the one buffer, in order.
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, io.LimitReader(rc, 64<<10)); err != nil {
		return out.String(), fmt.Errorf("logs %s: %w", containerID, err)
	}
	return out.String(), nil
}

// pickIP prefers the configured network, then any network with an address.
func (d *Docker) pickIP(nets map[string]*network.EndpointSettings) string {
	if ep := nets[d.network]; ep != nil && ep.IPAddress != "" {
		return ep.IPAddress
	}
	names := make([]string, 0, len(nets))
	for n := range nets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if ep := nets[n]; ep != nil && ep.IPAddress != "" {
			return ep.IPAddress
		}
	}
	return ""
}

// List returns every container (running or not) carrying all given labels.
// An empty value matches any value of that label.
func (d *Docker) List(ctx context.Context, labels map[string]string) ([]driver.Container, error) {
	args := filters.NewArgs()
	for k, v := range labels {
		if v == "" {
			args.Add("label", k)
		} else {
			args.Add("label", k+"="+v)
		}
	}
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	out := make([]driver.Container, 0, len(list))
	for _, s := range list {
		c := driver.Container{
			ID:        s.ID,
			SandboxID: s.Labels[driver.LabelSandboxID],
			Image:     s.Image,
			State:     string(s.State),
			Labels:    s.Labels,
			CreatedAt: time.Unix(s.Created, 0),
		}
		if len(s.Names) > 0 {
			c.Name = strings.TrimPrefix(s.Names[0], "/")
		}
		if s.NetworkSettings != nil {
			c.IP = d.pickIP(s.NetworkSettings.Networks)
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Events streams the die, oom and destroy events of labelled containers.
func (d *Docker) Events(ctx context.Context, labels map[string]string) (<-chan driver.Event, <-chan error) {
	args := filters.NewArgs(filters.Arg("type", string(events.ContainerEventType)))
	for _, a := range []events.Action{events.ActionDie, events.ActionOOM, events.ActionDestroy} {
		args.Add("event", string(a))
	}
	for k, v := range labels {
		if v == "" {
			args.Add("label", k)
		} else {
			args.Add("label", k+"="+v)
		}
	}
	msgs, errs := d.cli.Events(ctx, events.ListOptions{Filters: args})
	out := make(chan driver.Event)
	outErr := make(chan error, 1)
	go func() {
		defer close(out)
		for {
			select {
			case m := <-msgs:
				ev := driver.Event{Kind: driver.EventKind(m.Action), ContainerID: m.Actor.ID, SandboxID: m.Actor.Attributes[driver.LabelSandboxID]}
				if code, err := strconv.Atoi(m.Actor.Attributes["exitCode"]); err == nil {
					ev.ExitCode = code
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					outErr <- ctx.Err()
					return
				}
			case err := <-errs:
				outErr <- fmt.Errorf("engine events: %w", err)
				return
			case <-ctx.Done():
				outErr <- ctx.Err()
				return
			}
		}
	}()
	return out, outErr
}

// Pause freezes every process of the container.
func (d *Docker) Pause(ctx context.Context, containerID string) error {
	if err := d.cli.ContainerPause(ctx, containerID); err != nil {
		return d.wrap("pause", containerID, err)
	}
	return nil
}

// Unpause thaws a paused container.
func (d *Docker) Unpause(ctx context.Context, containerID string) error {
	if err := d.cli.ContainerUnpause(ctx, containerID); err != nil {
		return d.wrap("unpause", containerID, err)
	}
	return nil
}

// Stats samples the container's resource use. It takes about a second: the
// engine waits for a second CPU sample to compute the usage over that interval.
//
// CPUCount is the CPU limit rounded up (the host's CPUs without a limit);
// CPUUsedPct is the share of those CPUs in use, 0 to 100. MemUsed excludes
// the inactive page cache (as `docker stats` does); MemTotal is the memory
// limit (the host's memory without one). DiskUsed is the size of the
// container's writable layer; DiskTotal is its size limit, 0 when the
// container has none (the storage driver cannot enforce one).
func (d *Docker) Stats(ctx context.Context, containerID string) (driver.Stats, error) {
	info, _, err := d.cli.ContainerInspectWithRaw(ctx, containerID, true)
	if err != nil {
		return driver.Stats{}, d.wrap("stats", containerID, err)
	}
	resp, err := d.cli.ContainerStats(ctx, containerID, false)
	if err != nil {
		return driver.Stats{}, d.wrap("stats", containerID, err)
	}
	defer resp.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return driver.Stats{}, fmt.Errorf("stats %s: decode: %w", containerID, err)
	}

	out := driver.Stats{Timestamp: s.Read}
	if out.Timestamp.IsZero() || out.Timestamp.Year() < 2000 {
		out.Timestamp = time.Now()
	}

	online := int(s.CPUStats.OnlineCPUs)
	if online == 0 {
		online = len(s.CPUStats.CPUUsage.PercpuUsage)
	}
	out.CPUCount = online
	var limit float64 // cores
	if info.HostConfig != nil && info.HostConfig.NanoCPUs > 0 {
		limit = float64(info.HostConfig.NanoCPUs) / 1e9
		out.CPUCount = int(math.Ceil(limit))
	}
	if out.CPUCount == 0 {
		out.CPUCount = 1
	}
	// Cores busy over the sample interval: the container's CPU time delta
	// over the host's CPU time delta, times the host's CPUs.
	cpuDelta := float64(s.CPUStats.CPUUsage.TotalUsage) - float64(s.PreCPUStats.CPUUsage.TotalUsage)
	sysDelta := float64(s.CPUStats.SystemUsage) - float64(s.PreCPUStats.SystemUsage)
	if cpuDelta > 0 && sysDelta > 0 && online > 0 && s.PreCPUStats.SystemUsage > 0 {
		cores := cpuDelta / sysDelta * float64(online)
		capacity := float64(out.CPUCount)
		if limit > 0 {
			capacity = limit
		}
		out.CPUUsedPct = math.Min(100, 100*cores/capacity)
	}

	used := s.MemoryStats.Usage
	inactive, ok := s.MemoryStats.Stats["total_inactive_file"] // cgroup v1
	if !ok {
		inactive = s.MemoryStats.Stats["inactive_file"] // cgroup v2
	}
	if inactive < used {
		used -= inactive
	}
	out.MemUsed = clampInt64(used)
	out.MemTotal = clampInt64(s.MemoryStats.Limit)
	if info.SizeRw != nil {
		out.DiskUsed = *info.SizeRw
	}
	if info.HostConfig != nil {
		if size, ok := info.HostConfig.StorageOpt["size"]; ok {
			if mb, err := strconv.ParseInt(strings.TrimSuffix(size, "M"), 10, 64); err == nil {
				out.DiskTotal = mb << 20
			}
		}
	}
	return out, nil
}

// DiskUsage is the size of the container's writable layer (the engine
// walks it, so it costs about as much as the files it holds).
func (d *Docker) DiskUsage(ctx context.Context, containerID string) (int64, error) {
	info, _, err := d.cli.ContainerInspectWithRaw(ctx, containerID, true)
	if err != nil {
		return 0, d.wrap("disk usage", containerID, err)
	}
	if info.SizeRw == nil {
		return 0, nil
	}
	return *info.SizeRw, nil
}

func clampInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// wrap maps a missing container to driver.ErrNotFound and otherwise keeps
// the engine's error (so errdefs checks still work) with some context.
func (d *Docker) wrap(op, containerID string, err error) error {
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("%s %s: %w", op, containerID, driver.ErrNotFound)
	}
	return fmt.Errorf("%s container %s: %w", op, containerID, err)
}
