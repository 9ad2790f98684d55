package cluster

import (
	"context"
	"errors"
	"testing"
)

func TestLivenessEndsOnlyTheLifeOfTheNodeDeclaredDown(t *testing.T) {
	var l liveness
	n2, n3 := l.of("n2"), l.of("n3")
	if l.of("n3") != n3 {
		t.Fatal("a second call of a live node's life made another")
	}
	l.down("n3")
	if !errors.Is(context.Cause(n3), errNodeDown) {
		t.Fatalf("n3's life after it went down: cause %v, want %v", context.Cause(n3), errNodeDown)
	}
	if n2.Err() != nil {
		t.Fatal("n2's life ended with n3's")
	}
	// Back in the cluster, n3 has a new life, which its old death does not
	// end.
	if back := l.of("n3"); back.Err() != nil {
		t.Fatalf("n3's new life: %v", back.Err())
	}
	// A node never asked about can go down without harm.
	l.down("n9")
}

func TestDownCauseNamesTheDeathOnlyWhenItEndedTheForward(t *testing.T) {
	other := errors.New("connection refused")
	ctx, cancel := context.WithCancelCause(context.Background())
	if got := downCause(ctx, other); got != other {
		t.Fatalf("live: %v", got)
	}
	cancel(errNodeDown)
	if got := downCause(ctx, context.Canceled); !errors.Is(got, errNodeDown) {
		t.Fatalf("after the death: %v", got)
	}
}
