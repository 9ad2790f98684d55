package service

import (
	"context"
	"sync"
)

// keyedLocks serialises the lifecycle operations of one sandbox without
// serialising different sandboxes: each id has its own one-slot channel,
// created on first use and dropped when nobody holds or waits for it, so the
// map does not grow with every sandbox ever seen. A channel (not a mutex)
// lets a waiter give up when its request's context ends.
type keyedLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	ch   chan struct{}
	refs int // holders plus waiters
}

func (k *keyedLocks) ref(id string) *keyLock {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]*keyLock{}
	}
	l, ok := k.m[id]
	if !ok {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.m[id] = l
	}
	l.refs++
	return l
}

func (k *keyedLocks) unref(id string, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l.refs--
	if l.refs == 0 {
		delete(k.m, id)
	}
}

// lock waits for id's lock and returns its release, or fails when ctx ends
// first.
func (k *keyedLocks) lock(ctx context.Context, id string) (func(), error) {
	l := k.ref(id)
	select {
	case l.ch <- struct{}{}:
		return k.releaser(id, l), nil
	case <-ctx.Done():
		k.unref(id, l)
		return nil, ctx.Err()
	}
}

// tryLock takes id's lock only if nobody holds it: background work (the
// janitor) uses it to skip a sandbox an operation is busy with.
func (k *keyedLocks) tryLock(id string) (func(), bool) {
	l := k.ref(id)
	select {
	case l.ch <- struct{}{}:
		return k.releaser(id, l), true
	default:
		k.unref(id, l)
		return nil, false
	}
}

func (k *keyedLocks) releaser(id string, l *keyLock) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			<-l.ch
			k.unref(id, l)
		})
	}
}
