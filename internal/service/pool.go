package service

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/timing"
)

// PoolSpec asks for Size started, ownerless sandboxes of Image whose default
// user is User, for creates to adopt. CPU and MemoryMB are the pooled
// containers' limits (0 = the daemon's defaults for a create that names
// none): a create whose limits are exactly these skips the live update
// adoption otherwise makes.
type PoolSpec struct {
	Image    string
	User     string
	Size     int
	CPU      float64
	MemoryMB int64
	// Auto: the size follows demand (PoolAuto), not a pin.
	Auto bool
}

// PoolStatus is the pool's state for operators and tests.
type PoolStatus struct {
	Hits   int64
	Misses int64
	Pools  []PoolSpecStatus
	// Auto tells whether pools are sized from demand, AutoMax and
	// AutoTotal their bounds.
	Auto               bool
	AutoMax, AutoTotal int
	// MemoryLimitMB is the sum of the free slots' memory limits: the most
	// the pool's containers may take (at rest they take a few MiB each).
	MemoryLimitMB int64
}

// PoolSpecStatus counts one spec's free slots.
type PoolSpecStatus struct {
	Image string
	User  string
	Size  int
	Auto  bool
	Ready int // started, agent healthy, adoptable
	// Starting slots are being made by the refill.
	Starting int
}

// warmPool is the warm pool: its bookkeeping and the machinery that keeps
// it filled (refills, engine events, the janitor's and reconcile's look at
// pooled containers). The slots themselves live in the store (pool_slots),
// which decides every adoption. It exists even without configured specs:
// the slots and containers a previous process's pool left must still be
// recognised and removed.
type warmPool struct {
	cfg    Config
	store  *store.Store
	rt     driver.Driver
	log    *slog.Logger
	agents *agentapi.Link
	// svc is the service whose sandbox machinery a pooled container is
	// made with (its name, labels, firewall, agent health wait and image
	// start) and whose reconcile checks a refill waits for: a slot's
	// container must be made exactly as a sandbox's is, so the pool calls
	// those operations rather than keeping copies of them.
	svc *Service

	// specs are the pinned pools (--warm-pool); auto the pools sized from
	// demand as of the last refill pass (under mu), demand what sizes them.
	specs  []PoolSpec
	auto   []PoolSpec
	demand poolDemand
	// runtime is the OCI runtime every container of the daemon, pooled or
	// not, runs under; it is part of each pool key, so that slots made
	// under another runtime (before a restart with another --oci-runtime)
	// are never adopted.
	runtime string
	// refill bounds the containers being made for the pool at once.
	refill chan struct{}
	// kick wakes the refill loop after an adoption.
	kick chan struct{}
	// foreground counts the creates in progress and lastCreate is when the
	// last one ended (Unix nanoseconds); refills wait while there are any
	// and a moment after (for a bounded time), so the pool does not slow a
	// create, or its first command, down to fill itself.
	foreground   atomic.Int64
	lastCreate   atomic.Int64
	hits, misses atomic.Int64

	mu sync.Mutex
	// ips caches the address of each free slot's container.
	ips map[string]string
}

func newWarmPool(s *Service, specs []PoolSpec, concurrency int) *warmPool {
	if concurrency <= 0 {
		concurrency = 1
	}
	return &warmPool{
		cfg:     s.cfg,
		store:   s.store,
		rt:      s.rt,
		log:     s.log,
		agents:  s.agents,
		svc:     s,
		specs:   specs,
		runtime: s.cfg.Runtime,
		refill:  make(chan struct{}, concurrency),
		kick:    make(chan struct{}, 1),
		ips:     map[string]string{},
	}
}

// enabled reports whether the daemon keeps a warm pool (any spec is
// pinned, or pools are sized from demand).
func (p *warmPool) enabled() bool { return len(p.specs) > 0 || p.cfg.PoolAuto.Enabled }

// refillGrace is how long after the last create a refill waits: the
// client's first command usually follows its create at once.
const refillGrace = 250 * time.Millisecond

// busy reports whether foreground creates run or just ended.
func (p *warmPool) busy() bool {
	return p.foreground.Load() > 0 || time.Since(time.Unix(0, p.lastCreate.Load())) < refillGrace
}

// enter marks a create in progress until the returned function runs.
func (p *warmPool) enter() func() {
	p.foreground.Add(1)
	return func() {
		p.lastCreate.Store(time.Now().UnixNano())
		p.foreground.Add(-1)
	}
}

func (p *warmPool) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// key is what a create must ask for to adopt a pooled container: the image,
// the default user (which decides the container's security options) and the
// runtime.
func (p *warmPool) key(image, user string) string { return image + "|" + user + "|" + p.runtime }

// forget drops a slot's cached address.
func (p *warmPool) forget(id string) {
	p.mu.Lock()
	delete(p.ips, id)
	p.mu.Unlock()
}

func (p *warmPool) spec(key string) (PoolSpec, bool) {
	for _, s := range p.specs {
		if p.key(s.Image, s.User) == key {
			return s, true
		}
	}
	return PoolSpec{}, false
}

func newSlotID() string {
	var b [10]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "pool-" + strings.ToLower(strings.TrimRight(base32.StdEncoding.EncodeToString(b[:]), "="))
}

// adoptPooled tries to make sb out of a pooled container: the store claims a
// free slot for it (at most one per sandbox, never one twice), then the
// container gets the sandbox's limits, network policy, agent settings and
// routes. It reports whether sb was adopted; when it was not, the create goes
// cold. On error the caller unwinds as for a cold create: sb.ContainerID is
// then the adopted container, which is removed with the row (and the slot
// with it).
func (s *Service) adoptPooled(ctx context.Context, sb *sandpit.Sandbox, req CreateRequest) (bool, error) {
	p := s.pool
	// Until reconcile's checks end, the slots the previous process left
	// are not known to have containers: creates go cold meanwhile.
	if !p.enabled() || !s.checksDone() {
		return false, nil
	}
	// A pooled container was made without mounts, and the engine cannot
	// add one to a container that exists.
	if len(sb.Volumes) > 0 {
		return false, nil
	}
	// Nor can it resize a quota: under one, a pooled container has the
	// daemon's default, so a sandbox asking for another limit goes cold.
	if q := s.cfg.quotaMB(*sb); q != 0 && q != s.cfg.DiskMB {
		return false, nil
	}
	key := p.key(sb.Image, req.User)
	if _, pinned := p.spec(key); !pinned {
		if !s.cfg.PoolAuto.Enabled {
			return false, nil
		}
		// This create is demand for its image's pool; the refill pass
		// sizes the pool from it (after the create, as always).
		p.demand.note(key, sb.Image, req.User, s.now())
		defer p.wake()
	}
	// What a pooled image started at fill time started without the
	// sandbox's environment (a kernel would not see the create's
	// variables), so a create with variables goes cold for such an image.
	if len(sb.Env) > 0 {
		if _, starts, err := s.imageStart(ctx, sb.Image); err != nil || starts {
			return false, nil
		}
	}
	t0 := time.Now()
	slot, err := s.store.AdoptPoolSlot(ctx, key, sb.ID, s.now())
	timing.Phase(ctx, "store", t0)
	if errors.Is(err, sandpit.ErrNotFound) {
		p.misses.Add(1)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	p.hits.Add(1)
	sb.ContainerID = slot.ContainerID
	p.mu.Lock()
	ip := p.ips[slot.ID]
	delete(p.ips, slot.ID)
	p.mu.Unlock()

	if ip == "" {
		t0 = time.Now()
		c, err := s.rt.Inspect(ctx, slot.ContainerID)
		if err != nil {
			return true, runtimeErr("inspect pooled container", err)
		}
		ip = c.IP
		timing.Phase(ctx, "engine", t0)
	}
	// The engine's live update (slow: it rewrites cgroups) and the agent's
	// init run side by side; they touch different things. Both end before
	// the create answers, and only then does anyone hold the sandbox's
	// token, so none of its processes runs before its limits and network
	// policy apply.
	updated := make(chan error, 1)
	go func() {
		t0 := time.Now()
		var err error
		// sb's limits are the create's effective ones (its own or the
		// daemon's defaults), never 0, so the update always sets both.
		if sb.CPU != slot.CPU || sb.MemoryMB != slot.MemoryMB {
			if err = s.rt.Update(ctx, slot.ContainerID, sb.CPU, sb.MemoryMB); err != nil {
				err = runtimeErr("update pooled container", err)
			}
		}
		// The sandbox's network policy is applied here, as a cold create
		// applies it after start; a failure fails the adoption, which then
		// goes cold.
		if err == nil {
			// It replaces whatever rules the address had: pooled
			// containers run under the daemon's default policy. A sandbox
			// whose policy is that default needs nothing: the slot's own
			// apply at fill time cleared the address of any earlier
			// sandbox's rules, and no other container can have held the
			// address since, so the two listings of the tables (a third
			// of a warm create's time) are skipped.
			if p, perr := toFirewall(sb.Network); perr != nil || !p.IsZero() {
				err = s.applyFirewall(ctx, *sb, ip)
			}
		}
		timing.Phase(ctx, "engine", t0)
		updated <- err
	}()
	t0 = time.Now()
	initErr := p.initAgent(ctx, ip, slot.Token, *sb)
	timing.Phase(ctx, "agent", t0)
	if err := errors.Join(<-updated, initErr); err != nil {
		return true, err
	}

	s.mu.Lock()
	s.ips[sb.ID] = ip
	s.mu.Unlock()
	if err := s.installRoutes(ctx, sb.ID, ip); err != nil {
		s.log.Error("install routes", "sandbox", sb.ID, "err", err)
	}
	return true, nil
}

// abandonAdoption removes an adopted container that failed to become sb and
// points sb back at the container a cold create makes.
func (s *Service) abandonAdoption(ctx context.Context, sb *sandpit.Sandbox) error {
	s.pool.hits.Add(-1)
	s.pool.misses.Add(1)
	s.forgetIP(sb.ID)
	s.removeRoutes(ctx, sb.ID)
	if err := s.rt.Remove(ctx, sb.ContainerID); err != nil {
		return runtimeErr("remove failed pooled container", err)
	}
	// Rules applied for the adopted container's address go with it; the
	// cold container gets its own at start.
	s.removeFirewall(ctx, sb.ID)
	sb.ContainerID = s.sandboxContainerName(sb.ID)
	return s.store.AbandonPoolSlot(ctx, sb.ID, sb.ContainerID)
}

// initTimeout bounds an adopted agent's init call.
const initTimeout = 3 * time.Second

// initAgent gives an adopted container's agent the sandbox's environment and
// access token, authenticated with the pool-only token it started with.
func (p *warmPool) initAgent(ctx context.Context, ip, poolToken string, sb sandpit.Sandbox) error {
	// A pooled agent answers init in a millisecond or two; one that does
	// not answer within the budget is given up on (the create goes cold).
	ctx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	refused, err := p.agents.Init(ctx, ip, poolToken, agentapi.InitRequest{EnvVars: sb.Env, AccessToken: sb.AccessToken})
	if err != nil {
		return fmt.Errorf("%w: init: %v", ErrAgentUnhealthy, err)
	}
	if refused != "" {
		return fmt.Errorf("%w: init answered %s", ErrAgentUnhealthy, refused)
	}
	return nil
}

// reinitAdopted gives the agent of an adopted container, started again,
// the sandbox's settings: it comes back up with the pool token its
// container was made with.
func (p *warmPool) reinitAdopted(ctx context.Context, sb sandpit.Sandbox, ip string) error {
	slot, err := p.store.GetPoolSlotOf(ctx, sb.ID)
	if errors.Is(err, sandpit.ErrNotFound) {
		return nil // made cold: its container carries its settings
	}
	if err != nil {
		return err
	}
	return p.initAgent(ctx, ip, slot.Token, sb)
}

// PoolStatus reports the pool's counters and free slots; admin only.
func (s *Service) PoolStatus(ctx context.Context) (PoolStatus, error) {
	if err := identity.RequireAdmin(ctx); err != nil {
		return PoolStatus{}, err
	}
	return s.pool.poolStatus(ctx)
}

// PoolEnabled reports whether the daemon keeps a warm pool.
func (s *Service) PoolEnabled() bool { return s.pool.enabled() }

// PoolReady counts the ready free slots per image, for the status page and
// the metrics.
func (s *Service) PoolReady(ctx context.Context) (map[string]int, error) {
	st, err := s.pool.poolStatus(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, p := range st.Pools {
		out[p.Image] += p.Ready
	}
	return out, nil
}

func (p *warmPool) poolStatus(ctx context.Context) (PoolStatus, error) {
	var st PoolStatus
	if !p.enabled() {
		return st, nil
	}
	st.Hits, st.Misses = p.hits.Load(), p.misses.Load()
	st.Auto, st.AutoMax, st.AutoTotal = p.cfg.PoolAuto.Enabled, p.cfg.PoolAuto.Max, p.cfg.PoolAuto.Total
	slots, err := p.store.ListFreePoolSlots(ctx)
	if err != nil {
		return st, err
	}
	for _, sl := range slots {
		st.MemoryLimitMB += sl.MemoryMB
	}
	for _, spec := range p.currentSpecs() {
		ps := PoolSpecStatus{Image: spec.Image, User: spec.User, Size: spec.Size, Auto: spec.Auto}
		for _, sl := range slots {
			switch {
			case sl.Key != p.key(spec.Image, spec.User):
			case sl.Ready:
				ps.Ready++
			default:
				ps.Starting++
			}
		}
		st.Pools = append(st.Pools, ps)
	}
	return st, nil
}

// RunPool keeps every pool at its size until ctx ends: after each adoption,
// and every few seconds in case a refill failed. It logs the pool's size and
// hit and miss counts when they change, at most every 10 s.
func (s *Service) RunPool(ctx context.Context) { s.pool.run(ctx) }

// run is RunPool's loop.
func (p *warmPool) run(ctx context.Context) {
	if !p.enabled() {
		return
	}
	// Reconcile's checks keep or remove the slots the previous process
	// left; refills start after them, or a new slot could be taken for a
	// stale one.
	if err := p.svc.WaitChecked(ctx); err != nil {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	last, lastAt := "", time.Time{}
	for {
		p.refillPools(ctx, &wg)
		// The state is logged when it changed, at most every 10 s: a busy
		// daemon changes it with every create.
		if st, err := p.poolStatus(ctx); err == nil && time.Since(lastAt) >= 10*time.Second {
			if line := fmt.Sprint(st); line != last {
				last, lastAt = line, time.Now()
				for _, ps := range st.Pools {
					p.log.Info("warm pool", "image", ps.Image, "user", ps.User, "size", ps.Size, "ready", ps.Ready,
						"starting", ps.Starting, "hits", st.Hits, "misses", st.Misses)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-t.C:
		}
	}
}

// refillPools starts making the slots each pool lacks. Each missing slot's
// row is written before its container is made, so the next pass counts it
// and a daemon that dies meanwhile finds the row at restart.
func (p *warmPool) refillPools(ctx context.Context, wg *sync.WaitGroup) {
	free, err := p.store.ListFreePoolSlots(ctx)
	if err != nil {
		p.log.Error("warm pool: list slots", "err", err)
		return
	}
	have, ready := map[string]int{}, map[string]int{}
	for _, sl := range free {
		have[sl.Key]++
		if sl.Ready {
			ready[sl.Key]++
		}
	}
	if p.cfg.PoolAuto.Enabled {
		byState, err := p.store.CountSandboxesByState(ctx)
		if err != nil {
			p.log.Error("warm pool: count sandboxes", "err", err)
			return
		}
		live := 0
		for _, n := range byState {
			live += n
		}
		auto := p.autoSpecs(p.cfg.Now(), have, live)
		sizes := map[string]int{}
		for _, a := range auto {
			sizes[p.key(a.Image, a.User)] = a.Size
		}
		p.mu.Lock()
		p.auto = auto
		p.mu.Unlock()
		p.retireExtra(ctx, free, sizes)
	}
	for _, spec := range p.currentSpecs() {
		key := p.key(spec.Image, spec.User)
		for range spec.Size - have[key] {
			slot := store.PoolSlot{
				ID: newSlotID(), Key: key, Image: spec.Image, AgentUser: spec.User,
				CPU: spec.CPU, MemoryMB: spec.MemoryMB, Token: newToken(), CreatedAt: p.cfg.Now().UTC(),
			}
			// Named as a sandbox's container is: in a cluster the name
			// carries this node's instance, so nodes sharing one engine
			// never contend for a name, and an adopted container keeps a
			// name no other node's copy of its sandbox can take.
			slot.ContainerID = p.svc.sandboxContainerName(slot.ID)
			if err := p.store.AddPoolSlot(ctx, slot); err != nil {
				p.log.Error("warm pool: add slot", "err", err)
				return
			}
			// A pool with no ready slot makes every create cold until a
			// refill ends, so its refill does not wait for creates to
			// pause: under a steady stream they never do.
			urgent := ready[key] == 0
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.fillSlot(ctx, slot, urgent); err != nil {
					p.log.Warn("warm pool: make pooled sandbox", "image", spec.Image, "err", err)
					p.dropSlot(context.WithoutCancel(ctx), slot.ID, slot.ContainerID)
				}
			}()
		}
	}
}

// fillSlot makes and starts a slot's container and marks it ready once its
// agent answers. It waits for a refill turn, and, unless urgent, while cold
// creates are in progress (for at most a few seconds), so refills do not
// compete with them for the engine.
func (p *warmPool) fillSlot(ctx context.Context, slot store.PoolSlot, urgent bool) error {
	select {
	case p.refill <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.refill }()
	for deadline := time.Now().Add(3 * time.Second); !urgent && p.busy() && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	labels := p.svc.containerLabels()
	labels[driver.LabelPool] = slot.Key
	spec := driver.Spec{
		SandboxID:   slot.ID,
		Name:        slot.ContainerID,
		Image:       slot.Image,
		CPU:         slot.CPU,
		MemoryMB:    slot.MemoryMB,
		DiskMB:      p.cfg.DiskMB,
		Runtime:     p.cfg.Runtime,
		Labels:      labels,
		PidsLimit:   p.cfg.PidsLimit,
		AgentBinary: p.cfg.AgentBinary,
		AgentToken:  slot.Token,
		AgentUser:   slot.AgentUser,
		CAFile:      p.cfg.TrustCAFile,
	}
	if _, err := p.rt.Create(ctx, spec); err != nil {
		return err
	}
	if err := p.rt.Start(ctx, slot.ContainerID); err != nil {
		return err
	}
	c, err := p.rt.Inspect(ctx, slot.ContainerID)
	if err != nil {
		return err
	}
	// The daemon's default policy, asserted for the slot's address: it
	// also drops rules a sandbox that held the address before may have
	// left behind.
	if err := p.svc.applyFirewall(ctx, sandpit.Sandbox{ID: slot.ID}, c.IP); err != nil {
		return err
	}
	if err := p.svc.waitHealthy(ctx, c.IP); err != nil {
		return err
	}
	// What the image runs at start (the code interpreter's server) runs
	// in the slot, so that an adopted slot is ready as soon as it is
	// taken; the slot is ready only once that is.
	if err := p.svc.startImage(ctx, sandpit.Sandbox{ID: slot.ID, ContainerID: slot.ContainerID, Image: slot.Image, AccessToken: slot.Token}, false); err != nil {
		return err
	}
	p.mu.Lock()
	p.ips[slot.ID] = c.IP
	p.mu.Unlock()
	return p.store.MarkPoolSlotReady(ctx, slot.ID)
}

// dropSlot removes a free slot's container and row; an adopted slot is its
// sandbox's and is left alone.
func (p *warmPool) dropSlot(ctx context.Context, id, containerID string) {
	sl, err := p.store.GetPoolSlot(ctx, id)
	if err == nil && sl.SandboxID != "" {
		return
	}
	if err := p.rt.Remove(ctx, containerID); err != nil {
		p.log.Error("warm pool: remove container", "slot", id, "err", err)
		return
	}
	p.forget(id)
	p.svc.removeFirewall(ctx, id)
	if err := p.store.DeletePoolSlot(ctx, id); err != nil {
		p.log.Error("warm pool: delete slot", "slot", id, "err", err)
	}
}

// poolEvent takes an engine event about the container labelled with id. A
// pooled container carries its slot's id: an adopted one's events are its
// sandbox's, whose id it returns; a free one's are the pool's and are handled
// here, and then it returns "". Any other id is returned as it is.
func (p *warmPool) poolEvent(ctx context.Context, id string) string {
	sl, err := p.store.GetPoolSlot(ctx, id)
	if err != nil {
		return id
	}
	if sl.SandboxID != "" {
		return sl.SandboxID
	}
	if sl.Ready {
		p.checkPooled(ctx, sl)
	}
	// A slot still being made is its refill's business, which sees the
	// failure itself.
	return ""
}

// checkPooled replaces a free pooled container that no longer runs (killed
// behind the daemon's back, say). The event that led here may be stale, or
// caused by the daemon's own removal, so the container's state decides.
func (p *warmPool) checkPooled(ctx context.Context, sl store.PoolSlot) {
	c, err := p.rt.Inspect(ctx, sl.ContainerID)
	switch {
	case err == nil && c.State == "running":
		return
	case err != nil && !errors.Is(err, driver.ErrNotFound):
		p.log.Error("warm pool: inspect pooled container", "slot", sl.ID, "err", err)
		return
	}
	p.log.Warn("warm pool: pooled container stopped; replacing it", "slot", sl.ID)
	p.dropSlot(ctx, sl.ID, sl.ContainerID)
	p.wake()
}

// janitorPooled is the janitor's look at a pooled container: it returns the
// sandbox an adopted one belongs to, or "" when the pool deals with it (a
// free one that stopped is replaced, one without a slot is removed).
func (p *warmPool) janitorPooled(ctx context.Context, c driver.Container) string {
	sl, err := p.store.GetPoolSlot(ctx, c.SandboxID)
	switch {
	case errors.Is(err, sandpit.ErrNotFound):
		// Slots are written before their container is made and deleted
		// after it is removed, so this container's removal failed earlier.
		p.log.Warn("janitor: removing orphan pooled container", "container", c.ID, "slot", c.SandboxID)
		if err := p.rt.Remove(ctx, c.ID); err != nil {
			p.log.Error("janitor: remove orphan pooled container", "container", c.ID, "err", err)
		}
		return ""
	case err != nil:
		p.log.Error("janitor: pool slot", "slot", c.SandboxID, "err", err)
		return ""
	case sl.SandboxID != "":
		return sl.SandboxID
	case sl.Ready && c.State != "running":
		p.checkPooled(ctx, sl)
	}
	return ""
}

// reconcilePool runs at restart, before the sandboxes are reconciled: a free
// pooled container that runs and answers is kept, any other is removed with
// its slot, and a slot without its container goes. It returns the
// containers that belong to sandboxes, each adopted one under its sandbox's
// id.
func (p *warmPool) reconcilePool(ctx context.Context, containers []driver.Container) ([]driver.Container, error) {
	slots, err := p.store.ListPoolSlots(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]store.PoolSlot{}
	for _, sl := range slots {
		byID[sl.ID] = sl
	}
	seen := map[string]bool{}
	var out []driver.Container
	for _, c := range containers {
		if c.Labels[driver.LabelPool] == "" {
			out = append(out, c)
			continue
		}
		sl, ok := byID[c.SandboxID]
		seen[c.SandboxID] = true
		switch {
		case ok && sl.SandboxID != "":
			c.SandboxID = sl.SandboxID
			out = append(out, c)
		case ok && p.enabled() && c.State == "running" && p.healthyNow(ctx, c.IP) && p.stillWanted(sl):
			if _, pinned := p.spec(sl.Key); !pinned {
				p.demand.keep(sl.Key, sl.Image, sl.AgentUser, p.cfg.Now())
			}
			p.mu.Lock()
			p.ips[sl.ID] = c.IP
			p.mu.Unlock()
			if err := p.store.MarkPoolSlotReady(ctx, sl.ID); err != nil {
				return nil, err
			}
			p.log.Info("warm pool: kept pooled sandbox", "slot", sl.ID)
		default:
			// One container the engine will not remove is skipped, as
			// reconcile skips a sandbox: the janitor tries it again.
			p.log.Warn("warm pool: removing pooled container", "container", c.ID, "slot", c.SandboxID)
			if err := p.rt.Remove(ctx, c.ID); err != nil {
				p.log.Error("warm pool: remove pooled container", "container", c.ID, "err", err)
				continue
			}
			if err := p.store.DeletePoolSlot(ctx, c.SandboxID); err != nil {
				return nil, err
			}
		}
	}
	for _, sl := range slots {
		if !seen[sl.ID] && sl.SandboxID == "" {
			if err := p.store.DeletePoolSlot(ctx, sl.ID); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// stillWanted reports whether a slot's pool is still configured, with the
// same limits.
func (p *warmPool) stillWanted(sl store.PoolSlot) bool {
	spec, ok := p.spec(sl.Key)
	if !ok {
		return p.autoKeyWanted(sl)
	}
	return spec.CPU == sl.CPU && spec.MemoryMB == sl.MemoryMB
}

// healthyNow asks a kept pooled container's agent once, briefly.
func (p *warmPool) healthyNow(ctx context.Context, ip string) bool {
	if ip == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return p.agents.Healthy(ctx, ip)
}
