// Package volumes is the volumes aggregate: an owner's named volumes, their
// engine volumes and rows, the reconcile of what an interrupted create or
// delete left, and the resolution of a sandbox create's volume references to
// mounts, which the sandbox aggregate asks for through a port of its own.
package volumes

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// Config configures the volumes aggregate.
type Config struct {
	Store *store.Store
	// Engine makes the engine's named volumes; nil means no volumes.
	Engine driver.Volumes
	Log    *slog.Logger
	Now    func() time.Time
	// SizeMB is the default and largest size of a volume (the daemon's
	// --volume-size-mb; 0: unbounded).
	SizeMB int64
	// Instance is this daemon's instance id: the node a volume is made on,
	// and the label that tells its engine volumes from another daemon's.
	Instance string
	// ExtraLabels are added to every engine volume (a test run's label).
	ExtraLabels map[string]string
	// EngineError wraps a failure of the engine, so that the API answers
	// it as the sandbox aggregate's engine failures are answered; nil
	// leaves it as it is.
	EngineError func(what string, err error) error
}

// Service is the volumes aggregate.
type Service struct {
	store *store.Store
	cfg   Config
	log   *slog.Logger
}

// New builds the volumes aggregate.
func New(cfg Config) *Service {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.EngineError == nil {
		cfg.EngineError = func(what string, err error) error { return fmt.Errorf("%s: %w", what, err) }
	}
	return &Service{store: cfg.Store, cfg: cfg, log: cfg.Log}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC() }

func (s *Service) audit(ctx context.Context, action, resource string, opErr error) {
	identity.Audit{Store: s.store, Log: s.log, Now: s.now}.Record(ctx, action, resource, opErr)
}

// nameRE is a volume name's grammar: a sandbox name's.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// minSizeMB is the smallest volume, as it is the smallest disk.
const minSizeMB = 16

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", sandpit.ErrInvalid, fmt.Sprintf(format, args...))
}

// ErrVolumesUnavailable: the daemon's engine offers no named volumes.
var ErrVolumesUnavailable = errors.New("volumes are not available on this daemon")

// MountRequest is one volume a create asks to mount: the volume by name or
// id, the absolute path inside the sandbox, and whether it is read-only.
type MountRequest struct {
	Volume   string
	Path     string
	ReadOnly bool
}

// maxMounts bounds the volumes one sandbox mounts.
const maxMounts = 16

// volumeEnginePrefix starts the engine name of every volume; the rest is the
// volume's id, so the engine volume of a row is found without a lookup.
const volumeEnginePrefix = "sandpit-vol-"

// reservedMountPaths are paths a volume may not be mounted at or under:
// the agent's directory (a volume over it would hide the agent) and the
// kernel's filesystems the engine mounts.
var reservedMountPaths = []string{"/.sandpit", "/proc", "/sys", "/dev"}

// NewVolumeID returns a fresh volume id.
func NewVolumeID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "vol" + strings.ToLower(strings.TrimRight(base32.StdEncoding.EncodeToString(b[:]), "="))
}

// ValidateVolumeName checks a volume name: the same grammar as a sandbox's.
func ValidateVolumeName(name string) error {
	if !nameRE.MatchString(name) {
		return invalidf("invalid volume name %q: use 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit", name)
	}
	return nil
}

// CreateVolume makes the owner's volume of that name, or returns the one it
// already has: a create is idempotent by name, so a retry and any number of
// concurrent creates of one name end with one volume. The row is written
// first (creating), then the engine volume named after its id, then the row
// says ready; every caller that finds the row creating finishes it (the
// engine's create of an existing volume is a no-op), and a daemon killed in
// between removes the leftovers when it starts (ReconcileVolumes).
//
// sizeMB is the volume's size (0: the daemon's --volume-size-mb, which is
// also the most it may be). A create of a name the owner has with another
// size is a name conflict, not a retry.
func (s *Service) CreateVolume(ctx context.Context, name string, sizeMB int64) (v sandpit.Volume, outcome sandpit.AddOutcome, err error) {
	defer func() {
		resource := v.ID
		if resource == "" {
			resource = name
		}
		s.audit(ctx, "volume.create", resource, err)
	}()
	if err := ValidateVolumeName(name); err != nil {
		return sandpit.Volume{}, 0, err
	}
	limit := s.cfg.SizeMB
	switch {
	case sizeMB == 0:
	case limit == 0:
		return sandpit.Volume{}, 0, invalidf("size_mb: this daemon bounds no volume (--volume-size-mb 0), so a create cannot ask for one")
	case sizeMB < minSizeMB || sizeMB > limit:
		return sandpit.Volume{}, 0, invalidf("size_mb must be 0 (the default, %d MiB) or between %d and %d MiB (the daemon's --volume-size-mb), got %d", limit, minSizeMB, limit, sizeMB)
	}
	if s.cfg.Engine == nil {
		return sandpit.Volume{}, 0, ErrVolumesUnavailable
	}
	id := NewVolumeID()
	v, outcome, err = s.store.CreateVolume(ctx, sandpit.Volume{
		ID:         id,
		Owner:      identity.OwnerOf(ctx),
		Name:       name,
		EngineName: volumeEnginePrefix + id,
		State:      sandpit.VolumeCreating,
		Node:       s.cfg.Instance,
		SizeMB:     sizeOr(sizeMB, limit),
	}, s.now())
	if err != nil {
		return sandpit.Volume{}, 0, err
	}
	if got := sizeOr(v.SizeMB, limit); outcome == sandpit.AlreadyBound && sizeMB != 0 && got != sizeMB {
		return sandpit.Volume{}, 0, fmt.Errorf("%w: volume %q exists with size %d MiB, not %d", sandpit.ErrNameConflict, name, got, sizeMB)
	}
	switch v.State {
	case sandpit.VolumeReady:
		return v, outcome, nil
	case sandpit.VolumeDeleting:
		return sandpit.Volume{}, 0, fmt.Errorf("volume %q is being deleted: %w", name, sandpit.ErrVolumeNotReady)
	}
	crashpoint.Hit(crashpoint.AfterVolumeRow)
	if err := s.cfg.Engine.CreateVolume(ctx, v.EngineName, s.volumeLabels(v.ID)); err != nil {
		if outcome == sandpit.Added {
			// Nobody else learnt of the row yet... except concurrent
			// creates of the name, which finish it themselves or fail
			// like this one; a row left behind is removed at start.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if derr := s.store.DeleteVolumeRow(rctx, v.ID); derr != nil && !errors.Is(derr, sandpit.ErrNotFound) {
				s.log.Error("rollback: delete volume row", "volume", v.ID, "err", derr)
			}
		}
		return sandpit.Volume{}, 0, s.cfg.EngineError("create volume", err)
	}
	crashpoint.Hit(crashpoint.AfterVolumeCreate)
	if err := s.store.MarkVolumeReady(ctx, v.ID, s.now()); err != nil {
		return sandpit.Volume{}, 0, err
	}
	v, err = s.store.GetVolume(ctx, v.ID)
	return v, outcome, err
}

// volumeLabels are the labels of an engine volume: the daemon's extra labels
// (a test run's), its instance and the volume's id, as a sandbox's container
// carries them.
func (s *Service) volumeLabels(id string) map[string]string {
	l := maps.Clone(s.cfg.ExtraLabels)
	if l == nil {
		l = map[string]string{}
	}
	if s.cfg.Instance != "" {
		l[driver.LabelInstance] = s.cfg.Instance
	}
	l[driver.LabelVolumeID] = id
	return l
}

// GetVolume finds one of the caller's volumes by name, then by id (an admin
// reaches any owner's by id).
func (s *Service) GetVolume(ctx context.Context, ref string) (sandpit.Volume, error) {
	if ref == "" {
		return sandpit.Volume{}, fmt.Errorf("volume %q: %w", ref, sandpit.ErrNotFound)
	}
	v, err := s.store.GetVolumeByName(ctx, identity.OwnerOf(ctx), ref)
	if err == nil || !errors.Is(err, sandpit.ErrNotFound) {
		return v, err
	}
	v, err = s.store.GetVolume(ctx, ref)
	if err != nil {
		return sandpit.Volume{}, err
	}
	if p := identity.Of(ctx); !p.Admin && p.Owner != v.Owner {
		return sandpit.Volume{}, fmt.Errorf("get volume %s: %w", ref, sandpit.ErrNotFound)
	}
	return v, nil
}

// ListVolumes lists the caller's volumes.
func (s *Service) ListVolumes(ctx context.Context) ([]sandpit.Volume, error) {
	return s.store.ListVolumes(ctx, identity.OwnerOf(ctx))
}

// DeleteVolume deletes one of the caller's volumes. A volume that any
// sandbox row mounts, running or stopped, is refused with ErrVolumeInUse;
// the decision and the state change are one statement, so a create cannot
// mount it meanwhile. The engine volume goes next, then the row; a daemon
// killed in between finishes the delete when it starts.
func (s *Service) DeleteVolume(ctx context.Context, ref string) (err error) {
	defer func() { s.audit(ctx, "volume.delete", ref, err) }()
	v, err := s.GetVolume(ctx, ref)
	if err != nil {
		return err
	}
	if err := s.store.MarkVolumeDeleting(ctx, v.ID, s.now()); err != nil {
		return err
	}
	return s.finishVolumeDelete(ctx, v)
}

func (s *Service) finishVolumeDelete(ctx context.Context, v sandpit.Volume) error {
	if s.cfg.Engine != nil {
		if err := s.cfg.Engine.RemoveVolume(ctx, v.EngineName); err != nil {
			if errors.Is(err, driver.ErrVolumeBusy) {
				// A container the store no longer knows still holds it
				// (a sandbox removal that has not reached the engine):
				// the row stays deleting, and a retry or the next start
				// finishes it.
				return fmt.Errorf("volume %s: %w: %v", v.ID, sandpit.ErrVolumeInUse, err)
			}
			return s.cfg.EngineError("remove volume", err)
		}
	}
	if err := s.store.DeleteVolumeRow(ctx, v.ID); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
		return err
	}
	return nil
}

// sizeOr is a volume's size: its own, else the daemon's default.
func sizeOr(mb, def int64) int64 {
	if mb <= 0 || def == 0 {
		return def
	}
	return mb
}

// ReconcileVolumes runs when the daemon starts, before it serves: a create
// the previous process did not finish (its row still creating) is undone,
// engine volume and row, so a retry makes it whole; a delete it did not
// finish is finished; an engine volume of this instance with no row is
// removed.
func (s *Service) ReconcileVolumes(ctx context.Context) error {
	if s.cfg.Engine == nil {
		return nil
	}
	rows, err := s.store.ListVolumes(ctx, "")
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, v := range rows {
		known[v.EngineName] = true
		switch v.State {
		case sandpit.VolumeCreating:
			s.log.Warn("removing the leftover of an interrupted volume create", "volume", v.ID, "name", v.Name)
			if err := s.cfg.Engine.RemoveVolume(ctx, v.EngineName); err != nil {
				s.log.Error("reconcile: remove volume", "volume", v.ID, "err", err)
				continue
			}
			if err := s.store.DeleteVolumeRow(ctx, v.ID); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
				s.log.Error("reconcile: delete volume row", "volume", v.ID, "err", err)
			}
		case sandpit.VolumeDeleting:
			if err := s.finishVolumeDelete(ctx, v); err != nil {
				s.log.Error("reconcile: finish volume delete", "volume", v.ID, "err", err)
			}
		}
	}
	if s.cfg.Instance == "" {
		// Without an instance label the engine's volumes cannot be told
		// apart from another daemon's.
		return nil
	}
	engine, err := s.cfg.Engine.ListVolumes(ctx, map[string]string{driver.LabelManaged: "true", driver.LabelInstance: s.cfg.Instance})
	if err != nil {
		return err
	}
	for _, ev := range engine {
		if known[ev.Name] || ev.Labels[driver.LabelVolumeID] == "" {
			continue
		}
		s.log.Warn("removing an engine volume the store does not know", "volume", ev.Name)
		if err := s.cfg.Engine.RemoveVolume(ctx, ev.Name); err != nil {
			s.log.Error("reconcile: remove orphan volume", "volume", ev.Name, "err", err)
		}
	}
	return nil
}

// ResolveMounts checks a create's mounts and finds their volumes, before
// any row or container is made: each path absolute, clean, not / and not
// over the agent's or the kernel's paths, no path twice, and each volume
// the caller's own and ready. The store checks owner and state again when
// it writes the mounts with the sandbox row.
func (s *Service) ResolveMounts(ctx context.Context, reqs []MountRequest) ([]sandpit.VolumeMount, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if s.cfg.Engine == nil {
		return nil, ErrVolumesUnavailable
	}
	if len(reqs) > maxMounts {
		return nil, invalidf("at most %d volumes per sandbox", maxMounts)
	}
	seen := map[string]bool{}
	out := make([]sandpit.VolumeMount, 0, len(reqs))
	for _, r := range reqs {
		if err := ValidateMountPath(r.Path); err != nil {
			return nil, err
		}
		if seen[r.Path] {
			return nil, invalidf("mount path %q is given twice", r.Path)
		}
		seen[r.Path] = true
		if r.Volume == "" {
			return nil, invalidf("mount at %q names no volume", r.Path)
		}
		v, err := s.store.GetVolumeByName(ctx, identity.OwnerOf(ctx), r.Volume)
		if errors.Is(err, sandpit.ErrNotFound) {
			v, err = s.store.GetVolume(ctx, r.Volume)
			if err == nil && v.Owner != identity.OwnerOf(ctx) {
				// Another owner's volume is never mounted, and not
				// even said to exist.
				err = fmt.Errorf("volume %q: %w", r.Volume, sandpit.ErrNotFound)
			}
		}
		if errors.Is(err, sandpit.ErrNotFound) {
			return nil, fmt.Errorf("volume %q: %w", r.Volume, sandpit.ErrNotFound)
		}
		if err != nil {
			return nil, err
		}
		if v.State != sandpit.VolumeReady {
			return nil, fmt.Errorf("volume %q is %s: %w", r.Volume, v.State, sandpit.ErrVolumeNotReady)
		}
		out = append(out, sandpit.VolumeMount{VolumeID: v.ID, VolumeName: v.Name, EngineName: v.EngineName, Path: r.Path, ReadOnly: r.ReadOnly})
	}
	return out, nil
}

// ValidateMountPath checks where a volume is mounted.
func ValidateMountPath(p string) error {
	switch {
	case p == "" || !path.IsAbs(p):
		return invalidf("mount path %q must be absolute", p)
	case path.Clean(p) != p:
		return invalidf("mount path %q must be clean (no trailing '/', '.', '..' or '//')", p)
	case p == "/":
		return invalidf("a volume cannot be mounted at /")
	case len(p) > 1024 || strings.ContainsAny(p, ",:\x00"):
		return invalidf("mount path %q is too long or contains ',', ':' or NUL", p)
	}
	for _, r := range reservedMountPaths {
		if p == r || strings.HasPrefix(p, r+"/") {
			return invalidf("mount path %q is reserved (%s)", p, r)
		}
	}
	return nil
}

// SandboxMounts returns the volumes a sandbox mounts.
func (s *Service) SandboxMounts(ctx context.Context, id string) ([]sandpit.VolumeMount, error) {
	return s.store.SandboxMounts(ctx, id)
}
