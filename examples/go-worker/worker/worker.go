// Package worker is a shardcron worker written against the generated Go stubs
// alone: it connects to pollers over WorkerService.Connect, runs what they lease
// (registered Go handlers, and command tasks as subprocesses), heartbeats the
// leases it holds, stops a run the moment its lease is revoked or its deadline
// passes, reports results and resends unacknowledged ones after a reconnect.
//
// The protocol it implements is described in proto/README.md.
package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/shardcron/shardcron/gen/go/shardcron/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Version is sent in Hello.version.
const Version = "shardcron-go-worker/0.1.0"

const (
	defaultLeaseTTL      = 30 * time.Second // until a Welcome says otherwise
	maxPendingHeartbeats = 256
	// leaseSafetyMargin is taken off every expires_at the poller sends: the worker
	// ends a run that much before the poller's instant, which covers a worker clock
	// behind the poller's by less than it plus the poller's expiry grace (the Python
	// worker uses the same 250 ms; proto/README.md, "Clocks and the safety margin").
	leaseSafetyMargin = 250 * time.Millisecond
)

// leaseDeadline is when a run must be dead unless renewed, on this process's
// monotonic clock: expiresAt (the poller's absolute time) minus the safety margin,
// read against the wall clock once, at now; or now + ttl from a poller that sends
// no expires_at. A wall clock step later does not move it.
func leaseDeadline(expiresAt *timestamppb.Timestamp, now time.Time, ttl time.Duration) time.Time {
	if expiresAt == nil {
		return now.Add(ttl)
	}
	return now.Add(expiresAt.AsTime().Sub(now) - leaseSafetyMargin)
}

// Handler serves one handler name. It must return soon after ctx is done (the run
// was cancelled, timed out or lost its lease). The returned bytes are appended to
// the run's stdout; a non-nil error fails the run (HANDLER_ERROR) unless the run
// was being stopped, in which case the stop decides the outcome.
type Handler func(ctx context.Context, run *Run) ([]byte, error)

// Run is what a handler sees of the run it serves.
type Run struct {
	RunID        string
	JobID        string
	JobName      string
	Owner        string
	Attempt      int32
	FencingToken uint64 // epoch<<32 | sequence: make side effects idempotent with it
	Payload      []byte
	FireAt       time.Time
	DueAt        time.Time
	emit         func(stream string, data []byte)
}

// Stdout is a writer into the run's kept stdout.
func (r *Run) Stdout() io.Writer { return streamWriter{r, "stdout"} }

// Stderr is a writer into the run's kept stderr.
func (r *Run) Stderr() io.Writer { return streamWriter{r, "stderr"} }

type streamWriter struct {
	r      *Run
	stream string
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.r.emit(w.stream, append([]byte(nil), p...))
	return len(p), nil
}

// Config of a Worker.
type Config struct {
	Targets     []string          // poller addresses "host:port"; one stream each
	ID          string            // stable for the process's life; default host-pid
	Slots       int               // runs at once (Hello.slots)
	Owner       string            // sent as x-shardcron-owner metadata; "" = none
	Labels      map[string]string // Hello.labels
	CPUMillis   int32
	MemoryMB    int32
	RunCommands bool          // serve CommandTask runs (Hello.runs_commands)
	KillGrace   time.Duration // SIGTERM -> SIGKILL, and how long a cancelled handler may take
	InheritEnv  bool          // commands get the whole environment, not only PATH, HOME, LANG
	Logger      *slog.Logger
	DialOptions []grpc.DialOption // extra options for every link
}

type stopKind int

const (
	stopNone      stopKind = iota
	stopCancelled          // Cancel from the poller: report CANCELLED
	stopTimedOut           // Lease.timeout passed: report TIMED_OUT
	stopLost               // lease revoked or expired: kill now, report nothing
	stopAbandoned          // worker shutting down without drain: report nothing
)

// run is the worker's book of one lease.
type run struct {
	lease    *pb.Lease
	link     *link
	token    uint64
	slots    int
	deadline time.Time   // the run must be dead by then unless renewed
	pending  []time.Time // send times of heartbeats (or Hello) naming it, unanswered
	watchdog *time.Timer
	pgid     int // a command's process group while it runs (its reaper holds the deadline too); 0 = none

	ctx     context.Context // the handler's / command's context
	cancel  context.CancelFunc
	killNow chan struct{} // closed when the lease is lost: no grace period

	stop      stopKind
	reason    pb.RunReason // of a cancel
	started   bool
	startedAt time.Time
	done      chan struct{} // closed when the execution goroutine has finished
}

func (r *run) ref() *pb.LeaseRef { return &pb.LeaseRef{RunId: r.lease.RunId, FencingToken: r.token} }
func (r *run) lost() bool        { return r.stop == stopLost || r.stop == stopAbandoned }

type resultKey struct {
	runID string
	token uint64
}

// Worker runs leases from one or more pollers.
type Worker struct {
	cfg      Config
	instance string // random per process, sent in every Hello: tells a reconnect from another process with our id
	log      *slog.Logger
	handlers map[string]Handler
	pool     *slotPool
	reaper   reaperClient

	mu      sync.Mutex
	runs    map[string]*run
	links   []*link
	credits *int32 // last Credits limit sent (0 while draining); nil = none
	active  sync.WaitGroup
	running atomic.Bool

	Stats Stats
}

// Stats counts what happened, for logs and tests.
type Stats struct {
	Leased, Refused, Started, Renewed, Revoked, Expired, Cancels atomic.Int64
	Reported, Accepted, Rejected, Dropped, Reconnects            atomic.Int64
}

// New returns a worker; register handlers with Handle before Run.
func New(cfg Config) *Worker {
	if cfg.Slots < 1 {
		cfg.Slots = 1
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Worker{
		cfg:      cfg,
		instance: newInstanceID(),
		log:      cfg.Logger.With("worker", cfg.ID),
		handlers: map[string]Handler{},
		pool:     newSlotPool(cfg.Slots),
		runs:     map[string]*run{},
	}
}

// newInstanceID is random per process: a poller lets a new stream replace a connected
// worker's only when the Hello carries the same one (the process reconnecting).
func newInstanceID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b)
}

// ID is the worker id sent in Hello.
func (w *Worker) ID() string { return w.cfg.ID }

// Handle registers h under name; call before Run.
func (w *Worker) Handle(name string, h Handler) {
	if w.running.Load() {
		panic("worker: Handle after Run")
	}
	w.handlers[name] = h
}

func (w *Worker) handlerNames() []string {
	names := make([]string, 0, len(w.handlers))
	for n := range w.handlers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Run connects to every target and serves leases until ctx is done. Then runs
// still going are stopped and not reported (their leases expire and the pollers
// lease them again); call Drain first for a graceful stop.
func (w *Worker) Run(ctx context.Context) error {
	if len(w.cfg.Targets) == 0 {
		return errors.New("worker: no target")
	}
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	linkCtx, stopLinks := context.WithCancel(context.Background())
	defer stopLinks()
	var links sync.WaitGroup
	for _, addr := range w.cfg.Targets {
		l := newLink(w, addr)
		w.mu.Lock()
		w.links = append(w.links, l)
		w.mu.Unlock()
		links.Add(1)
		go func() { defer links.Done(); l.run(linkCtx) }()
	}
	<-ctx.Done()
	w.mu.Lock()
	for _, r := range w.runs {
		w.stopRun(r, stopAbandoned, 0, "worker stopping")
	}
	w.mu.Unlock()
	waitTimeout(&w.active, w.cfg.KillGrace+time.Second)
	w.reaper.close()
	stopLinks()
	links.Wait()
	return nil
}

// Drain takes no new leases (Credits 0 on every stream) and waits until every run
// has ended and its result was acknowledged, or ctx is done.
func (w *Worker) Drain(ctx context.Context) error {
	w.mu.Lock()
	zero := int32(0)
	w.credits = &zero
	for _, l := range w.links {
		l.out.setCredits(0)
	}
	w.mu.Unlock()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		running := len(w.runs)
		unacked := 0
		for _, l := range w.links {
			unacked += len(l.unacked)
		}
		w.mu.Unlock()
		if running == 0 && unacked == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain: %s: %w", w.drainPending(), ctx.Err())
		case <-tick.C:
		}
	}
}

// drainPending says what a drain still waits for: runs not ended (by id) and
// results not acknowledged.
func (w *Worker) drainPending() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var runs, results []string
	for _, r := range w.sortedRuns() {
		runs = append(runs, r.lease.RunId)
	}
	for _, l := range w.links {
		for k := range l.unacked {
			results = append(results, k.runID)
		}
	}
	sort.Strings(results)
	return fmt.Sprintf("%d runs still running %v, %d results not acknowledged %v",
		len(runs), runs, len(results), results)
}

// Connected reports whether at least one stream has been welcomed and is up.
func (w *Worker) Connected() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.links {
		if l.connected {
			return true
		}
	}
	return false
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// --- messages to build (called by links, w.mu held) ---------------------------------

// helloLocked builds the Hello of a new stream of l and queues, for after Welcome,
// what the old stream's queue held that still matters.
func (w *Worker) helloLocked(l *link) *pb.Hello {
	now := time.Now()
	l.out.reset()
	hello := &pb.Hello{
		WorkerId:     w.cfg.ID,
		Slots:        int32(w.cfg.Slots),
		CpuMillis:    w.cfg.CPUMillis,
		MemoryMb:     w.cfg.MemoryMB,
		Labels:       w.cfg.Labels,
		Handlers:     w.handlerNames(),
		RunsCommands: w.cfg.RunCommands,
		Version:      Version,
		InstanceId:   w.instance,
	}
	for _, r := range w.sortedRuns() {
		if r.link != l || r.lost() {
			continue
		}
		// Heartbeats of the old stream will never be answered; the Renewal for
		// Hello.held will, and the lease then holds from now + lease_ttl.
		r.pending = append(r.pending[:0], now)
		hello.Held = append(hello.Held, r.ref())
		if r.started { // the old stream's Started may have been lost: say it again
			l.out.addStarted(r.ref(), r.startedAt)
		}
	}
	keys := make([]resultKey, 0, len(l.unacked))
	for k := range l.unacked {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].runID < keys[j].runID })
	for _, k := range keys {
		res := l.unacked[k]
		if l.out.hasOutputFor(k.runID) {
			// The poller ends the run when it reads the result and then drops its
			// output: a result whose output is still queued goes after that output.
			l.out.addResult(res)
		} else {
			hello.PendingResults = append(hello.PendingResults, res)
		}
	}
	if w.credits != nil {
		l.out.setCredits(*w.credits)
	}
	return hello
}

func (w *Worker) sortedRuns() []*run {
	runs := make([]*run, 0, len(w.runs))
	for _, r := range w.runs {
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].lease.RunId < runs[j].lease.RunId })
	return runs
}

// heartbeat names every lease of l still held, and remembers when it was sent:
// the Renewal that answers it extends the lease from that instant. It is sent
// even empty: a poller closes the stream of a worker silent past 2.5 heartbeat
// intervals, and one that heartbeats while idle is never leased to when frozen.
func (w *Worker) heartbeat(l *link) *pb.Heartbeat {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	hb := &pb.Heartbeat{}
	for _, r := range w.sortedRuns() {
		if r.link != l || r.lost() {
			continue
		}
		if len(r.pending) < maxPendingHeartbeats {
			r.pending = append(r.pending, now) // when full, keep the oldest: the safe side
		}
		hb.Leases = append(hb.Leases, r.ref())
	}
	return hb
}

// --- messages received ---------------------------------------------------------------

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
			key := resultKey{a.RunId, a.FencingToken}
			if _, ok := l.unacked[key]; !ok {
				continue
			}
			delete(l.unacked, key)
			if a.Accepted {
				w.Stats.Accepted.Add(1)
			} else {
				w.Stats.Rejected.Add(1)
				w.log.Info("result rejected", "run", a.RunId, "token", a.FencingToken, "reason", a.Reason)
			}
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
		if r == nil || r.link != l || r.lost() || r.token != ren.FencingToken {
			continue
		}
		var sent time.Time
		if len(r.pending) > 0 {
			sent, r.pending = r.pending[0], r.pending[1:]
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
		// The later deadline wins: a late renewal (we were frozen) moves nothing.
		if d.After(r.deadline) {
			r.deadline = d
			if r.pgid != 0 {
				w.reaper.setDeadline(r.pgid, d)
			}
			r.watchdog.Reset(time.Until(d))
		}
		w.Stats.Renewed.Add(1)
	}
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

// --- running a lease ---------------------------------------------------------------

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
		lost := r.lost()
		w.mu.Unlock()
		if !lost { // the poller drops output of a run it no longer leases to us
			r.link.out.addOutput(r.lease.RunId, r.lease.FencingToken, stream, data)
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
	started := r.startedAt
	if started.IsZero() {
		started = ended
	}
	res := &pb.RunResult{
		RunId:        r.lease.RunId,
		FencingToken: r.token,
		State:        out.state,
		Reason:       out.reason,
		Error:        out.err,
		StartedAt:    timestamp(started),
		EndedAt:      timestamp(ended),
	}
	if out.exitCode != nil {
		res.HasExitCode, res.ExitCode = true, *out.exitCode
	}
	r.link.unacked[resultKey{res.RunId, res.FencingToken}] = res
	r.link.out.addResult(res)
	w.Stats.Reported.Add(1)
	w.log.Info("run ended", "run", res.RunId, "state", res.State.String(), "reason", res.Reason.String())
}

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
