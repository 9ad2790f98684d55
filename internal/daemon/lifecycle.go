package daemon

import "context"

// component is one part of the running daemon. start brings it up; stop,
// when set, undoes exactly what start did. A start that fails leaves nothing
// of its own behind, so that only the components before it need stopping.
type component struct {
	name  string
	start func(ctx context.Context) error
	stop  func(ctx context.Context)
}

// startAll starts the components in order. When one fails, those already
// started are stopped in the reverse order and its error is returned as it
// is (the components' errors name what failed, e.g. the flag or the
// address). Otherwise it returns the function that stops them all, also in
// the reverse order: the order of the list is the order of the shutdown,
// read backwards.
func startAll(ctx context.Context, cs []component) (stop func(context.Context), err error) {
	var started []component
	stop = func(ctx context.Context) {
		for i := len(started) - 1; i >= 0; i-- {
			if started[i].stop != nil {
				started[i].stop(ctx)
			}
		}
	}
	for _, c := range cs {
		if err := c.start(ctx); err != nil {
			stop(context.WithoutCancel(ctx))
			return nil, err
		}
		started = append(started, c)
	}
	return stop, nil
}
