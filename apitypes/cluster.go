package apitypes

// ClusterMember is one node of a cluster as GET /v1/cluster/members shows
// it: gossip's view (address, state, capacity) joined with its Raft role and
// what the replicated index says of it.
type ClusterMember struct {
	Name   string            `json:"name"`
	Gossip string            `json:"gossip"`
	State  string            `json:"state"`
	Meta   ClusterMemberMeta `json:"meta"`
	Voter  bool              `json:"voter"`
	Leader bool              `json:"leader"`
	// Draining: the member takes no new sandboxes (cluster drain); the
	// index's flag, which placement obeys.
	Draining bool `json:"draining"`
	// MaxSandboxes is the member's --max-sandboxes (0 = no cap).
	MaxSandboxes int `json:"max_sandboxes,omitempty"`
	// Placements is how many sandboxes the cluster places on the member.
	Placements int `json:"placements"`
}

// ClusterMemberMeta is what a member gossips about itself.
type ClusterMemberMeta struct {
	API     string `json:"api"`
	Raft    string `json:"raft"`
	Proxy   string `json:"proxy,omitempty"`
	Public  string `json:"public,omitempty"`
	Running int    `json:"running"`
	Max     int    `json:"max,omitempty"`    // 0 = no limit
	Expect  int    `json:"expect,omitempty"` // the member's --bootstrap-expect
	// Draining is the member's own gossiped flag.
	Draining bool `json:"draining,omitempty"`
	// Leaving is gossiped just before a graceful leave.
	Leaving bool `json:"leaving,omitempty"`
}

// ClusterMembers is the answer of GET /v1/cluster/members.
type ClusterMembers struct {
	Node    string          `json:"node"`
	Members []ClusterMember `json:"members"`
}

// ClusterNodeStatus is one node's view of the cluster (GET
// /v1/cluster/status): its Raft state and the digest of its copy of the
// replicated index.
type ClusterNodeStatus struct {
	Node         string `json:"node"`
	State        string `json:"state"` // Raft state: Leader, Follower, Candidate
	Leader       string `json:"leader"`
	Term         string `json:"term"`
	AppliedIndex uint64 `json:"applied_index"`
	Digest       string `json:"digest"`
	Placements   int    `json:"placements"`
	Names        int    `json:"names"`
	Hostnames    int    `json:"hostnames"`
	Claims       int    `json:"claims"`
	// Draining names the drained nodes.
	Draining []string `json:"draining,omitempty"`
}

// ClusterDigest is the answer of GET /v1/cluster/digest.
type ClusterDigest struct {
	Node         string `json:"node"`
	AppliedIndex uint64 `json:"applied_index"`
	Digest       string `json:"digest"`
}

// ClusterDrain is the body of POST /v1/cluster/drain and its answer: the
// node and whether it is to be (or now is) drained.
type ClusterDrain struct {
	Node  string `json:"node"`
	Drain bool   `json:"drain"`
}

// ClusterDrained is the answer of POST /v1/cluster/drain.
type ClusterDrained struct {
	Node     string `json:"node"`
	Draining bool   `json:"draining"`
}

// ClusterLeft is the answer of POST /v1/cluster/leave.
type ClusterLeft struct {
	Node string `json:"node"`
	Left bool   `json:"left"`
}
