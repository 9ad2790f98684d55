package service

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agent"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// PoolSpec asks for Size started, ownerless sandboxes of Image whose default
// user is User, for creates to adopt. CPU and MemoryMB are the pooled
// containers' limits (0 = none): a create asking for exactly these skips the
// live update adoption otherwise makes.
type PoolSpec struct {
	Image    string
	User     string
	Size     int
	CPU      float64
	MemoryMB int64
}

// key is what a create must ask for to adopt one of the spec's containers.
func (p PoolSpec) key() string { return poolKey(p.Image, p.User) }

func poolKey(image, user string) string { return image + "|" + user }

// PoolStatus is the pool's state for operators and tests.
type PoolStatus struct {
	Hits   int64
	Misses int64
	Pools  []PoolSpecStatus
}

// PoolSpecStatus counts one spec's free slots.
type PoolSpecStatus struct {
	Image string
	User  string
	Size  int
	Ready int // started, agent healthy, adoptable
	// Starting slots are being made by the refill.
	Starting int
}

// warmPool is the service's pool bookkeeping; the slots themselves live in
// the store (pool_slots), which decides every adoption.
type warmPool struct {
	specs []PoolSpec
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

func newWarmPool(specs []PoolSpec, concurrency int) *warmPool {
	if concurrency <= 0 {
		concurrency = 1
	}
	return &warmPool{
		specs:  specs,
		refill: make(chan struct{}, concurrency),
		kick:   make(chan struct{}, 1),
		ips:    map[string]string{},
	}
}

// refillGrace is how long after the last create a refill waits: the
// client's first command usually follows its create at once.
const refillGrace = 250 * time.Millisecond

// busy reports whether foreground creates run or just ended.
func (p *warmPool) busy() bool {
	return p.foreground.Load() > 0 || time.Since(time.Unix(0, p.lastCreate.Load())) < refillGrace
}

// enter marks a create in progress until the returned function runs.
func (p *warmPool) enter() func() {
	if p == nil {
		return func() {}
	}
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

func (p *warmPool) spec(key string) (PoolSpec, bool) {
	for _, s := range p.specs {
		if s.key() == key {
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

// poolFits reports whether a pool's container can become the sandbox req
// asks for (the image and default user, which decides the container's
// security options, are the pool's key): its limits must be the pool's or
// ones a live update can set. The engine cannot lift a limit, so a create
// asking for none cannot adopt a container that has one.
func poolFits(req CreateRequest, spec PoolSpec) bool {
	return (req.CPU > 0 || spec.CPU == 0) && (req.MemoryMB > 0 || spec.MemoryMB == 0)
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
	if p == nil {
		return false, nil
	}
	key := poolKey(sb.Image, req.User)
	if spec, ok := p.spec(key); !ok || !poolFits(req, spec) {
		return false, nil
	}
	t0 := time.Now()
	slot, err := s.store.AdoptPoolSlot(ctx, key, sb.ID, s.now())
	phase(ctx, "store", t0)
	if errors.Is(err, sandpit.ErrNotFound) {
		p.misses.Add(1)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	p.hits.Add(1)
	p.wake()
	sb.ContainerID = slot.ContainerID
	p.mu.Lock()
	ip := p.ips[slot.ID]
	delete(p.ips, slot.ID)
	p.mu.Unlock()

	if ip == "" {
		t0 = time.Now()
		c, err := s.rt.Inspect(ctx, slot.ContainerID)
		if err != nil {
			return true, fmt.Errorf("%w: inspect pooled container: %v", ErrRuntime, err)
		}
		ip = c.IP
		phase(ctx, "engine", t0)
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
		if (req.CPU > 0 && req.CPU != slot.CPU) || (req.MemoryMB > 0 && req.MemoryMB != slot.MemoryMB) {
			if err = s.rt.Update(ctx, slot.ContainerID, req.CPU, req.MemoryMB); err != nil {
				err = fmt.Errorf("%w: update pooled container: %v", ErrRuntime, err)
			}
		}
		// The sandbox's network policy is applied here (the hook
		// adoptNetworkPolicy), as a cold create applies it after start.
		if err == nil {
			err = s.adoptNetworkPolicy(ctx, *sb, ip)
		}
		phase(ctx, "engine", t0)
		updated <- err
	}()
	t0 = time.Now()
	initErr := s.initAgent(ctx, ip, slot.Token, *sb)
	phase(ctx, "agent", t0)
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
	if err := s.rt.Remove(ctx, sb.ContainerID); err != nil {
		return fmt.Errorf("%w: remove failed pooled container: %v", ErrRuntime, err)
	}
	sb.ContainerID = containerName(sb.ID)
	return s.store.AbandonPoolSlot(ctx, sb.ID, sb.ContainerID)
}

// adoptNetworkPolicy is the adoption's hook for the sandbox's network
// policy. Pooled containers start with the daemon's default policy; a
// per-sandbox policy is applied here, where a cold create applies it after
// start.
func (s *Service) adoptNetworkPolicy(context.Context, sandpit.Sandbox, string) error { return nil }

// initTimeout bounds an adopted agent's init call.
const initTimeout = 3 * time.Second

// initAgent gives an adopted container's agent the sandbox's environment and
// access token, authenticated with the pool-only token it started with.
func (s *Service) initAgent(ctx context.Context, ip, poolToken string, sb sandpit.Sandbox) error {
	body, err := json.Marshal(agent.InitRequest{EnvVars: sb.Env, AccessToken: sb.AccessToken})
	if err != nil {
		return err
	}
	// A pooled agent answers init in a millisecond or two; one that does
	// not answer within the budget is given up on (the create goes cold).
	ctx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(driver.AgentPort)) + agent.InitPath
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("X-Access-Token", poolToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.agents.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: init: %v", ErrAgentUnhealthy, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("%w: init answered %s", ErrAgentUnhealthy, resp.Status)
	}
	return nil
}

// reinitAdopted gives the agent of an adopted container, started again,
// the sandbox's settings: it comes back up with the pool token its
// container was made with.
func (s *Service) reinitAdopted(ctx context.Context, sb sandpit.Sandbox, ip string) error {
	slot, err := s.store.GetPoolSlotOf(ctx, sb.ID)
	if errors.Is(err, sandpit.ErrNotFound) {
		return nil // made cold: its container carries its settings
	}
	if err != nil {
		return err
	}
	return s.initAgent(ctx, ip, slot.Token, sb)
}

// PoolStatus reports the pool's counters and free slots; admin only.
func (s *Service) PoolStatus(ctx context.Context) (PoolStatus, error) {
	if err := requireAdmin(ctx); err != nil {
		return PoolStatus{}, err
	}
	return s.poolStatus(ctx)
}

func (s *Service) poolStatus(ctx context.Context) (PoolStatus, error) {
	var st PoolStatus
	if s.pool == nil {
		return st, nil
	}
	st.Hits, st.Misses = s.pool.hits.Load(), s.pool.misses.Load()
	slots, err := s.store.ListFreePoolSlots(ctx)
	if err != nil {
		return st, err
	}
	for _, spec := range s.pool.specs {
		ps := PoolSpecStatus{Image: spec.Image, User: spec.User, Size: spec.Size}
		for _, sl := range slots {
			switch {
			case sl.Key != spec.key():
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
func (s *Service) RunPool(ctx context.Context) {
	if s.pool == nil {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	last, lastAt := "", time.Time{}
	for {
		s.refillPools(ctx, &wg)
		// The state is logged when it changed, at most every 10 s: a busy
		// daemon changes it with every create.
		if st, err := s.poolStatus(ctx); err == nil && time.Since(lastAt) >= 10*time.Second {
			if line := fmt.Sprint(st); line != last {
				last, lastAt = line, time.Now()
				for _, p := range st.Pools {
					s.log.Info("warm pool", "image", p.Image, "user", p.User, "size", p.Size, "ready", p.Ready,
						"starting", p.Starting, "hits", st.Hits, "misses", st.Misses)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.pool.kick:
		case <-t.C:
		}
	}
}

// refillPools starts making the slots each pool lacks. Each missing slot's
// row is written before its container is made, so the next pass counts it
// and a daemon that dies meanwhile finds the row at restart.
func (s *Service) refillPools(ctx context.Context, wg *sync.WaitGroup) {
	free, err := s.store.ListFreePoolSlots(ctx)
	if err != nil {
		s.log.Error("warm pool: list slots", "err", err)
		return
	}
	have := map[string]int{}
	for _, sl := range free {
		have[sl.Key]++
	}
	for _, spec := range s.pool.specs {
		for range spec.Size - have[spec.key()] {
			slot := store.PoolSlot{
				ID: newSlotID(), Key: spec.key(), Image: spec.Image, AgentUser: spec.User,
				CPU: spec.CPU, MemoryMB: spec.MemoryMB, Token: newToken(), CreatedAt: s.now(),
			}
			slot.ContainerID = containerName(slot.ID)
			if err := s.store.AddPoolSlot(ctx, slot); err != nil {
				s.log.Error("warm pool: add slot", "err", err)
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.fillSlot(ctx, slot); err != nil {
					s.log.Warn("warm pool: make pooled sandbox", "image", spec.Image, "err", err)
					s.dropSlot(context.WithoutCancel(ctx), slot.ID, slot.ContainerID)
				}
			}()
		}
	}
}

// fillSlot makes and starts a slot's container and marks it ready once its
// agent answers. It waits for a refill turn, and while cold creates are in
// progress (for at most a few seconds), so refills do not compete with them
// for the engine.
func (s *Service) fillSlot(ctx context.Context, slot store.PoolSlot) error {
	select {
	case s.pool.refill <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.pool.refill }()
	for deadline := time.Now().Add(3 * time.Second); s.pool.busy() && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	labels := s.containerLabels()
	labels[driver.LabelPool] = slot.Key
	spec := driver.Spec{
		SandboxID:   slot.ID,
		Image:       slot.Image,
		CPU:         slot.CPU,
		MemoryMB:    slot.MemoryMB,
		Labels:      labels,
		PidsLimit:   s.cfg.PidsLimit,
		AgentBinary: s.cfg.AgentBinary,
		AgentToken:  slot.Token,
		AgentUser:   slot.AgentUser,
	}
	if _, err := s.rt.Create(ctx, spec); err != nil {
		return err
	}
	if err := s.rt.Start(ctx, slot.ContainerID); err != nil {
		return err
	}
	c, err := s.rt.Inspect(ctx, slot.ContainerID)
	if err != nil {
		return err
	}
	if err := s.waitHealthy(ctx, c.IP); err != nil {
		return err
	}
	s.pool.mu.Lock()
	s.pool.ips[slot.ID] = c.IP
	s.pool.mu.Unlock()
	return s.store.MarkPoolSlotReady(ctx, slot.ID)
}

// dropSlot removes a free slot's container and row; an adopted slot is its
// sandbox's and is left alone.
func (s *Service) dropSlot(ctx context.Context, id, containerID string) {
	sl, err := s.store.GetPoolSlot(ctx, id)
	if err == nil && sl.SandboxID != "" {
		return
	}
	if err := s.rt.Remove(ctx, containerID); err != nil {
		s.log.Error("warm pool: remove container", "slot", id, "err", err)
		return
	}
	s.pool.mu.Lock()
	delete(s.pool.ips, id)
	s.pool.mu.Unlock()
	if err := s.store.DeletePoolSlot(ctx, id); err != nil {
		s.log.Error("warm pool: delete slot", "slot", id, "err", err)
	}
}

// poolExit handles the exit of a container labelled with id: a free pooled
// container that died is replaced; an adopted one's exit is its sandbox's.
// It returns the sandbox id the exit belongs to, or "" when it was handled.
func (s *Service) poolExit(ctx context.Context, id string) string {
	sl, err := s.store.GetPoolSlot(ctx, id)
	if err != nil {
		return id
	}
	if sl.SandboxID != "" {
		return sl.SandboxID
	}
	if !sl.Ready {
		return "" // still being made; its refill sees the failure
	}
	s.log.Warn("warm pool: pooled container exited; replacing it", "slot", id)
	s.dropSlot(ctx, id, sl.ContainerID)
	if s.pool != nil {
		s.pool.wake()
	}
	return ""
}

// reconcilePool runs at restart, before the sandboxes are reconciled: a free
// pooled container that runs and answers is kept, any other is removed with
// its slot, and a slot without its container goes. It returns the
// containers that belong to sandboxes, each adopted one under its sandbox's
// id.
func (s *Service) reconcilePool(ctx context.Context, containers []driver.Container) ([]driver.Container, error) {
	slots, err := s.store.ListPoolSlots(ctx)
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
		if _, pooled := c.Labels[driver.LabelPool]; !pooled {
			out = append(out, c)
			continue
		}
		sl, ok := byID[c.SandboxID]
		seen[c.SandboxID] = true
		switch {
		case ok && sl.SandboxID != "":
			c.SandboxID = sl.SandboxID
			out = append(out, c)
		case ok && s.pool != nil && c.State == "running" && s.healthyNow(ctx, c.IP) && s.stillWanted(sl):
			s.pool.mu.Lock()
			s.pool.ips[sl.ID] = c.IP
			s.pool.mu.Unlock()
			if err := s.store.MarkPoolSlotReady(ctx, sl.ID); err != nil {
				return nil, err
			}
			s.log.Info("warm pool: kept pooled sandbox", "slot", sl.ID)
		default:
			s.log.Warn("warm pool: removing pooled container", "container", c.ID, "slot", c.SandboxID)
			if err := s.rt.Remove(ctx, c.ID); err != nil {
				return nil, fmt.Errorf("%w: remove pooled %s: %v", ErrRuntime, c.ID, err)
			}
			if err := s.store.DeletePoolSlot(ctx, c.SandboxID); err != nil {
				return nil, err
			}
		}
	}
	for _, sl := range slots {
		if !seen[sl.ID] && sl.SandboxID == "" {
			if err := s.store.DeletePoolSlot(ctx, sl.ID); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// stillWanted reports whether a slot's pool is still configured, with the
// same limits.
func (s *Service) stillWanted(sl store.PoolSlot) bool {
	spec, ok := s.pool.spec(sl.Key)
	return ok && spec.CPU == sl.CPU && spec.MemoryMB == sl.MemoryMB
}

// healthyNow asks a kept pooled container's agent once, briefly.
func (s *Service) healthyNow(ctx context.Context, ip string) bool {
	if ip == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(ip, strconv.Itoa(driver.AgentPort))+"/health", nil)
	resp, err := s.http.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode < 300
}
