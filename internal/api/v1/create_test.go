package v1_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	v1 "github.com/sandpit-dev/sandpit/internal/api/v1"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/templates"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/test/harness"
)

const token = "sp_test"

// holdingDriver is the real Docker driver with one injected fault: Create
// blocks until the test releases it, which holds a create in flight for as
// long as the test needs. Everything else is the real engine.
type holdingDriver struct {
	driver.Driver
	entered chan struct{} // receives once per Create that reached the hold
	release chan struct{} // closed to let every held Create proceed
}

func (d *holdingDriver) Create(ctx context.Context, spec driver.Spec) (string, error) {
	d.entered <- struct{}{}
	<-d.release
	return d.Driver.Create(ctx, spec)
}

type rig struct {
	srv *httptest.Server
	st  *store.Store
	drv *holdingDriver
}

func newRig(t *testing.T, pendingTTL time.Duration) *rig {
	t.Helper()
	image := testenv.TestImage(t)
	labels := testenv.RunLabel(t)
	bin, err := harness.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt, err := docker.New(ctx, docker.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	drv := &holdingDriver{Driver: rt, entered: make(chan struct{}, 4), release: make(chan struct{})}
	var inst [8]byte
	_, _ = rand.Read(inst[:])
	svc := service.New(service.Config{
		DefaultImage: image, AgentBinary: bin, ExtraLabels: labels,
		Instance: hex.EncodeToString(inst[:]), Logger: log,
	}, st, drv, nil)
	idem := api.NewIdempotency(svc.Idempotency(), api.IdempotencyConfig{
		Wait: time.Minute, PendingTTL: pendingTTL, Logger: log,
	})
	srv := httptest.NewServer(v1.New(svc, templates.New(templates.Config{Logger: log}, st, svc.Idempotency(), svc.Events(), svc), api.NewAuth(svc.Identity(), token), nil, idem))
	t.Cleanup(srv.Close)
	return &rig{srv: srv, st: st, drv: drv}
}

type answer struct {
	status int
	id     string
	body   string
}

func (r *rig) keyedCreate(t *testing.T, key string) answer {
	req, _ := http.NewRequest(http.MethodPost, r.srv.URL+"/v1/sandboxes", strings.NewReader(`{"labels":{"k":"v"}}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return answer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sb struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(b, &sb)
	return answer{resp.StatusCode, sb.ID, string(b)}
}

// TestKeyedCreateRetriedWhileCreating holds a keyed create in flight (its
// container create blocks) and retries it with the same key, once while the
// first attempt still holds its claim and once after the claim's lock ran out
// and the retry takes it over, finding the sandbox still creating. Either way
// the retry answers with the first attempt's sandbox, never a 5xx, and there
// is one sandbox.
func TestKeyedCreateRetriedWhileCreating(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pendingTTL time.Duration
	}{
		{"retry waits on the live claim", time.Minute},
		{"retry takes the stale claim over and waits for the create", 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.pendingTTL)
			var wg sync.WaitGroup
			answers := make([]answer, 2)
			wg.Add(1)
			go func() { defer wg.Done(); answers[0] = r.keyedCreate(t, "key-1") }()
			<-r.drv.entered // the first attempt is inside the create
			if tc.pendingTTL < time.Minute {
				time.Sleep(2 * tc.pendingTTL) // past the lock: the retry takes over
			}
			wg.Add(1)
			go func() { defer wg.Done(); answers[1] = r.keyedCreate(t, "key-1") }()
			// Let the retry reach its wait before releasing the first.
			time.Sleep(300 * time.Millisecond)
			close(r.drv.release)
			wg.Wait()
			for i, a := range answers {
				if a.status != http.StatusCreated || a.id == "" || a.id != answers[0].id {
					t.Fatalf("attempt %d: %d %s, want 201 with the first attempt's sandbox %q", i, a.status, a.body, answers[0].id)
				}
			}
			all, _, err := r.st.ListSandboxes(context.Background(), sandpit.ListOptions{})
			if err != nil || len(all) != 1 || all[0].State != sandpit.StateRunning {
				t.Fatalf("sandboxes after both attempts: %+v %v, want one running", all, err)
			}
			if len(r.drv.entered) != 0 {
				t.Fatalf("%d extra container creates, want none", len(r.drv.entered))
			}
		})
	}
}
