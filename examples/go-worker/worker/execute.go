package worker

// Running a lease: a handler in this process or a command as a subprocess, in the
// slots it asked for, bounded by its timeout; then its result, reported unless the
// lease was lost. A lease given ahead of its due_at (Hello.waits_for_due) is held
// until then: Started goes out at the real start, and a cancel during the wait ends
// the run without starting it.

import (
	"fmt"
	"strings"
	"time"

	pb "github.com/shardcron/shardcron/gen/go/shardcron/v1"
)

type outcome struct {
	state    pb.RunState
	reason   pb.RunReason
	exitCode *int32
	err      string
}

func (w *Worker) execute(r *run, prev *run) {
	defer w.active.Done()
	defer close(r.done)
	if prev != nil {
		<-prev.done // the older attempt is being killed first
	}
	var out outcome
	if err := w.pool.acquire(r.ctx, r.slots); err != nil {
		out = w.stoppedOutcome(r, nil)
	} else if !untilDue(r) {
		w.pool.release(r.slots)
		out = w.stoppedOutcome(r, nil) // stopped before its due instant: never started
	} else {
		now := time.Now()
		w.mu.Lock()
		r.started, r.startedAt = true, now
		if !r.lost() {
			r.link.out.addStarted(r.ref(), now)
			w.Stats.Started.Add(1)
		}
		w.mu.Unlock()
		out = w.runTask(r)
		w.pool.release(r.slots)
	}
	w.finish(r, out)
}

// untilDue holds the run until its lease's due_at on this machine's clock; false if
// it was stopped (cancelled, its lease lost) meanwhile.
func untilDue(r *run) bool {
	due := r.lease.GetDueAt()
	if due == nil {
		return r.ctx.Err() == nil
	}
	wait := time.Until(due.AsTime())
	if wait <= 0 {
		return r.ctx.Err() == nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return r.ctx.Err() == nil
	case <-r.ctx.Done():
		return false
	}
}

func (w *Worker) runTask(r *run) outcome {
	if d := r.lease.GetTimeout(); d != nil && d.AsDuration() > 0 {
		t := time.AfterFunc(d.AsDuration(), func() {
			w.mu.Lock()
			w.stopRun(r, stopTimedOut, 0, "timeout "+d.AsDuration().String())
			w.mu.Unlock()
		})
		defer t.Stop()
	}
	switch task := r.lease.GetTask().GetKind().(type) {
	case *pb.Task_Handler:
		h := w.handlers[task.Handler.Name]
		if h == nil {
			return failed(pb.RunReason_RUN_REASON_NO_HANDLER, fmt.Sprintf("no handler named %q on this worker", task.Handler.Name))
		}
		return w.runHandler(r, h, task.Handler.Payload)
	case *pb.Task_Command:
		if !w.cfg.RunCommands {
			return failed(pb.RunReason_RUN_REASON_SPAWN_FAILED, "this worker does not run commands")
		}
		return w.runCommand(r, task.Command)
	default:
		return failed(pb.RunReason_RUN_REASON_SPAWN_FAILED, "the lease carries no task")
	}
}

func (w *Worker) emitter(r *run) func(stream string, data []byte) {
	return func(stream string, data []byte) {
		w.mu.Lock()
		lost, l := r.lost(), r.link // the poller holding the lease now (its shard may have moved)
		w.mu.Unlock()
		if !lost { // the poller drops output of a run it no longer leases to us
			l.out.addOutput(r.lease.RunId, r.lease.FencingToken, stream, data)
		}
	}
}

func (w *Worker) runHandler(r *run, h Handler, payload []byte) outcome {
	hr := &Run{
		RunID:        r.lease.RunId,
		JobID:        r.lease.JobId,
		JobName:      r.lease.JobName,
		Owner:        r.lease.Owner,
		Attempt:      r.lease.Attempt,
		FencingToken: r.token,
		Payload:      payload,
		FireAt:       r.lease.GetFireAt().AsTime(),
		DueAt:        r.lease.GetDueAt().AsTime(),
		emit:         w.emitter(r),
	}
	type result struct {
		out []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ch <- result{err: fmt.Errorf("panic: %v", p)}
			}
		}()
		out, err := h(r.ctx, hr)
		ch <- result{out, err}
	}()
	var res result
	select {
	case res = <-ch:
	case <-r.ctx.Done():
		select { // the handler should return now; give it the grace, none when lost
		case res = <-ch:
		case <-r.killNow:
			return w.stoppedOutcome(r, nil)
		case <-time.After(w.cfg.KillGrace):
			w.log.Warn("handler ignores its context; reporting the run stopped", "run", r.lease.RunId)
			return w.stoppedOutcome(r, nil)
		}
	}
	if res.err == nil {
		hr.emit("stdout", res.out)
		return outcome{state: pb.RunState_RUN_STATE_SUCCEEDED}
	}
	w.mu.Lock()
	stopping := r.stop != stopNone
	w.mu.Unlock()
	if stopping {
		return w.stoppedOutcome(r, nil)
	}
	hr.emit("stderr", []byte("error: "+res.err.Error()+"\n"))
	return failed(pb.RunReason_RUN_REASON_HANDLER_ERROR, res.err.Error())
}

func failed(reason pb.RunReason, msg string) outcome {
	return outcome{state: pb.RunState_RUN_STATE_FAILED, reason: reason, err: msg}
}

// stoppedOutcome is the outcome of a run ended by a cancel or its timeout.
func (w *Worker) stoppedOutcome(r *run, exitCode *int32) outcome {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch r.stop {
	case stopTimedOut:
		return outcome{
			state: pb.RunState_RUN_STATE_TIMED_OUT, reason: pb.RunReason_RUN_REASON_TIMEOUT, exitCode: exitCode,
			err: "timed out after " + r.lease.GetTimeout().AsDuration().String(),
		}
	case stopCancelled:
		name := strings.TrimPrefix(r.reason.String(), "RUN_REASON_")
		return outcome{state: pb.RunState_RUN_STATE_CANCELLED, reason: r.reason, exitCode: exitCode, err: "cancelled (" + name + ")"}
	default: // lost or abandoned: never reported
		return outcome{state: pb.RunState_RUN_STATE_CANCELLED, reason: pb.RunReason_RUN_REASON_WORKER_LOST, exitCode: exitCode}
	}
}

// finish reports the run's result, unless its lease was lost.
func (w *Worker) finish(r *run, out outcome) {
	ended := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	r.watchdog.Stop()
	r.cancel()
	if w.runs[r.lease.RunId] == r {
		delete(w.runs, r.lease.RunId)
	}
	if !r.lost() && !ended.Before(r.deadline) {
		// Past its deadline (the reaper may have killed it first): the lease is gone.
		w.Stats.Expired.Add(1)
		w.stopRun(r, stopLost, 0, "lease expired without renewal")
	}
	if r.lost() {
		w.Stats.Dropped.Add(1)
		return
	}
	res := &pb.RunResult{
		RunId:        r.lease.RunId,
		FencingToken: r.token,
		JobId:        r.lease.JobId,
		State:        out.state,
		Reason:       out.reason,
		Error:        out.err,
		EndedAt:      timestamp(ended),
	}
	if r.started {
		res.StartedAt = timestamp(r.startedAt)
	} else if out.state != pb.RunState_RUN_STATE_CANCELLED { // a cancelled one never started
		res.StartedAt = timestamp(ended)
	}
	if out.exitCode != nil {
		res.HasExitCode, res.ExitCode = true, *out.exitCode
	}
	w.Stats.Reported.Add(1)
	if r.seeking() { // no poller renews its lease now: offered to every one
		w.adrift.add(res)
		for _, l := range w.links {
			if l.connected {
				w.offerAdriftLocked(l)
			}
		}
	} else {
		r.link.unacked[resultKey{res.RunId, res.FencingToken}] = res
		r.link.out.addResult(res)
	}
	w.log.Info("run ended", "run", res.RunId, "state", res.State.String(), "reason", res.Reason.String())
}
