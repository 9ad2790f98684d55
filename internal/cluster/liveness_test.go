package cluster

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestLivenessEndsALifeOnlyOnceTheDeathIsConfirmed(t *testing.T) {
	l := liveness{confirm: 20 * time.Millisecond}
	n2, _ := l.of("n2")
	n3, dead := l.of("n3")
	if dead {
		t.Fatal("a node never declared dead reads as dead")
	}
	if again, _ := l.of("n3"); again != n3 {
		t.Fatal("a second call of a live node's life made another")
	}

	// Declared dead and back before the confirmation: nothing ends.
	l.down("n3")
	l.up("n3")
	time.Sleep(60 * time.Millisecond)
	if n3.Err() != nil {
		t.Fatalf("a death refuted in time ended the life: %v", context.Cause(n3))
	}

	// Declared dead for good: its life ends with the reason, and the next
	// one starts dead.
	l.down("n3")
	l.down("n3") // a repeat does not restart the confirmation
	select {
	case <-n3.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a confirmed death did not end the life")
	}
	if !errors.Is(context.Cause(n3), ErrNodeDown) {
		t.Fatalf("cause %v, want %v", context.Cause(n3), ErrNodeDown)
	}
	if _, dead := l.of("n3"); !dead {
		t.Fatal("after a confirmed death the node does not read as dead")
	}
	if n2.Err() != nil {
		t.Fatal("n2's life ended with n3's")
	}

	// Back in the cluster, n3 has a new life, which its old death does not
	// end.
	l.up("n3")
	back, dead := l.of("n3")
	if dead || back.Err() != nil || back == n3 {
		t.Fatalf("n3 back: dead %v, err %v", dead, back.Err())
	}
}

func TestDownCauseNamesTheDeathOnlyWhenItEndedTheForward(t *testing.T) {
	other := errors.New("connection refused")
	ctx, cancel := context.WithCancelCause(context.Background())
	if got := DownCause(ctx, other); got != other {
		t.Fatalf("live: %v", got)
	}
	cancel(ErrNodeDown)
	if got := DownCause(ctx, context.Canceled); !errors.Is(got, ErrNodeDown) {
		t.Fatalf("after the death: %v", got)
	}
}
