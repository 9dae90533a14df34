package worker

import (
	"context"
	"sync"
)

// --- slots ----------------------------------------------------------------------------

// slotPool bounds how many slots running leases use at once. The poller never
// leases more than Hello.slots (or the last Credits limit) worth of slots to one
// worker, so acquire normally never waits; it is the worker's own guard.
type slotPool struct {
	mu      sync.Mutex
	free    int
	changed chan struct{}
}

func newSlotPool(n int) *slotPool { return &slotPool{free: n, changed: make(chan struct{})} }

func (p *slotPool) acquire(ctx context.Context, n int) error {
	for {
		p.mu.Lock()
		if p.free >= n {
			p.free -= n
			p.mu.Unlock()
			return nil
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (p *slotPool) release(n int) {
	p.mu.Lock()
	p.free += n
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}
