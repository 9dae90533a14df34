package worker

// What the worker does with each message from a poller (under w.mu): leases start
// runs, renewals move their deadlines (or revoke them), cancels stop them, acks
// settle results; and how a run is stopped, by any of these or its deadline.

import (
	"context"
	"fmt"
	"time"

	pb "github.com/shardcron/shardcron/gen/go/shardcron/v1"
)

func (w *Worker) dispatch(l *link, msg *pb.PollerMessage) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch body := msg.Body.(type) {
	case *pb.PollerMessage_Leases:
		for _, lease := range body.Leases.Leases {
			w.onLeaseLocked(l, lease, now)
		}
	case *pb.PollerMessage_Renewals:
		w.onRenewalsLocked(l, body.Renewals, now)
	case *pb.PollerMessage_Cancels:
		for _, c := range body.Cancels.Cancels {
			w.onCancelLocked(l, c)
		}
	case *pb.PollerMessage_Acks:
		for _, a := range body.Acks.Acks {
			w.onAckLocked(l, a)
		}
	case *pb.PollerMessage_Welcome:
		l.welcomeLocked(body.Welcome) // a repeated Welcome only updates the timings
	default:
		w.log.Warn("unknown message from poller", "poller", l.addr, "type", fmt.Sprintf("%T", msg.Body))
	}
}

func (w *Worker) onLeaseLocked(l *link, lease *pb.Lease, now time.Time) {
	w.Stats.Leased.Add(1)
	prev := w.runs[lease.RunId]
	if prev != nil && !prev.lost() && prev.token == lease.FencingToken {
		w.log.Warn("duplicate lease ignored", "run", lease.RunId, "token", lease.FencingToken)
		return
	}
	if prev != nil { // an older attempt of the same run: its lease is gone
		w.stopRun(prev, stopLost, 0, "re-leased with a new fencing token")
	}
	deadline := leaseDeadline(lease.ExpiresAt, now, durationOr(lease.LeaseTtl, l.leaseTTL))
	if !deadline.After(now) {
		// It reached us late (we were frozen, or the clocks disagree): the poller
		// may already be giving the run to another worker. Nothing of it runs.
		w.Stats.Refused.Add(1)
		w.log.Warn("lease refused: already past its deadline", "run", lease.RunId, "token", lease.FencingToken,
			"late_by", now.Sub(deadline))
		l.out.addRefused(&pb.LeaseRef{RunId: lease.RunId, FencingToken: lease.FencingToken})
		return
	}
	slots := int(lease.GetResources().GetSlots())
	slots = max(1, min(slots, w.cfg.Slots))
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{
		lease:    lease,
		link:     l,
		token:    lease.FencingToken,
		slots:    slots,
		deadline: deadline,
		ctx:      ctx,
		cancel:   cancel,
		killNow:  make(chan struct{}),
		done:     make(chan struct{}),
	}
	r.watchdog = time.AfterFunc(deadline.Sub(now), func() { w.checkDeadline(r) })
	w.runs[lease.RunId] = r
	w.active.Add(1)
	go w.execute(r, prev)
}

func (w *Worker) onRenewalsLocked(l *link, rs *pb.Renewals, now time.Time) {
	ttl := durationOr(rs.LeaseTtl, l.leaseTTL)
	for _, ren := range rs.Renewals {
		r := w.runs[ren.RunId]
		if r == nil || r.lost() || r.token != ren.FencingToken {
			continue
		}
		if r.link != l {
			// A lease named here while it sought a poller: the one that renews it
			// serves the run's shard now. A refusal from a poller other than the
			// lease's own is no revocation (an older poller refuses what it does not
			// serve): the run's deadline stands, as if unanswered.
			if ren.Ok && ren.ExpiresAt != nil && r.seeking() {
				w.moveLocked(r, l)
				w.extendLocked(r, leaseDeadline(ren.ExpiresAt, now, 0))
			}
			continue
		}
		var sent time.Time
		if len(r.pending) > 0 {
			sent, r.pending = r.pending[0], r.pending[1:]
		}
		if ren.NotOwner {
			if !r.adrift {
				w.log.Info("the poller no longer serves the run's shard", "run", r.lease.RunId, "poller", l.addr)
			}
			r.adrift = true
			continue
		}
		if !ren.Ok {
			w.Stats.Revoked.Add(1)
			w.stopRun(r, stopLost, 0, "lease revoked by the poller")
			continue
		}
		var d time.Time
		switch {
		case ren.ExpiresAt != nil: // the renewal names the lease's new end itself
			d = leaseDeadline(ren.ExpiresAt, now, 0)
		case sent.IsZero():
			continue // an answer to nothing we sent: do not extend anything
		default: // an older poller: count from when the answered heartbeat left
			d = sent.Add(ttl)
		}
		r.adrift = false
		w.extendLocked(r, d)
	}
}

// extendLocked moves a renewed run's deadline, here and in the reaper. The later
// deadline wins: a late renewal (we were frozen) moves nothing.
func (w *Worker) extendLocked(r *run, d time.Time) {
	if d.After(r.deadline) {
		r.deadline = d
		if r.pgid != 0 {
			w.reaper.setDeadline(r.pgid, d)
		}
		r.watchdog.Reset(time.Until(d))
	}
	w.Stats.Renewed.Add(1)
}

func (w *Worker) onCancelLocked(l *link, c *pb.Cancel) {
	r := w.runs[c.RunId]
	if r == nil || r.link != l || r.lost() {
		return
	}
	if c.FencingToken != 0 && c.FencingToken != r.token {
		return
	}
	w.Stats.Cancels.Add(1)
	reason := c.Reason
	if reason == pb.RunReason_RUN_REASON_UNSPECIFIED {
		reason = pb.RunReason_RUN_REASON_CANCELLED_BY_USER
	}
	w.stopRun(r, stopCancelled, reason, "cancelled by the poller")
}

// checkDeadline is the lease watchdog: no run outlives its lease.
func (w *Worker) checkDeadline(r *run) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.lost() || w.runs[r.lease.RunId] != r {
		return
	}
	if wait := time.Until(r.deadline); wait > 0 {
		r.watchdog.Reset(wait)
		return
	}
	w.Stats.Expired.Add(1)
	w.stopRun(r, stopLost, 0, "lease expired without renewal")
}

// stopRun asks a run to stop (w.mu held). The first stop decides the outcome,
// except that losing the lease always wins: then nothing is reported.
func (w *Worker) stopRun(r *run, kind stopKind, reason pb.RunReason, why string) {
	if r.lost() {
		return
	}
	if r.stop != stopNone && kind != stopLost && kind != stopAbandoned {
		return
	}
	r.stop = kind
	if kind == stopCancelled {
		r.reason = reason
	}
	if kind == stopLost {
		close(r.killNow)
		w.log.Warn("run stopped now, its result will not be reported", "run", r.lease.RunId, "token", r.token, "why", why)
	} else {
		w.log.Info("stopping run", "run", r.lease.RunId, "why", why)
	}
	r.cancel()
}
