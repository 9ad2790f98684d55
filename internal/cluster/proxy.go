package cluster

// Headers of a preview request one node's proxy hands to the owner's proxy
// over the cluster port. Like the other forwarding headers they are read only
// there, where the TLS handshake proved the sender holds the cluster key.
const (
	// HeaderPreview marks a forwarded request as preview traffic: the
	// receiving node serves it with its preview proxy, not its API.
	HeaderPreview = "Sandpit-Preview"
	// HeaderClientAddr is the address the forwarding node's proxy saw the
	// client at, so that the owner's proxy names the real client in
	// X-Forwarded-For rather than the forwarding node.
	HeaderClientAddr = "Sandpit-Client-Addr"
)

// AnonymousPrincipal is the principal header of a forwarded request that no
// credential authenticated (preview traffic, the E2B sandbox gateway): the
// zero principal, which holds no scope, so it authorizes nothing on the
// receiving node's API. The surfaces such requests reach check their own
// secrets (traffic tokens, the sandbox's access token, signed URLs).
const AnonymousPrincipal = "{}"

// HeaderSignedProbe asks a node, on the cluster port only, whether one of its
// sandboxes signed a file URL (E2B's /files?...&signature=...): it answers
// 204 if so and 404 if not, and does nothing else.
const HeaderSignedProbe = "Sandpit-Signed-Probe"
