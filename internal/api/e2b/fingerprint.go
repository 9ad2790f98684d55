package e2b

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"slices"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/service"
)

// Scope is the request_idempotency namespace of E2B creates. The same
// fingerprint from another facade means something else, so every facade keeps
// its own scope.
const Scope = "e2b.create"

// DefaultTimeoutSeconds is E2B's sandbox lifetime when a create names none.
const DefaultTimeoutSeconds = 300

// KeyIdentity names an API key without revealing it: the fingerprint of a
// create, which is stored, must tell two callers apart but must never hold a
// credential.
func KeyIdentity(apiKey string) string {
	sum := sha256.Sum256([]byte("sandpit-e2b-api-key\x00" + apiKey))
	return hex.EncodeToString(sum[:])
}

// fingerprintInput is the canonical form of everything a create's dedupe
// looks at, and nothing else: a field left out here cannot make two creates
// different, and a field put in here (a request id, a timestamp) would make
// every retry different. Maps marshal with sorted keys and the lists are
// sorted before hashing, so the JSON encoding is canonical.
type fingerprintInput struct {
	Key        string            `json:"key"`
	TemplateID string            `json:"templateID"`
	EnvVars    map[string]string `json:"envVars"`
	Metadata   map[string]string `json:"metadata"`
	Timeout    int64             `json:"timeout"`
	AutoPause  bool              `json:"autoPause"`
	AutoResume bool              `json:"autoResume"`
	// KeepMemory false (a filesystem pause at the deadline) is kept apart;
	// omitted when true so earlier creates' fingerprints are unchanged.
	FilesystemPause bool           `json:"filesystemPause,omitempty"`
	Secure          bool           `json:"secure"`
	Network         networkPosture `json:"network"`
	// VolumeMounts is omitted when empty so that the fingerprints of
	// creates without mounts are unchanged.
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
}

// networkPosture is the allow/deny part of a create's network settings.
type networkPosture struct {
	AllowInternetAccess bool     `json:"allowInternetAccess"`
	AllowOut            []string `json:"allowOut"`
	DenyOut             []string `json:"denyOut"`
	// PrivateTraffic (allowPublicTraffic false) is omitted when false so
	// that the fingerprints of creates without it are unchanged.
	PrivateTraffic bool `json:"privateTraffic,omitempty"`
	// MaskRequestHost is omitted when empty, for the same reason.
	MaskRequestHost string `json:"maskRequestHost,omitempty"`
	// Rules are omitted when empty, for the same reason; a map encodes
	// with its keys sorted, so equal rules hash equal.
	Rules map[string][]sandpit.NetworkRule `json:"rules,omitempty"`
}

// Fingerprint hashes the parts of a create that decide whether two creates
// are the same request: the caller's key identity, the template, the sorted
// env vars and metadata, the effective timeout, the lifecycle and secure
// flags and the network allow/deny posture. Absent and default values hash
// like their explicit defaults, since the SDK omits what the user did not set.
func Fingerprint(keyIdentity string, b CreateBody) string {
	in := fingerprintInput{
		Key:             keyIdentity,
		TemplateID:      b.template(),
		EnvVars:         nonNil(b.EnvVars),
		Metadata:        nonNil(b.Metadata),
		Timeout:         b.timeoutSeconds(),
		AutoPause:       b.AutoPause != nil && *b.AutoPause,
		AutoResume:      b.AutoResume != nil && b.AutoResume.Enabled,
		FilesystemPause: b.autoPause() && !b.keepMemory(),
		Secure:          b.Secure != nil && *b.Secure,
		Network: networkPosture{
			AllowInternetAccess: b.AllowInternetAccess == nil || *b.AllowInternetAccess,
			AllowOut:            []string{},
			DenyOut:             []string{},
		},
	}
	if b.Network != nil {
		in.Network.AllowOut = sortedSet(b.Network.AllowOut)
		in.Network.DenyOut = sortedSet(b.Network.DenyOut)
		in.Network.MaskRequestHost = b.Network.MaskRequestHost
		in.Network.Rules = b.Network.Rules
	}
	in.Network.PrivateTraffic = b.portAccess() == sandpit.PortAccessToken
	in.VolumeMounts = sortedMounts(b.VolumeMounts)
	return hashJSON(in)
}

// KeyFingerprint is the fingerprint of a create that carries an
// Idempotency-Key: the key replaces the body, and the caller's identity keeps
// two callers' keys apart.
func KeyFingerprint(keyIdentity, idempotencyKey string) string {
	return hashJSON(struct {
		Key            string `json:"key"`
		IdempotencyKey string `json:"idempotencyKey"`
	}{keyIdentity, idempotencyKey})
}

// SandboxIDFor derives the sandbox id of a claim from its fingerprint and
// generation. A retry that takes over a crashed attempt keeps the generation
// and so lands on the same id, which makes a half-made sandbox adoptable
// instead of duplicable; a genuinely new create after the replay window runs
// at the next generation and gets a new id.
func SandboxIDFor(fingerprint string, generation int64) string {
	return sandboxIDFor(fingerprint, generation, 0)
}

// sandboxIDFor is SandboxIDFor's probe sequence: probe 0 is
// sha256(fingerprint || generation); a later probe appends its number, for
// when the reaper has deleted an old claim row and its generation numbers
// start again while that row's sandbox still lives.
func sandboxIDFor(fingerprint string, generation int64, probe int) string {
	h := sha256.New()
	h.Write([]byte(fingerprint))
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(generation))
	h.Write(n[:])
	if probe > 0 {
		binary.BigEndian.PutUint64(n[:], uint64(probe))
		h.Write(n[:])
	}
	return service.DeriveSandboxID(h.Sum(nil))
}

func hashJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Only maps of strings, strings, bools and ints go in; they always
		// marshal.
		panic("e2b: marshal fingerprint input: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// sortedSet sorts and de-duplicates an allow or deny list: the lists are sets
// of destinations, so their order carries no meaning.
func sortedSet(in []string) []string {
	out := slices.Clone(in)
	if out == nil {
		return []string{}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
