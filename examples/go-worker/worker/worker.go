// Package worker is a shardcron worker written against the generated Go stubs
// alone: it connects to pollers over WorkerService.Connect, runs what they lease
// (registered Go handlers, and command tasks as subprocesses), heartbeats the
// leases it holds, stops a run the moment its lease is revoked or its deadline
// passes, reports results and resends unacknowledged ones after a reconnect. When
// a run's shard moves to another poller, its lease and result follow it there
// (shardmove.go), so a shard move costs no second execution.
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
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/shardcron/shardcron/gen/go/shardcron/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
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
	// TLS for every stream (ClientTLS); nil = plaintext.
	TransportCredentials credentials.TransportCredentials
	Token                string // sent as "authorization: Bearer Token" on every stream; "" = none
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

	// its poller said it does not serve the run's shard: the lease is named to every
	// poller until one renews it (seeking, shardmove.go)
	adrift bool

	stop      stopKind
	reason    pb.RunReason // of a cancel
	started   bool
	startedAt time.Time
	done      chan struct{} // closed when the execution goroutine has finished
}

// ref names the lease, with its job: a poller maps the job to a shard, and answers
// not_owner for a shard it does not serve.
func (r *run) ref() *pb.LeaseRef {
	return &pb.LeaseRef{RunId: r.lease.RunId, FencingToken: r.token, JobId: r.lease.JobId}
}
func (r *run) lost() bool { return r.stop == stopLost || r.stop == stopAbandoned }

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
	adrift  *adriftResults // results whose poller no longer serves their shard
	credits *int32         // last Credits limit sent (0 while draining); nil = none
	active  sync.WaitGroup
	running atomic.Bool

	Stats Stats
}

// Stats counts what happened, for logs and tests.
type Stats struct {
	Leased, Refused, Started, Renewed, Revoked, Expired, Cancels atomic.Int64
	Reported, Accepted, Rejected, Dropped, Reconnects, Moved     atomic.Int64
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
		adrift:   newAdriftResults(),
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
		unacked := w.adrift.len()
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
	results = append(results, w.adrift.runIDs()...)
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
	l.streams++
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
		WaitsForDue:  true, // execute holds a lease until its due_at
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
	hello.Held = append(hello.Held, w.seekingRefsLocked(l)...)
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
	hello.PendingResults = append(hello.PendingResults, w.adrift.offer(streamKey{l, l.streams})...)
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
// the Renewal that answers it extends the lease from that instant. It names the
// seeking leases of other links too, and queues the adrift results l was not asked
// about (shardmove.go). It is sent
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
	hb.Leases = append(hb.Leases, w.seekingRefsLocked(l)...)
	w.offerAdriftLocked(l)
	return hb
}
