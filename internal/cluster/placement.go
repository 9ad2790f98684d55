package cluster

import (
	"fmt"
	"slices"
)

// PickOwnerAmong is PickOwner restricted to nodes (a template's image is on
// those only, in a cluster without a registry): the alive, undrained node
// of those with the most room. sandpit.ErrNoCapacity when none has room.
func (c *Cluster) PickOwnerAmong(nodes []string) (Member, error) {
	var best Member
	found := false
	for _, m := range c.candidates() {
		if slices.Contains(nodes, m.Name) && (!found || m.Meta.Free() > best.Meta.Free()) {
			best, found = m, true
		}
	}
	if !found {
		return Member{}, fmt.Errorf("no node that has the template's image has room (%v): %w", nodes, ErrNoCapacity)
	}
	return best, nil
}

// OwnerForKeyAmong is OwnerForKey restricted to nodes: the key's owner when
// it is one of them (or holds an attempt of the key), else the rendezvous
// of the key among those of them that take placements, which every node
// computes alike, so the retries of one create still meet.
func (c *Cluster) OwnerForKeyAmong(key string, nodes []string) (Member, error) {
	m, err := c.OwnerForKey(key)
	if err == nil && (slices.Contains(nodes, m.Name) || slices.Contains(c.rep.fsm.PendingClaimHolders(key), m.Name)) {
		return m, nil
	}
	cands := map[string]bool{}
	for _, m := range c.candidates() {
		cands[m.Name] = slices.Contains(nodes, m.Name)
	}
	m, err = c.rendezvous(key, func(m Member) bool { return cands[m.Name] })
	if err != nil {
		return Member{}, fmt.Errorf("no node that has the template's image has room (%v): %w", nodes, err)
	}
	return m, nil
}
