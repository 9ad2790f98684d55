package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/errdefs"

	"github.com/sandpit-dev/sandpit/internal/driver"
)

// Bridge network options of Docker's bridge driver.
const (
	optBridgeName = "com.docker.network.bridge.name"
	optICC        = "com.docker.network.bridge.enable_icc"
)

// ErrNetworkInUse is returned by RemoveNetwork while containers are attached.
var ErrNetworkInUse = errors.New("network has containers attached")

// StaleEndpoints names, in RemoveNetwork's error, the engine state where a
// network with no container attached still cannot be removed.
const StaleEndpoints = "stale engine state"

// NetworkSpec describes the sandbox network the daemon owns.
type NetworkSpec struct {
	Name string
	// Subnet, when valid, is the network's subnet. Otherwise, when Pool is
	// valid, a free /24 is taken from it; otherwise Docker picks.
	Subnet netip.Prefix
	Pool   netip.Prefix
	Labels map[string]string
}

// Network is what the firewall needs to know about a network.
type Network struct {
	ID      string
	Name    string
	Bridge  string // the bridge interface on the host
	Subnet  netip.Prefix
	Gateway netip.Addr
	// Managed reports a network sandpit made (label sandpit.managed), which
	// it may remove again; an operator's network is left alone.
	Managed bool
	// Instance is the daemon instance that made it (label sandpit.instance):
	// only that daemon removes it.
	Instance string
	// Created reports that this call made the network.
	Created bool
}

// BridgeName is the interface name given to the bridge of a network sandpit
// creates: stable, derived from the network's name, within the kernel's 15
// characters.
func BridgeName(network string) string {
	h := sha256.Sum256([]byte(network))
	return "sp-" + hex.EncodeToString(h[:6])
}

// EnsureNetwork returns the named network, creating it when it does not
// exist: a bridge with inter-container traffic disabled and a fixed bridge
// interface name, so firewall rules can name it. An existing network is used
// as it is (an operator may have made it), provided it is a bridge.
func (d *Docker) EnsureNetwork(ctx context.Context, spec NetworkSpec) (Network, error) {
	if spec.Name == "" {
		return Network{}, errors.New("network: empty name")
	}
	if n, err := d.InspectNetwork(ctx, spec.Name); err == nil {
		return n, nil
	} else if !errors.Is(err, driver.ErrNotFound) {
		return Network{}, err
	}
	candidates := []netip.Prefix{spec.Subnet}
	if !spec.Subnet.IsValid() && spec.Pool.IsValid() {
		var err error
		if candidates, err = d.freeSubnets(ctx, spec.Pool); err != nil {
			return Network{}, err
		}
	}
	var lastErr error
	for i, subnet := range candidates {
		if i >= 32 {
			break
		}
		err := d.createNetwork(ctx, spec, subnet)
		switch {
		case err == nil:
			n, err := d.InspectNetwork(ctx, spec.Name)
			n.Created = true
			return n, err
		case errdefs.IsConflict(err) || strings.Contains(err.Error(), "already exists"):
			// Another daemon given the same name made it first.
			return d.InspectNetwork(ctx, spec.Name)
		case spec.Pool.IsValid() && !spec.Subnet.IsValid() && strings.Contains(err.Error(), "overlap"):
			// Another network took that subnet since the listing: try the next.
			lastErr = err
			continue
		default:
			return Network{}, fmt.Errorf("create network %s: %w", spec.Name, err)
		}
	}
	return Network{}, fmt.Errorf("create network %s: no free /24 in %s: %w", spec.Name, spec.Pool, lastErr)
}

func (d *Docker) createNetwork(ctx context.Context, spec NetworkSpec, subnet netip.Prefix) error {
	labels := map[string]string{driver.LabelManaged: "true"}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	opts := network.CreateOptions{
		Driver: "bridge",
		Options: map[string]string{
			optBridgeName: BridgeName(spec.Name),
			optICC:        "false",
		},
		Labels: labels,
	}
	if subnet.IsValid() {
		opts.IPAM = &network.IPAM{Driver: "default", Config: []network.IPAMConfig{{Subnet: subnet.String()}}}
	}
	_, err := d.cli.NetworkCreate(ctx, spec.Name, opts)
	if err == nil {
		d.log.Info("network created", "network", spec.Name, "subnet", subnet, "bridge", BridgeName(spec.Name))
	}
	return err
}

// freeSubnets returns the /24s of pool that no existing network overlaps,
// in random order, so that daemons sharing a pool rarely race for one.
func (d *Docker) freeSubnets(ctx context.Context, pool netip.Prefix) ([]netip.Prefix, error) {
	if !pool.Addr().Is4() || pool.Bits() > 24 {
		return nil, fmt.Errorf("network pool %s: want an IPv4 prefix of /24 or larger", pool)
	}
	nets, err := d.cli.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list networks: %w", err)
	}
	var used []netip.Prefix
	for _, n := range nets {
		for _, c := range n.IPAM.Config {
			if p, err := netip.ParsePrefix(c.Subnet); err == nil {
				used = append(used, p)
			}
		}
	}
	pool = pool.Masked()
	count := 1 << (24 - pool.Bits())
	base := pool.Addr().As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8
	var free []netip.Prefix
	for i := range count {
		v := start + uint32(i)<<8
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), 0}), 24)
		clash := false
		for _, u := range used {
			if u.Overlaps(p) {
				clash = true
				break
			}
		}
		if !clash {
			free = append(free, p)
		}
	}
	rand.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	return free, nil
}

// InspectNetwork describes a bridge network by name or id.
func (d *Docker) InspectNetwork(ctx context.Context, name string) (Network, error) {
	info, err := d.cli.NetworkInspect(ctx, name, network.InspectOptions{})
	if err != nil {
		if errdefs.IsNotFound(err) {
			return Network{}, fmt.Errorf("network %s: %w", name, driver.ErrNotFound)
		}
		return Network{}, fmt.Errorf("inspect network %s: %w", name, err)
	}
	if info.Driver != "bridge" {
		return Network{}, fmt.Errorf("network %s uses the %q driver: sandboxes need a bridge network", name, info.Driver)
	}
	n := Network{ID: info.ID, Name: info.Name, Bridge: info.Options[optBridgeName], Managed: info.Labels[driver.LabelManaged] == "true",
		Instance: info.Labels[driver.LabelInstance]}
	if n.Bridge == "" {
		// Docker's own naming for user-defined bridges.
		n.Bridge = "br-" + info.ID[:12]
	}
	for _, c := range info.IPAM.Config {
		p, err := netip.ParsePrefix(c.Subnet)
		if err != nil || !p.Addr().Is4() {
			continue
		}
		n.Subnet = p
		if g, err := netip.ParseAddr(c.Gateway); err == nil {
			n.Gateway = g
		} else {
			// Docker gives the bridge the subnet's first address when the
			// network was created without an explicit gateway, and then
			// does not report it.
			n.Gateway = p.Masked().Addr().Next()
		}
		break
	}
	if !n.Subnet.IsValid() {
		return Network{}, fmt.Errorf("network %s has no IPv4 subnet", name)
	}
	return n, nil
}

// RemoveNetwork removes the named network if sandpit made it; a missing one
// is not an error, one with containers attached is ErrNetworkInUse.
func (d *Docker) RemoveNetwork(ctx context.Context, name string) error {
	info, err := d.cli.NetworkInspect(ctx, name, network.InspectOptions{})
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect network %s: %w", name, err)
	}
	if len(info.Containers) > 0 {
		return fmt.Errorf("network %s: %d containers: %w", name, len(info.Containers), ErrNetworkInUse)
	}
	if info.Labels[driver.LabelManaged] != "true" {
		return nil // not ours to remove
	}
	// The network's own list holds running containers only. A stopped one
	// (a stopped or filesystem-paused sandbox) names the network by id and
	// could never start again once it went, so it keeps the network too.
	stopped, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("network", info.ID))})
	if err != nil {
		return fmt.Errorf("list containers of network %s: %w", name, err)
	}
	if len(stopped) > 0 {
		return fmt.Errorf("network %s: %d stopped containers: %w", name, len(stopped), ErrNetworkInUse)
	}
	err = d.cli.NetworkRemove(ctx, info.ID)
	switch {
	case err == nil, errdefs.IsNotFound(err):
		return nil
	case strings.Contains(err.Error(), "active endpoints"):
		// No container is attached (checked above), yet the engine still
		// records endpoints: stale state Docker 20.10 sometimes keeps after
		// removing containers, which only a restart of dockerd clears.
		return fmt.Errorf("network %s: no container is attached but the engine still records endpoints (%s; restarting dockerd clears them): %w",
			name, StaleEndpoints, ErrNetworkInUse)
	}
	return fmt.Errorf("remove network %s: %w", name, err)
}

// NetworkName is the network sandboxes join.
func (d *Docker) NetworkName() string { return d.network }
