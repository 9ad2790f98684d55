package service

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/store"
)

// PoolAuto sizes warm pools from the creates the daemon sees, so that an
// operator who pins no size (--warm-pool) still gets warm creates: E2B's
// and Daytona's users never configure a pool. An image (with the user its
// creates ask for) gets slots once it is created from: the default image
// from its first create, any other from its second within a minute. Its
// size is one slot plus one for every four creates in the last minute, at
// most Max, and all auto slots together stay within Total, within what
// --max-sandboxes leaves, and stop growing while the host's available
// memory is below its reserve. An image's slots go once it has not been
// created from for Idle. Pinned images are left to their pins.
type PoolAuto struct {
	Enabled bool
	// Max is the most slots one image keeps (default 4).
	Max int
	// Total bounds all auto slots together (default 16).
	Total int
	// Idle is how long an image's slots stay after its last create
	// (default 5 minutes).
	Idle time.Duration
	// MemAvailableMB reports the engine host's available memory; nil or
	// an error leaves memory out of the bound.
	MemAvailableMB func() (int64, error)
}

// Auto pool defaults.
const (
	DefaultPoolAutoMax   = 4
	DefaultPoolAutoTotal = 16
	DefaultPoolAutoIdle  = 5 * time.Minute
	// demandWindow is how far back creates count towards a pool's size.
	demandWindow = time.Minute
	// autoMemReserveMB is the least available memory the auto pool leaves
	// the host (or a tenth of it, when more): pooled containers are cheap
	// at rest (a few MiB each), but they are sandboxes a create may fill.
	autoMemReserveMB = 2048
)

// demand is what the pool knows of one key's creates.
type demand struct {
	image, user string
	recent      []time.Time // creates within demandWindow, oldest first
	last        time.Time
	// qualified: the key has earned slots (see PoolAuto) until it idles.
	qualified bool
}

// poolDemand records creates per pool key, for the auto sizes.
type poolDemand struct {
	mu   sync.Mutex
	keys map[string]*demand
}

// note records a create of key at now.
func (d *poolDemand) note(key, image, user string, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.keys == nil {
		d.keys = map[string]*demand{}
	}
	k := d.keys[key]
	if k == nil {
		k = &demand{image: image, user: user}
		d.keys[key] = k
	}
	k.recent = append(trimBefore(k.recent, now.Add(-demandWindow)), now)
	k.last = now
	k.qualified = k.qualified || len(k.recent) >= 2
}

// keep marks key as just used without counting a create: slots a previous
// process left are kept for Idle.
func (d *poolDemand) keep(key, image, user string, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.keys == nil {
		d.keys = map[string]*demand{}
	}
	if d.keys[key] == nil {
		d.keys[key] = &demand{image: image, user: user, last: now, qualified: true}
	}
}

func trimBefore(ts []time.Time, cut time.Time) []time.Time {
	i := 0
	for i < len(ts) && ts[i].Before(cut) {
		i++
	}
	return append(ts[:0], ts[i:]...)
}

// autoSpecs are the auto-sized pools as of now: have counts each key's free
// slots, live the sandboxes the daemon holds. Keys idle past Idle are
// forgotten.
func (p *warmPool) autoSpecs(now time.Time, have map[string]int, live int) []PoolSpec {
	a := p.cfg.PoolAuto
	if !a.Enabled {
		return nil
	}
	budget := a.Total
	for _, s := range p.specs {
		budget -= s.Size
	}
	if p.cfg.MaxSandboxes > 0 {
		budget = min(budget, p.cfg.MaxSandboxes-live)
	}
	lowMemory := false
	if a.MemAvailableMB != nil {
		if avail, err := a.MemAvailableMB(); err == nil {
			lowMemory = avail < max(autoMemReserveMB, p.cfg.HostMemoryMB/10)
		}
	}
	d := &p.demand
	d.mu.Lock()
	type want struct {
		spec PoolSpec
		last time.Time
	}
	var wants []want
	for key, k := range d.keys {
		k.recent = trimBefore(k.recent, now.Add(-demandWindow))
		if now.Sub(k.last) > a.Idle {
			delete(d.keys, key)
			continue
		}
		if _, pinned := p.spec(key); pinned {
			continue
		}
		// Another image earns its slots with a second create in the
		// window, one kept from a restart has them.
		if k.image != p.cfg.DefaultImage && !k.qualified {
			continue
		}
		size := min(1+len(k.recent)/4, a.Max)
		if lowMemory {
			size = min(size, have[key])
		}
		wants = append(wants, want{PoolSpec{Image: k.image, User: k.user, Size: size, CPU: p.defaultCPU(), MemoryMB: p.defaultMemoryMB(), Auto: true}, k.last})
	}
	d.mu.Unlock()
	// The most recently used images come first when the budget is short.
	slices.SortFunc(wants, func(x, y want) int { return y.last.Compare(x.last) })
	out := make([]PoolSpec, 0, len(wants))
	for _, w := range wants {
		w.spec.Size = max(0, min(w.spec.Size, budget))
		budget -= w.spec.Size
		out = append(out, w.spec)
	}
	return out
}

func (p *warmPool) defaultCPU() float64    { return min(p.cfg.DefaultCPU, p.cfg.MaxCPU) }
func (p *warmPool) defaultMemoryMB() int64 { return min(p.cfg.DefaultMemoryMB, p.cfg.MaxMemoryMB) }
func (p *warmPool) autoKeyWanted(sl store.PoolSlot) bool {
	return p.cfg.PoolAuto.Enabled && sl.CPU == p.defaultCPU() && sl.MemoryMB == p.defaultMemoryMB()
}

// currentSpecs are the pinned pools and, after them, the auto-sized ones,
// as the last refill pass sized them.
func (p *warmPool) currentSpecs() []PoolSpec {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append(slices.Clip(p.specs), p.auto...)
}

// retireExtra removes the ready free slots of an auto key beyond its size,
// the oldest first: an image no longer created from gives its memory back.
// Each slot's row goes first, and only while the slot is free, so a create
// adopting it at the same moment keeps it; a container whose row went is
// an orphan the janitor removes should its removal here fail.
func (p *warmPool) retireExtra(ctx context.Context, free []store.PoolSlot, sizes map[string]int) {
	byKey := map[string][]store.PoolSlot{}
	for _, sl := range free {
		if _, pinned := p.spec(sl.Key); !pinned && sl.Ready {
			byKey[sl.Key] = append(byKey[sl.Key], sl)
		}
	}
	for key, slots := range byKey {
		slices.SortFunc(slots, func(a, b store.PoolSlot) int { return a.CreatedAt.Compare(b.CreatedAt) })
		for _, sl := range slots[:max(0, len(slots)-sizes[key])] {
			retired, err := p.store.RetirePoolSlot(ctx, sl.ID)
			if err != nil {
				p.log.Error("warm pool: retire slot", "slot", sl.ID, "err", err)
				return
			}
			if !retired {
				continue // adopted meanwhile
			}
			p.log.Info("warm pool: idle slot retired", "image", sl.Image, "slot", sl.ID)
			p.forget(sl.ID)
			if err := p.rt.Remove(ctx, sl.ContainerID); err != nil {
				p.log.Warn("warm pool: remove retired container (the janitor tries again)", "slot", sl.ID, "err", err)
				continue
			}
			p.svc.removeFirewall(ctx, sl.ID)
		}
	}
}
