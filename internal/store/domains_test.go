package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

func TestAddCustomDomainRace(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	createSandbox(t, s, "sb-a", "")
	createSandbox(t, s, "sb-b", "")
	for round := range 30 {
		host := "app" + string(rune('a'+round%26)) + string(rune('0'+round/26)) + ".example.com"
		outcomes := make([]sandpit.AddOutcome, 2)
		errs := make([]error, 2)
		parallel(2, func(i int) {
			_, outcomes[i], errs[i] = s.AddCustomDomain(ctx, sandpit.CustomDomain{
				Hostname: host, SandboxID: []string{"sb-a", "sb-b"}[i], Port: 8080}, t0)
		})
		added, conflicts := 0, 0
		for i := range 2 {
			switch {
			case errs[i] == nil && outcomes[i] == sandpit.Added:
				added++
			case errors.Is(errs[i], sandpit.ErrHostnameConflict):
				conflicts++
			default:
				t.Fatalf("round %d: outcome %v err %v", round, outcomes[i], errs[i])
			}
		}
		if added != 1 || conflicts != 1 {
			t.Fatalf("round %d: %d added, %d conflicts; want 1 and 1", round, added, conflicts)
		}
	}
}

func TestCustomDomains(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	createSandbox(t, s, "sb-a", "")
	createSandbox(t, s, "sb-b", "")
	d := sandpit.CustomDomain{Hostname: "app.example.com", SandboxID: "sb-a", Port: 3000}

	row, outcome, err := s.AddCustomDomain(ctx, d, t0)
	if err != nil || outcome != sandpit.Added || row.SandboxID != "sb-a" || row.Port != 3000 || !row.CreatedAt.Equal(t0) {
		t.Fatalf("first add: %+v %v %v", row, outcome, err)
	}
	for i := range 3 {
		again, outcome, err := s.AddCustomDomain(ctx, d, t0.Add(1))
		if err != nil || outcome != sandpit.AlreadyBound || again != row {
			t.Fatalf("repeat %d: %+v %v %v", i, again, outcome, err)
		}
	}
	for name, other := range map[string]sandpit.CustomDomain{
		"other sandbox":      {Hostname: "app.example.com", SandboxID: "sb-b", Port: 3000},
		"same sandbox, port": {Hostname: "app.example.com", SandboxID: "sb-a", Port: 3001},
		"case differs":       {Hostname: "APP.Example.COM", SandboxID: "sb-b", Port: 3000},
	} {
		if _, _, err := s.AddCustomDomain(ctx, other, t0); !errors.Is(err, sandpit.ErrHostnameConflict) {
			t.Errorf("%s: got %v, want sandpit.ErrHostnameConflict", name, err)
		}
	}
	if _, _, err := s.AddCustomDomain(ctx, sandpit.CustomDomain{Hostname: "x.example.com", SandboxID: "ghost", Port: 1}, t0); !errors.Is(err, sandpit.ErrNotFound) {
		t.Errorf("unknown sandbox: %v", err)
	}
	if _, _, err := s.AddCustomDomain(ctx, sandpit.CustomDomain{Hostname: "y.example.com", SandboxID: "sb-a", Port: 0}, t0); err == nil {
		t.Error("port 0 accepted")
	}

	if _, _, err := s.AddCustomDomain(ctx, sandpit.CustomDomain{Hostname: "b.example.com", SandboxID: "sb-b", Port: 80}, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AddCustomDomain(ctx, sandpit.CustomDomain{Hostname: "api.example.com", SandboxID: "sb-a", Port: 80}, t0); err != nil {
		t.Fatal(err)
	}
	list, _ := s.ListCustomDomains(ctx, "sb-a")
	if len(list) != 2 || list[0].Hostname != "api.example.com" || list[1].Hostname != "app.example.com" {
		t.Errorf("ListCustomDomains(sb-a) = %+v", list)
	}
	if all, _ := s.ListAllCustomDomains(ctx); len(all) != 3 {
		t.Errorf("ListAllCustomDomains = %+v", all)
	}
	if got, err := s.GetCustomDomain(ctx, "App.Example.Com"); err != nil || got.SandboxID != "sb-a" {
		t.Errorf("GetCustomDomain, other case: %+v %v", got, err)
	}

	// Only the owner can remove a binding.
	if err := s.RemoveCustomDomain(ctx, "sb-b", "app.example.com"); !errors.Is(err, sandpit.ErrNotFound) {
		t.Errorf("remove by another sandbox: %v", err)
	}
	if err := s.RemoveCustomDomain(ctx, "sb-a", "app.example.com"); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveCustomDomain(ctx, "sb-a", "app.example.com"); !errors.Is(err, sandpit.ErrNotFound) {
		t.Errorf("second remove: %v", err)
	}
	if _, err := s.GetCustomDomain(ctx, "app.example.com"); !errors.Is(err, sandpit.ErrNotFound) {
		t.Errorf("get after remove: %v", err)
	}
	// Once free, another sandbox may take the hostname.
	if _, outcome, err := s.AddCustomDomain(ctx, sandpit.CustomDomain{Hostname: "app.example.com", SandboxID: "sb-b", Port: 3000}, t0); err != nil || outcome != sandpit.Added {
		t.Errorf("rebinding a freed hostname: %v %v", outcome, err)
	}

	// Deleting a sandbox removes its domains.
	if err := s.DeleteSandbox(ctx, "sb-b"); err != nil {
		t.Fatal(err)
	}
	if all, _ := s.ListAllCustomDomains(ctx); len(all) != 1 || all[0].Hostname != "api.example.com" {
		t.Errorf("after deleting sb-b: %+v", all)
	}
}
