// Package secrets is the secrets aggregate: an owner's named values, kept
// sealed in the store for the egress proxy to use and never given to a
// sandbox. No answer, log line, event or audit entry it makes carries a
// value: what leaves the package is a Secret, which holds none.
package secrets

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base32"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// Config configures the secrets aggregate.
type Config struct {
	Store *store.Store
	// KeyPath is the key file (the data directory's KeyFile); it is read,
	// or made, at the first use of a value, so that a daemon whose owners
	// keep no secrets never makes one.
	KeyPath string
	Log     *slog.Logger
	Now     func() time.Time
}

// Secret is what may be told about a secret: never its value.
type Secret struct {
	ID        string
	Owner     string
	Name      string
	Metadata  map[string]string
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
	// Hosts are the hosts that may receive the secret: those of the
	// owner's sandboxes' network rules whose headers name it.
	Hosts []string
}

// Service is the secrets aggregate.
type Service struct {
	cfg Config

	mu     sync.Mutex
	sealer *Sealer
}

// New builds the secrets aggregate.
func New(cfg Config) *Service {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC() }

func (s *Service) audit(ctx context.Context, action, resource string, opErr error) {
	identity.Audit{Store: s.cfg.Store, Log: s.cfg.Log, Now: s.now}.Record(ctx, action, resource, opErr)
}

// seal returns the sealer, reading or making the key at the first call.
func (s *Service) seal() (*Sealer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sealer != nil {
		return s.sealer, nil
	}
	if s.cfg.KeyPath == "" {
		return nil, fmt.Errorf("secrets are not available on this daemon: no key file")
	}
	key, err := LoadOrCreateKey(s.cfg.KeyPath)
	if err != nil {
		return nil, err
	}
	if s.sealer, err = NewSealer(key); err != nil {
		return nil, err
	}
	return s.sealer, nil
}

// bound ties a sealed value to its owner and secret, so that it opens on
// no other row.
func bound(owner, id string) []byte { return []byte(owner + "\x00" + id) }

// nameRE is a secret name's grammar, after lower-casing: a name goes into
// placeholders ({{secret:NAME}}, ${e2b.secrets.NAME}), so it holds neither
// braces nor dots nor spaces.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// idPrefix starts every secret id; no name may start with it, so that a
// reference is never both.
const idPrefix = "sec_"

// maxValue bounds a value: it goes into a request header.
const maxValue = 8 << 10

// MaxPerOwner bounds how many secrets one owner keeps, so that no tenant can
// grow the store without limit (at most 8 MiB of values an owner).
const MaxPerOwner = 1000

// Metadata's bounds, as E2B states them.
const (
	maxMetaEntries = 32
	maxMetaKey     = 128
	maxMetaValue   = 1024
	maxMetaTotal   = 8192
)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", sandpit.ErrInvalid, fmt.Sprintf(format, args...))
}

// CanonicalName lower-cases a name and checks it.
func CanonicalName(name string) (string, error) {
	n := strings.ToLower(name)
	if !nameRE.MatchString(n) || strings.HasPrefix(n, idPrefix) {
		return "", invalidf("invalid secret name %q: use 1-64 letters, digits, '_' or '-', starting with a letter or digit and not with %q (names are lower-cased)", name, idPrefix)
	}
	return n, nil
}

func checkValue(v string) error {
	switch {
	case v == "":
		return invalidf("value is required")
	case len(v) > maxValue:
		return invalidf("value is %d bytes; at most %d", len(v), maxValue)
	}
	for _, c := range []byte(v) {
		// A value goes into a request header: a line break in it would
		// split the header, so no control character but a tab is taken.
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return invalidf("value must not contain control characters (it is sent in a request header)")
		}
	}
	return nil
}

func checkMetadata(m map[string]string) error {
	if len(m) > maxMetaEntries {
		return invalidf("metadata has %d entries; at most %d", len(m), maxMetaEntries)
	}
	total := 0
	for k, v := range m {
		if k == "" || len(k) > maxMetaKey || len(v) > maxMetaValue {
			return invalidf("metadata keys must be 1-%d bytes and values at most %d", maxMetaKey, maxMetaValue)
		}
		total += len(k) + len(v)
	}
	if total > maxMetaTotal {
		return invalidf("metadata is %d bytes; at most %d", total, maxMetaTotal)
	}
	return nil
}

func newID() string {
	var b [10]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return idPrefix + strings.ToLower(strings.TrimRight(base32.StdEncoding.EncodeToString(b[:]), "="))
}

func toSecret(r store.Secret) Secret {
	return Secret{ID: r.ID, Owner: r.Owner, Name: r.Name, Metadata: r.Metadata, Version: r.Version,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Hosts: []string{}}
}

// Create stores the caller's secret. A create is idempotent by name: the
// name again with the same value and metadata returns the secret it has
// (AlreadyBound), so a retry without an Idempotency-Key makes no second
// one; with another value or metadata it is ErrNameConflict.
func (s *Service) Create(ctx context.Context, name, value string, metadata map[string]string) (sec Secret, outcome sandpit.AddOutcome, err error) {
	defer func() {
		resource := sec.ID
		if resource == "" {
			resource = strings.ToLower(name)
		}
		s.audit(ctx, "secret.create", resource, err)
	}()
	if name, err = CanonicalName(name); err != nil {
		return Secret{}, 0, err
	}
	if err := checkValue(value); err != nil {
		return Secret{}, 0, err
	}
	if err := checkMetadata(metadata); err != nil {
		return Secret{}, 0, err
	}
	sealer, err := s.seal()
	if err != nil {
		return Secret{}, 0, err
	}
	owner := identity.OwnerOf(ctx)
	id := newID()
	sealed, err := sealer.Seal([]byte(value), bound(owner, id))
	if err != nil {
		return Secret{}, 0, err
	}
	row, inserted, err := s.cfg.Store.InsertSecret(ctx, store.Secret{ID: id, Owner: owner, Name: name, Sealed: sealed, Metadata: metadata}, s.now(), MaxPerOwner)
	if err != nil {
		return Secret{}, 0, err
	}
	if inserted {
		return toSecret(row), sandpit.Added, nil
	}
	have, err := sealer.Open(row.Sealed, bound(row.Owner, row.ID))
	if err != nil {
		return Secret{}, 0, fmt.Errorf("secret %q: %w", name, err)
	}
	if subtle.ConstantTimeCompare(have, []byte(value)) != 1 || !maps.Equal(row.Metadata, nonNil(metadata)) {
		return Secret{}, 0, fmt.Errorf("secret %q exists with another value; update it instead: %w", name, sandpit.ErrNameConflict)
	}
	return toSecret(row), sandpit.AlreadyBound, nil
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// Get returns the caller's secret whose name or id is ref.
func (s *Service) Get(ctx context.Context, ref string) (Secret, error) {
	row, err := s.cfg.Store.GetSecret(ctx, identity.OwnerOf(ctx), strings.ToLower(ref))
	if err != nil {
		return Secret{}, err
	}
	out := []Secret{toSecret(row)}
	if err := s.addHosts(ctx, row.Owner, out); err != nil {
		return Secret{}, err
	}
	return out[0], nil
}

// addHosts fills each secret's Hosts from owner's network rules.
func (s *Service) addHosts(ctx context.Context, owner string, secs []Secret) error {
	policies, err := s.cfg.Store.NetworkPoliciesWithRules(ctx, owner)
	if err != nil {
		return err
	}
	for i := range secs {
		for _, p := range policies {
			for _, h := range p.RuleHosts(secs[i].Name) {
				if !slices.Contains(secs[i].Hosts, h) {
					secs[i].Hosts = append(secs[i].Hosts, h)
				}
			}
		}
		slices.Sort(secs[i].Hosts)
	}
	return nil
}

// List returns the caller's secrets, by name.
func (s *Service) List(ctx context.Context) ([]Secret, error) {
	rows, err := s.cfg.Store.ListSecrets(ctx, identity.OwnerOf(ctx))
	if err != nil {
		return nil, err
	}
	out := make([]Secret, 0, len(rows))
	for _, r := range rows {
		out = append(out, toSecret(r))
	}
	if err := s.addHosts(ctx, identity.OwnerOf(ctx), out); err != nil {
		return nil, err
	}
	return out, nil
}

// Update replaces the value of the caller's secret whose name or id is ref,
// and its metadata unless metadata is nil. Setting the value it holds again
// (a retry) changes nothing and counts no version.
func (s *Service) Update(ctx context.Context, ref, value string, metadata map[string]string) (sec Secret, err error) {
	defer func() {
		resource := sec.ID
		if resource == "" {
			resource = strings.ToLower(ref)
		}
		s.audit(ctx, "secret.update", resource, err)
	}()
	if err := checkValue(value); err != nil {
		return Secret{}, err
	}
	if err := checkMetadata(metadata); err != nil {
		return Secret{}, err
	}
	sealer, err := s.seal()
	if err != nil {
		return Secret{}, err
	}
	owner := identity.OwnerOf(ctx)
	row, err := s.cfg.Store.GetSecret(ctx, owner, strings.ToLower(ref))
	if err != nil {
		return Secret{}, err
	}
	if have, err := sealer.Open(row.Sealed, bound(row.Owner, row.ID)); err == nil &&
		subtle.ConstantTimeCompare(have, []byte(value)) == 1 && (metadata == nil || maps.Equal(row.Metadata, metadata)) {
		return toSecret(row), nil
	}
	sealed, err := sealer.Seal([]byte(value), bound(row.Owner, row.ID))
	if err != nil {
		return Secret{}, err
	}
	row, err = s.cfg.Store.UpdateSecret(ctx, owner, row.ID, sealed, metadata, s.now())
	if err != nil {
		return Secret{}, err
	}
	return toSecret(row), nil
}

// Delete removes the caller's secret whose name or id is ref.
func (s *Service) Delete(ctx context.Context, ref string) (err error) {
	var row store.Secret
	defer func() {
		resource := row.ID
		if resource == "" {
			resource = strings.ToLower(ref)
		}
		s.audit(ctx, "secret.delete", resource, err)
	}()
	row, err = s.cfg.Store.DeleteSecret(ctx, identity.OwnerOf(ctx), strings.ToLower(ref))
	return err
}

// Reveal opens owner's secret named name for the egress proxy, which puts it
// into a request whose rule names it. It is the only way out for a value,
// and it neither logs nor audits one: the proxy's request is not the
// owner's call.
func (s *Service) Reveal(ctx context.Context, owner, name string) (string, error) {
	row, err := s.cfg.Store.GetSecret(ctx, owner, strings.ToLower(name))
	if err != nil {
		return "", err
	}
	sealer, err := s.seal()
	if err != nil {
		return "", err
	}
	v, err := sealer.Open(row.Sealed, bound(row.Owner, row.ID))
	if err != nil {
		return "", fmt.Errorf("secret %q: %w", row.Name, err)
	}
	return string(v), nil
}
