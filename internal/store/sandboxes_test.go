package store_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/store"
)

func TestCreateSandboxSameNameConcurrently(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	var ok, conflict atomic.Int32
	errs := make([]error, 32)
	parallel(32, func(i int) {
		err := s.CreateSandbox(ctx, sandpit.Sandbox{ID: fmt.Sprintf("sb-%02d", i), Name: "web", CreatedAt: t0})
		switch {
		case err == nil:
			ok.Add(1)
		case errors.Is(err, sandpit.ErrNameConflict):
			conflict.Add(1)
		default:
			errs[i] = err
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("create %d: unexpected error %v", i, err)
		}
	}
	if ok.Load() != 1 || conflict.Load() != 31 {
		t.Fatalf("got %d successes and %d name conflicts, want 1 and 31", ok.Load(), conflict.Load())
	}
	if _, err := s.GetSandboxByName(ctx, "web"); err != nil {
		t.Fatalf("GetSandboxByName: %v", err)
	}
}

func TestCreateUnnamedSandboxesConcurrently(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	errs := make([]error, 32)
	parallel(32, func(i int) {
		errs[i] = s.CreateSandbox(ctx, sandpit.Sandbox{ID: fmt.Sprintf("sb-%02d", i), CreatedAt: t0})
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("unnamed create %d: %v", i, err)
		}
	}
	got, _, err := s.ListSandboxes(ctx, sandpit.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 32 {
		t.Fatalf("listed %d sandboxes, want 32", len(got))
	}
}

func TestCreateSandboxDuplicateID(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	createSandbox(t, s, "sb-1", "one")
	err := s.CreateSandbox(ctx, sandpit.Sandbox{ID: "sb-1", Name: "other", CreatedAt: t0})
	if !errors.Is(err, store.ErrSandboxExists) || errors.Is(err, sandpit.ErrNameConflict) {
		t.Fatalf("duplicate id: got %v, want ErrSandboxExists and not sandpit.ErrNameConflict", err)
	}
	// Name reuse after delete is allowed: uniqueness is over live rows.
	if err := s.DeleteSandbox(ctx, "sb-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, sandpit.Sandbox{ID: "sb-2", Name: "one", CreatedAt: t0}); err != nil {
		t.Fatalf("reusing a freed name: %v", err)
	}
}

func TestSandboxRoundTrip(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	full := sandpit.Sandbox{
		ID: "sb-full", Name: "full", Image: "debian:12", Template: "base", State: sandpit.StatePaused,
		Labels: map[string]string{"team": "infra", `odd "key"`: "v"}, Env: map[string]string{"A": "1"},
		CPU: 1.5, MemoryMB: 512, ContainerID: "c0ffee", AccessToken: "tok",
		PortAccess: sandpit.PortAccessToken, TrafficToken: "traffic",
		EndAt: t0.Add(time.Hour), CreatedAt: t0, UpdatedAt: t0.Add(time.Second), Owner: "team-infra",
		PauseMode: sandpit.PauseFilesystem, OnTimeout: sandpit.OnTimeoutPause, KeepMemory: true, AutoResume: true,
		Timeout: 90 * time.Second, ArchiveImage: "sandpit-archive/sb-full:a",
	}
	bare := sandpit.Sandbox{ID: "sb-bare", CreatedAt: t0}
	for _, sb := range []sandpit.Sandbox{full, bare} {
		if err := s.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}

	got, err := s.GetSandbox(ctx, "sb-full")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, full) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, full)
	}
	if byName, err := s.GetSandboxByName(ctx, "full"); err != nil || byName.ID != "sb-full" {
		t.Errorf("GetSandboxByName = %+v, %v", byName, err)
	}
	// A label key that a JSON path could not quote still filters.
	if l, _, err := s.ListSandboxes(ctx, sandpit.ListOptions{Labels: map[string]string{`odd "key"`: "v"}}); err != nil || len(l) != 1 || l[0].ID != "sb-full" {
		t.Errorf("filter on a key with quotes: %d rows, %v", len(l), err)
	}

	got, err = s.GetSandbox(ctx, "sb-bare")
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels == nil || got.Env == nil || len(got.Labels) != 0 || len(got.Env) != 0 {
		t.Errorf("nil maps should read back as empty maps: labels=%#v env=%#v", got.Labels, got.Env)
	}
	if got.Owner != sandpit.AdminOwner {
		t.Errorf("a sandbox created without an owner belongs to %q, want the admin owner", got.Owner)
	}
	if !got.EndAt.IsZero() || !got.UpdatedAt.Equal(t0) {
		t.Errorf("bare sandbox: EndAt=%v UpdatedAt=%v", got.EndAt, got.UpdatedAt)
	}

	for _, tc := range []struct {
		name string
		err  error
	}{
		{"GetSandbox", func() error { _, err := s.GetSandbox(ctx, "nope"); return err }()},
		{"GetSandboxByName", func() error { _, err := s.GetSandboxByName(ctx, "nope"); return err }()},
		{"GetSandboxByName empty", func() error { _, err := s.GetSandboxByName(ctx, ""); return err }()},
		{"UpdateSandboxState", s.UpdateSandboxState(ctx, "nope", sandpit.StateStopped, t0)},
		{"SetSandboxEndAt", s.SetSandboxEndAt(ctx, "nope", t0, t0)},
		{"SetSandboxLabels", s.SetSandboxLabels(ctx, "nope", nil, t0)},
		{"SetSandboxContainerID", s.SetSandboxContainerID(ctx, "nope", "c", t0)},
		{"DeleteSandbox", s.DeleteSandbox(ctx, "nope")},
	} {
		if !errors.Is(tc.err, sandpit.ErrNotFound) {
			t.Errorf("%s on a missing sandbox: got %v, want sandpit.ErrNotFound", tc.name, tc.err)
		}
	}
}

func TestSandboxUpdates(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	createSandbox(t, s, "sb-1", "")
	createSandbox(t, s, "sb-2", "")
	createSandbox(t, s, "sb-3", "")
	t1 := t0.Add(time.Minute)

	if err := s.UpdateSandboxState(ctx, "sb-1", sandpit.StateStopped, t1); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSandboxLabels(ctx, "sb-1", map[string]string{"k": "v"}, t1); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSandboxContainerID(ctx, "sb-1", "abc", t1); err != nil {
		t.Fatal(err)
	}
	got, _ := s.GetSandbox(ctx, "sb-1")
	if got.State != sandpit.StateStopped || got.Labels["k"] != "v" || got.ContainerID != "abc" || !got.UpdatedAt.Equal(t1) {
		t.Errorf("after updates: %+v", got)
	}
	if err := s.SetSandboxLabels(ctx, "sb-1", nil, t1); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSandbox(ctx, "sb-1"); got.Labels == nil || len(got.Labels) != 0 {
		t.Errorf("labels after clearing: %#v", got.Labels)
	}

	// Deadlines: sb-1 expires at t1, sb-2 later, sb-3 never.
	if err := s.SetSandboxEndAt(ctx, "sb-1", t1, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSandboxEndAt(ctx, "sb-2", t1.Add(time.Hour), t0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		now  time.Time
		want []string
	}{
		{t0, nil},
		{t1.Add(-time.Nanosecond), nil},
		{t1, []string{"sb-1"}},
		{t1.Add(2 * time.Hour), []string{"sb-1", "sb-2"}},
	} {
		exp, err := s.ListExpiredSandboxes(ctx, tc.now)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, sb := range exp {
			ids = append(ids, sb.ID)
		}
		if !reflect.DeepEqual(ids, tc.want) {
			t.Errorf("expired at %v = %v, want %v", tc.now, ids, tc.want)
		}
	}
	// The zero time clears a deadline.
	if err := s.SetSandboxEndAt(ctx, "sb-1", time.Time{}, t1); err != nil {
		t.Fatal(err)
	}
	if exp, _ := s.ListExpiredSandboxes(ctx, t1.Add(2*time.Hour)); len(exp) != 1 || exp[0].ID != "sb-2" {
		t.Errorf("after clearing sb-1's deadline: %+v", exp)
	}
}

func TestListSandboxesPaging(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	// Five rows share each creation time, so paging must break ties by id.
	for i := range 25 {
		sb := sandpit.Sandbox{
			ID:        fmt.Sprintf("sb-%02d", 24-i),
			State:     []sandpit.State{sandpit.StateRunning, sandpit.StateStopped}[i%2],
			Labels:    map[string]string{"parity": []string{"even", "odd"}[i%2], "all": "yes"},
			CreatedAt: t0.Add(time.Duration(i/5) * time.Second),
		}
		if err := s.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}

	collect := func(opts sandpit.ListOptions) ([]int, []string) {
		t.Helper()
		var sizes []int
		var ids []string
		seen := map[string]bool{}
		for page := 0; ; page++ {
			if page > 10 {
				t.Fatal("paging does not terminate")
			}
			got, next, err := s.ListSandboxes(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, len(got))
			for _, sb := range got {
				if seen[sb.ID] {
					t.Fatalf("sandbox %s listed twice", sb.ID)
				}
				seen[sb.ID] = true
				ids = append(ids, sb.ID)
			}
			if next == "" {
				return sizes, ids
			}
			opts.PageToken = next
		}
	}

	sizes, ids := collect(sandpit.ListOptions{Limit: 10})
	if !reflect.DeepEqual(sizes, []int{10, 10, 5}) || len(ids) != 25 {
		t.Fatalf("page sizes %v (%d rows), want [10 10 5]", sizes, len(ids))
	}
	// Order is (created_at, id): within the first second ids 20..24 ascending.
	if ids[0] != "sb-20" || ids[4] != "sb-24" || ids[5] != "sb-15" || ids[24] != "sb-04" {
		t.Errorf("unexpected order: %v", ids)
	}

	// Descending walks the same rows in exactly the reverse order.
	sizes, desc := collect(sandpit.ListOptions{Limit: 10, Descending: true})
	if !reflect.DeepEqual(sizes, []int{10, 10, 5}) || !reflect.DeepEqual(desc, reversed(ids)) {
		t.Fatalf("descending: sizes %v, ids %v, want the reverse of %v", sizes, desc, ids)
	}

	// A row created mid-walk after the cursor shows up once; rows before it
	// do not shift the walk.
	first, next, err := s.ListSandboxes(ctx, sandpit.ListOptions{Limit: 10})
	if err != nil || len(first) != 10 {
		t.Fatal(err)
	}
	createSandbox(t, s, "sb-00a", "") // at t0, sorts before the cursor
	rest, _ := collectFrom(t, s, sandpit.ListOptions{Limit: 10, PageToken: next})
	if len(rest) != 15 {
		t.Errorf("after an insert behind the cursor, the rest of the walk has %d rows, want 15", len(rest))
	}
	if err := s.DeleteSandbox(ctx, "sb-00a"); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		opts sandpit.ListOptions
		want int
	}{
		{"label odd", sandpit.ListOptions{Labels: map[string]string{"parity": "odd"}}, 12},
		{"label even and all", sandpit.ListOptions{Labels: map[string]string{"parity": "even", "all": "yes"}}, 13},
		{"label value mismatch", sandpit.ListOptions{Labels: map[string]string{"parity": "none"}}, 0},
		{"label missing key", sandpit.ListOptions{Labels: map[string]string{"nokey": "yes"}}, 0},
		{"state stopped", sandpit.ListOptions{States: []sandpit.State{sandpit.StateStopped}}, 12},
		{"states both", sandpit.ListOptions{States: []sandpit.State{sandpit.StateStopped, sandpit.StateRunning}}, 25},
		{"label and state", sandpit.ListOptions{States: []sandpit.State{sandpit.StateRunning}, Labels: map[string]string{"parity": "odd"}}, 0},
		{"label paged", sandpit.ListOptions{Labels: map[string]string{"parity": "even"}, Limit: 4}, 13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ids := collect(tc.opts)
			if len(ids) != tc.want {
				t.Errorf("got %d rows, want %d", len(ids), tc.want)
			}
		})
	}

	for _, tok := range []string{"!!!", "bm9wZQ", "djE6eHl6OmE"} { // bad base64, "nope", "v1:xyz:a"
		if _, _, err := s.ListSandboxes(ctx, sandpit.ListOptions{PageToken: tok}); !errors.Is(err, store.ErrInvalidPageToken) {
			t.Errorf("token %q: got %v, want ErrInvalidPageToken", tok, err)
		}
	}
}

func collectFrom(t *testing.T, s *store.Store, opts sandpit.ListOptions) ([]sandpit.Sandbox, error) {
	t.Helper()
	var out []sandpit.Sandbox
	for {
		got, next, err := s.ListSandboxes(context.Background(), opts)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
		if next == "" {
			return out, nil
		}
		opts.PageToken = next
	}
}

func reversed(s []string) []string {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

// TestPauseModeAndCap: a paused state carries its mode in the same write,
// any other state clears it, and paused rows do not count against the
// daemon's cap.
func TestPauseModeAndCap(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	for _, id := range []string{"sb-a", "sb-b"} {
		if err := s.CreateSandboxWithinLimits(ctx, sandpit.Sandbox{ID: id, State: sandpit.StateRunning, CreatedAt: t0}, sandpit.OwnerLimits{}, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSandboxWithinLimits(ctx, sandpit.Sandbox{ID: "sb-c", CreatedAt: t0}, sandpit.OwnerLimits{}, 2); !errors.Is(err, sandpit.ErrQuotaExceeded) {
		t.Fatalf("create at the cap: %v", err)
	}
	if err := s.SetSandboxStateMode(ctx, "sb-a", sandpit.StatePaused, sandpit.PauseFilesystem, "", t0); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSandbox(ctx, "sb-a"); got.PauseMode != sandpit.PauseFilesystem || !s.SandboxPaused("sb-a") {
		t.Fatalf("paused row: mode %q, paused in memory %v", got.PauseMode, s.SandboxPaused("sb-a"))
	}
	if err := s.CreateSandboxWithinLimits(ctx, sandpit.Sandbox{ID: "sb-c", CreatedAt: t0}, sandpit.OwnerLimits{}, 2); err != nil {
		t.Fatalf("a paused sandbox counted against the cap: %v", err)
	}
	if err := s.SetSandboxState(ctx, "sb-a", sandpit.StateRunning, "", t0); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSandbox(ctx, "sb-a"); got.PauseMode != sandpit.PauseNone || s.SandboxPaused("sb-a") {
		t.Fatalf("running row keeps mode %q", got.PauseMode)
	}
}
