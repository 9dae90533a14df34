package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	pb "github.com/shardcron/shardcron/gen/go/shardcron/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fakePoller plays the poller's side of WorkerService.Connect, scripted by a test.
type fakePoller struct {
	pb.UnimplementedWorkerServiceServer
	streams chan *fakeStream
}

type fakeStream struct {
	srv  pb.WorkerService_ConnectServer
	md   metadata.MD // the stream's request metadata
	msgs chan *pb.WorkerMessage
	end  chan struct{}
}

func (f *fakePoller) Connect(srv pb.WorkerService_ConnectServer) error {
	md, _ := metadata.FromIncomingContext(srv.Context())
	s := &fakeStream{srv: srv, md: md, msgs: make(chan *pb.WorkerMessage, 1000), end: make(chan struct{})}
	go func() {
		defer close(s.msgs)
		for {
			m, err := srv.Recv()
			if err != nil {
				return
			}
			s.msgs <- m
		}
	}()
	f.streams <- s
	select {
	case <-s.end:
	case <-srv.Context().Done():
	}
	return nil
}

func (s *fakeStream) send(t *testing.T, m *pb.PollerMessage) {
	t.Helper()
	if err := s.srv.Send(m); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// next returns the next message of the given kind ("hello", "started", ...),
// skipping others listed in skip; fails on anything else or after the timeout.
func (s *fakeStream) next(t *testing.T, kind string, timeout time.Duration, skip ...string) *pb.WorkerMessage {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				t.Fatalf("stream ended while waiting for %s", kind)
			}
			k := kindOf(m)
			if k == kind {
				return m
			}
			if k == "heartbeat" && len(m.GetHeartbeat().Leases) == 0 {
				continue // the worker heartbeats while idle too
			}
			if !contains(skip, k) {
				t.Fatalf("got %s while waiting for %s: %v", k, kind, m)
			}
		case <-deadline:
			t.Fatalf("no %s within %s", kind, timeout)
		}
	}
}

// none asserts that no message of the given kind arrives within d.
func (s *fakeStream) none(t *testing.T, kind string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				return
			}
			if kindOf(m) == kind {
				t.Fatalf("unexpected %s: %v", kind, m)
			}
		case <-deadline:
			return
		}
	}
}

func kindOf(m *pb.WorkerMessage) string {
	switch m.Body.(type) {
	case *pb.WorkerMessage_Hello:
		return "hello"
	case *pb.WorkerMessage_Credits:
		return "credits"
	case *pb.WorkerMessage_Heartbeat:
		return "heartbeat"
	case *pb.WorkerMessage_Started:
		return "started"
	case *pb.WorkerMessage_Refused:
		return "refused"
	case *pb.WorkerMessage_Results:
		return "results"
	case *pb.WorkerMessage_Output:
		return "output"
	}
	return fmt.Sprintf("%T", m.Body)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func welcome(ttl, heartbeat time.Duration) *pb.PollerMessage {
	return &pb.PollerMessage{Body: &pb.PollerMessage_Welcome{Welcome: &pb.Welcome{
		PollerId: "fake", Epoch: 7, LeaseTtl: durationpb.New(ttl), HeartbeatInterval: durationpb.New(heartbeat),
	}}}
}

func handlerLease(runID string, token uint64, name, payload string, ttl time.Duration) *pb.Lease {
	return &pb.Lease{
		RunId: runID, JobId: "job-" + runID, Owner: "default", FencingToken: token, Attempt: 1,
		Task:     &pb.Task{Kind: &pb.Task_Handler{Handler: &pb.HandlerTask{Name: name, Payload: []byte(payload)}}},
		LeaseTtl: durationpb.New(ttl),
	}
}

func leases(ls ...*pb.Lease) *pb.PollerMessage {
	return &pb.PollerMessage{Body: &pb.PollerMessage_Leases{Leases: &pb.Leases{Leases: ls}}}
}

// harness starts fake pollers and a worker connected to them all, with handlers:
// upper; block (waits for ctx, reports on ctxDone); hold (waits for release or ctx).
type harness struct {
	poller  *fakePoller   // the first of pollers
	pollers []*fakePoller // one per target, in the worker's target order
	servers []*grpc.Server
	worker  *Worker
	ctxDone chan string   // run ids whose handler saw its context end
	release chan struct{} // closing it ends every hold run
	stop    func()
}

func newHarness(t *testing.T, slots int) *harness {
	t.Helper()
	return newHarnessOf(t, slots, 1, nil)
}

// newHarnessOf starts n fake pollers; extra options go to the worker's Config
// (tweak may be nil).
func newHarnessOf(t *testing.T, slots, n int, tweak func(*Config)) *harness {
	t.Helper()
	h := &harness{ctxDone: make(chan string, 10), release: make(chan struct{})}
	var targets []string
	for range n {
		fp, srv, addr := startFakePoller(t)
		h.pollers = append(h.pollers, fp)
		h.servers = append(h.servers, srv)
		targets = append(targets, addr)
	}
	h.poller = h.pollers[0]
	cfg := Config{
		Targets: targets, ID: "test-worker", Slots: slots, RunCommands: true,
		KillGrace: 200 * time.Millisecond,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	w := New(cfg)
	h.worker = w
	w.Handle("upper", func(_ context.Context, r *Run) ([]byte, error) {
		return []byte(strings.ToUpper(string(r.Payload))), nil
	})
	w.Handle("block", func(ctx context.Context, r *Run) ([]byte, error) {
		fmt.Fprintln(r.Stdout(), "blocking")
		<-ctx.Done()
		h.ctxDone <- r.RunID
		return nil, ctx.Err()
	})
	w.Handle("hold", func(ctx context.Context, r *Run) ([]byte, error) {
		select {
		case <-h.release:
			return nil, nil
		case <-ctx.Done():
			h.ctxDone <- r.RunID
			return nil, ctx.Err()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	h.stop = func() {
		cancel()
		<-done
		for _, srv := range h.servers {
			srv.Stop()
		}
	}
	t.Cleanup(h.stop)
	return h
}

// startFakePoller serves a fakePoller on a free loopback port (options: e.g. TLS).
func startFakePoller(t *testing.T, opts ...grpc.ServerOption) (*fakePoller, *grpc.Server, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	fp := &fakePoller{streams: make(chan *fakeStream, 10)}
	pb.RegisterWorkerServiceServer(srv, fp)
	go func() { _ = srv.Serve(lis) }()
	return fp, srv, lis.Addr().String()
}

func (h *harness) accept(t *testing.T) *fakeStream {
	t.Helper()
	return h.acceptOn(t, 0)
}

// acceptOn waits for the worker's next stream to poller i.
func (h *harness) acceptOn(t *testing.T, i int) *fakeStream {
	t.Helper()
	select {
	case s := <-h.pollers[i].streams:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("worker did not connect")
	}
	return nil
}

func TestHelloThenHandlerRunOutputBeforeResult(t *testing.T) {
	h := newHarness(t, 3)
	s := h.accept(t)
	hello := s.next(t, "hello", time.Second).GetHello()
	if hello.WorkerId != "test-worker" || hello.Slots != 3 || !hello.RunsCommands || len(hello.InstanceId) != 32 {
		t.Fatalf("bad hello: %v", hello)
	}
	if strings.Join(hello.Handlers, ",") != "block,hold,upper" {
		t.Fatalf("handlers: %v", hello.Handlers)
	}
	s.send(t, welcome(5*time.Second, time.Second))
	s.send(t, leases(handlerLease("r1", 7<<32|1, "upper", "shardcron", 5*time.Second)))
	started := s.next(t, "started", 2*time.Second).GetStarted()
	if len(started.Leases) != 1 || started.Leases[0].RunId != "r1" || started.Leases[0].FencingToken != 7<<32|1 {
		t.Fatalf("started: %v", started)
	}
	out := s.next(t, "output", 2*time.Second).GetOutput()
	if got := string(out.Chunks[0].Data); got != "SHARDCRON" || out.Chunks[0].Stream != "stdout" || out.Chunks[0].FencingToken != 7<<32|1 {
		t.Fatalf("output: %v", out)
	}
	res := s.next(t, "results", 2*time.Second).GetResults().Results[0]
	if res.RunId != "r1" || res.FencingToken != 7<<32|1 || res.State != pb.RunState_RUN_STATE_SUCCEEDED {
		t.Fatalf("result: %v", res)
	}
	if res.StartedAt == nil || res.EndedAt == nil {
		t.Fatalf("result without times: %v", res)
	}
	s.send(t, &pb.PollerMessage{Body: &pb.PollerMessage_Acks{Acks: &pb.ResultAcks{Acks: []*pb.ResultAck{
		{RunId: "r1", FencingToken: 7<<32 | 1, Accepted: true},
	}}}})
	waitFor(t, func() bool { return h.worker.Stats.Accepted.Load() == 1 })
}

func TestHeartbeatsRenewAndRevocationKillsWithoutResult(t *testing.T) {
	h := newHarness(t, 2)
	s := h.accept(t)
	s.next(t, "hello", time.Second)
	s.send(t, welcome(time.Second, 100*time.Millisecond))
	s.send(t, leases(handlerLease("r2", 5, "block", "", time.Second)))
	s.next(t, "started", 2*time.Second)
	// Renew for longer than one TTL: the run must keep going.
	end := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(end) {
		hb := s.next(t, "heartbeat", time.Second, "output").GetHeartbeat()
		if len(hb.Leases) != 1 || hb.Leases[0].RunId != "r2" || hb.Leases[0].FencingToken != 5 {
			t.Fatalf("heartbeat: %v", hb)
		}
		s.send(t, &pb.PollerMessage{Body: &pb.PollerMessage_Renewals{Renewals: &pb.Renewals{
			Renewals: []*pb.Renewal{{RunId: "r2", FencingToken: 5, Ok: true}}, LeaseTtl: durationpb.New(time.Second),
		}}})
	}
	select {
	case id := <-h.ctxDone:
		t.Fatalf("run %s stopped although renewed", id)
	default:
	}
	s.next(t, "heartbeat", time.Second, "output")
	s.send(t, &pb.PollerMessage{Body: &pb.PollerMessage_Renewals{Renewals: &pb.Renewals{
		Renewals: []*pb.Renewal{{RunId: "r2", FencingToken: 5, Ok: false}},
	}}})
	select {
	case <-h.ctxDone:
	case <-time.After(500 * time.Millisecond):
		t.Fatal("revoked run was not stopped")
	}
	s.none(t, "results", 500*time.Millisecond)
	if h.worker.Stats.Revoked.Load() != 1 || h.worker.Stats.Dropped.Load() != 1 {
		t.Fatalf("stats: revoked %d dropped %d", h.worker.Stats.Revoked.Load(), h.worker.Stats.Dropped.Load())
	}
}

func TestDeadlineWithoutRenewalKills(t *testing.T) {
	h := newHarness(t, 1)
	s := h.accept(t)
	s.next(t, "hello", time.Second)
	s.send(t, welcome(300*time.Millisecond, 100*time.Millisecond))
	start := time.Now()
	s.send(t, leases(handlerLease("r3", 9, "block", "", 300*time.Millisecond)))
	select { // heartbeats go unanswered: the worker must stop the run by itself
	case <-h.ctxDone:
	case <-time.After(2 * time.Second):
		t.Fatal("run outlived its lease")
	}
	if el := time.Since(start); el > 600*time.Millisecond {
		t.Fatalf("stopped %s after the lease, want about 300ms", el)
	}
	s.none(t, "results", 400*time.Millisecond)
	if h.worker.Stats.Expired.Load() != 1 {
		t.Fatalf("expired = %d", h.worker.Stats.Expired.Load())
	}
}

func TestCancelReportsCancelledWithReason(t *testing.T) {
	h := newHarness(t, 1)
	s := h.accept(t)
	s.next(t, "hello", time.Second)
	s.send(t, welcome(5*time.Second, time.Second))
	s.send(t, leases(handlerLease("r4", 11, "block", "", 5*time.Second)))
	s.next(t, "started", 2*time.Second)
	s.send(t, &pb.PollerMessage{Body: &pb.PollerMessage_Cancels{Cancels: &pb.Cancels{Cancels: []*pb.Cancel{
		{RunId: "r4", FencingToken: 999, Reason: pb.RunReason_RUN_REASON_REPLACED}, // stale token: ignored
	}}}})
	s.none(t, "results", 200*time.Millisecond)
	s.send(t, &pb.PollerMessage{Body: &pb.PollerMessage_Cancels{Cancels: &pb.Cancels{Cancels: []*pb.Cancel{
		{RunId: "r4", FencingToken: 11, Reason: pb.RunReason_RUN_REASON_REPLACED},
	}}}})
	res := s.next(t, "results", 2*time.Second, "output", "heartbeat").GetResults().Results[0]
	if res.State != pb.RunState_RUN_STATE_CANCELLED || res.Reason != pb.RunReason_RUN_REASON_REPLACED {
		t.Fatalf("result: %v", res)
	}
}

func TestCommandEnvExitCodeAndTimeout(t *testing.T) {
	h := newHarness(t, 2)
	s := h.accept(t)
	s.next(t, "hello", time.Second)
	s.send(t, welcome(5*time.Second, time.Second))
	cmd := func(id string, token uint64, script string, timeout time.Duration) *pb.Lease {
		l := &pb.Lease{RunId: id, JobId: "j", FencingToken: token, Attempt: 2, LeaseTtl: durationpb.New(5 * time.Second),
			Task: &pb.Task{Kind: &pb.Task_Command{Command: &pb.CommandTask{
				Argv: []string{"sh", "-c", script}, Env: map[string]string{"GREETING": "hi"}}}}}
		if timeout > 0 {
			l.Timeout = durationpb.New(timeout)
		}
		return l
	}
	s.send(t, leases(cmd("c1", 21, `echo "$GREETING $SHARDCRON_RUN_ID $SHARDCRON_ATTEMPT $SHARDCRON_FENCING_TOKEN"; exit 3`, 0)))
	var output string
	var res *pb.RunResult
	for res == nil {
		select {
		case m := <-s.msgs:
			switch kindOf(m) {
			case "output":
				for _, c := range m.GetOutput().Chunks {
					output += string(c.Data)
				}
			case "results":
				res = m.GetResults().Results[0]
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no result")
		}
	}
	if output != "hi c1 2 21\n" {
		t.Fatalf("output %q", output)
	}
	if res.State != pb.RunState_RUN_STATE_FAILED || !res.HasExitCode || res.ExitCode != 3 ||
		res.Reason != pb.RunReason_RUN_REASON_NON_ZERO_EXIT {
		t.Fatalf("result: %v", res)
	}
	s.send(t, leases(cmd("c2", 22, "sleep 30", 200*time.Millisecond)))
	res = s.next(t, "results", 5*time.Second, "output", "started", "heartbeat").GetResults().Results[0]
	if res.State != pb.RunState_RUN_STATE_TIMED_OUT || res.Reason != pb.RunReason_RUN_REASON_TIMEOUT || res.ExitCode != -15 {
		t.Fatalf("result: %v", res)
	}
}

func TestCommandOutputPrecedesResult(t *testing.T) {
	h := newHarness(t, 1)
	s := h.accept(t)
	s.next(t, "hello", time.Second)
	s.send(t, welcome(5*time.Second, time.Second))
	s.send(t, leases(&pb.Lease{RunId: "c3", FencingToken: 1, LeaseTtl: durationpb.New(5 * time.Second),
		Task: &pb.Task{Kind: &pb.Task_Command{Command: &pb.CommandTask{
			Argv: []string{"sh", "-c", `echo "$SHARDCRON_RUN_ID/$SHARDCRON_FENCING_TOKEN"; echo oops >&2`}}}}}))
	var stdout, stderr string
	for {
		m := s.next(t, "output", 5*time.Second, "started", "heartbeat") // a result first fails
		for _, c := range m.GetOutput().Chunks {
			if c.Stream == "stdout" {
				stdout += string(c.Data)
			} else {
				stderr += string(c.Data)
			}
		}
		if stdout != "" && stderr != "" {
			break
		}
	}
	if stdout != "c3/1\n" || stderr != "oops\n" {
		t.Fatalf("stdout %q stderr %q", stdout, stderr)
	}
	res := s.next(t, "results", 5*time.Second, "heartbeat").GetResults().Results[0]
	if res.State != pb.RunState_RUN_STATE_SUCCEEDED || res.ExitCode != 0 || !res.HasExitCode {
		t.Fatalf("result: %v", res)
	}
}

func TestReconnectResendsHeldLeasesAndPendingResults(t *testing.T) {
	h := newHarness(t, 2)
	s := h.accept(t)
	s.next(t, "hello", time.Second)
	s.send(t, welcome(5*time.Second, time.Second))
	s.send(t, leases(
		handlerLease("held", 31, "block", "", 5*time.Second),
		handlerLease("done", 32, "upper", "x", 5*time.Second),
	))
	s.next(t, "results", 2*time.Second, "started", "output")
	close(s.end) // the stream breaks before the result is acknowledged

	s2 := h.accept(t)
	hello := s2.next(t, "hello", 5*time.Second).GetHello()
	if len(hello.Held) != 1 || hello.Held[0].RunId != "held" || hello.Held[0].FencingToken != 31 {
		t.Fatalf("held: %v", hello.Held)
	}
	if len(hello.PendingResults) != 1 || hello.PendingResults[0].RunId != "done" ||
		hello.PendingResults[0].State != pb.RunState_RUN_STATE_SUCCEEDED {
		t.Fatalf("pending results: %v", hello.PendingResults)
	}
	s2.send(t, welcome(5*time.Second, time.Second))
	// the poller does not know the held lease any more: stop it
	s2.send(t, &pb.PollerMessage{Body: &pb.PollerMessage_Renewals{Renewals: &pb.Renewals{
		Renewals: []*pb.Renewal{{RunId: "held", FencingToken: 31, Ok: false}},
	}}})
	select {
	case id := <-h.ctxDone:
		if id != "held" {
			t.Fatalf("stopped %s", id)
		}
	case <-time.After(time.Second):
		t.Fatal("held run not stopped after ok=false")
	}
	s2.send(t, &pb.PollerMessage{Body: &pb.PollerMessage_Acks{Acks: &pb.ResultAcks{Acks: []*pb.ResultAck{
		{RunId: "done", FencingToken: 32, Accepted: false, Reason: "stale fencing token"},
	}}}})
	waitFor(t, func() bool { return h.worker.Stats.Rejected.Load() == 1 })
}

func TestDrainSendsZeroCredits(t *testing.T) {
	h := newHarness(t, 2)
	s := h.accept(t)
	s.next(t, "hello", time.Second)
	s.send(t, welcome(5*time.Second, time.Second))
	waitFor(t, h.worker.Connected)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	go func() { _ = h.worker.Drain(ctx) }()
	if c := s.next(t, "credits", 2*time.Second).GetCredits(); c.Limit != 0 {
		t.Fatalf("credits: %v", c)
	}
}

func TestOutboxOrderAndMerge(t *testing.T) {
	o := newOutbox()
	o.addOutput("a", 1, "stdout", []byte("he"))
	o.addOutput("a", 1, "stdout", []byte("llo"))
	o.addResult(&pb.RunResult{RunId: "a"})
	o.addStarted(&pb.LeaseRef{RunId: "b"}, time.Now())
	o.requestHeartbeat()
	msgs := o.drain(func() *pb.Heartbeat { return &pb.Heartbeat{} })
	var kinds []string
	for _, m := range msgs {
		kinds = append(kinds, kindOf(m))
	}
	if got := strings.Join(kinds, ","); got != "started,output,results,heartbeat" {
		t.Fatalf("order: %s", got)
	}
	if d := string(msgs[1].GetOutput().Chunks[0].Data); d != "hello" {
		t.Fatalf("merged output: %q", d)
	}
}

func TestBackoffBounds(t *testing.T) {
	for n := 0; n < 20; n++ {
		d := backoff(n)
		if d < backoffMin/2 || d > backoffMax {
			t.Fatalf("backoff(%d) = %s", n, d)
		}
	}
	if Epoch(3<<32|9) != 3 || Sequence(3<<32|9) != 9 {
		t.Fatal("token split")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHelloHoldsBackResultsWhoseOutputIsQueued(t *testing.T) {
	w := New(Config{Targets: []string{"unused:1"}, ID: "w", Slots: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	l := newLink(w, "unused:1")
	l.out.addOutput("x", 1, "stdout", []byte("tail of x"))
	l.unacked[resultKey{"x", 1}] = &pb.RunResult{RunId: "x", FencingToken: 1}
	l.unacked[resultKey{"y", 2}] = &pb.RunResult{RunId: "y", FencingToken: 2}
	w.mu.Lock()
	hello := w.helloLocked(l)
	w.mu.Unlock()
	if len(hello.PendingResults) != 1 || hello.PendingResults[0].RunId != "y" {
		t.Fatalf("pending results in Hello: %v", hello.PendingResults)
	}
	var kinds []string
	for _, m := range l.out.drain(func() *pb.Heartbeat { return nil }) {
		kinds = append(kinds, kindOf(m))
	}
	if got := strings.Join(kinds, ","); got != "output,results" {
		t.Fatalf("after Welcome: %s, want output,results", got)
	}
}

func TestLeaseDeadlineFromExpiresAtMinusMargin(t *testing.T) {
	now := time.Now()
	exp := timestamppb.New(now.Add(10 * time.Second))
	if got, want := leaseDeadline(exp, now, time.Hour), now.Add(10*time.Second-leaseSafetyMargin); !got.Equal(want) {
		t.Fatalf("deadline %s, want %s (expires_at - margin, whatever the ttl)", got, want)
	}
	if got := leaseDeadline(nil, now, 3*time.Second); !got.Equal(now.Add(3 * time.Second)) {
		t.Fatalf("without expires_at: %s, want now + ttl", got)
	}
	// expires_at 100 ms ahead is past once the margin is taken off
	if d := leaseDeadline(timestamppb.New(now.Add(100*time.Millisecond)), now, time.Hour); d.After(now) {
		t.Fatalf("deadline %s is not past", d)
	}
}

func TestLeasePastItsDeadlineIsRefusedAndNotRun(t *testing.T) {
	h := newHarness(t, 2)
	s := h.accept(t)
	s.next(t, "hello", time.Second)
	s.send(t, welcome(5*time.Second, time.Second))
	late := handlerLease("late", 41, "block", "", 5*time.Second)
	late.ExpiresAt = timestamppb.New(time.Now().Add(-time.Second)) // granted while we were frozen
	s.send(t, leases(late))
	ref := s.next(t, "refused", 2*time.Second).GetRefused().Leases
	if len(ref) != 1 || ref[0].RunId != "late" || ref[0].FencingToken != 41 {
		t.Fatalf("refused: %v", ref)
	}
	hb := s.next(t, "heartbeat", 2*time.Second).GetHeartbeat()
	if len(hb.Leases) != 0 {
		t.Fatalf("a refused lease is heartbeated: %v", hb)
	}
	s.none(t, "started", 300*time.Millisecond)
	if h.worker.Stats.Refused.Load() != 1 || h.worker.Stats.Started.Load() != 0 {
		t.Fatalf("refused %d started %d", h.worker.Stats.Refused.Load(), h.worker.Stats.Started.Load())
	}
}

func TestExpiresAtSetsDeadlineAndRenewalsMoveIt(t *testing.T) {
	h := newHarness(t, 1)
	s := h.accept(t)
	s.next(t, "hello", time.Second)
	// a long TTL everywhere: only expires_at can end the run this early
	s.send(t, welcome(time.Minute, 100*time.Millisecond))
	lease := handlerLease("exp", 51, "block", "", time.Minute)
	lease.ExpiresAt = timestamppb.New(time.Now().Add(700 * time.Millisecond))
	s.send(t, leases(lease))
	s.next(t, "started", 2*time.Second)
	renewed := 0
	for renewed < 3 { // each ok renewal moves the deadline to its own expires_at
		hb := s.next(t, "heartbeat", time.Second, "output").GetHeartbeat()
		if len(hb.Leases) == 0 {
			continue
		}
		s.send(t, &pb.PollerMessage{Body: &pb.PollerMessage_Renewals{Renewals: &pb.Renewals{
			Renewals: []*pb.Renewal{{RunId: "exp", FencingToken: 51, Ok: true,
				ExpiresAt: timestamppb.New(time.Now().Add(700 * time.Millisecond))}},
			LeaseTtl: durationpb.New(time.Minute),
		}}})
		renewed++
	}
	select {
	case <-h.ctxDone:
		t.Fatal("run stopped although renewed")
	default:
	}
	stopped := time.Now()
	// no more renewals: the run dies by the last expires_at minus the margin
	select {
	case <-h.ctxDone:
	case <-time.After(2 * time.Second):
		t.Fatal("run outlived the expires_at of its last renewal")
	}
	if el := time.Since(stopped); el > 700*time.Millisecond {
		t.Fatalf("stopped %s after the last renewal, want under 700ms", el)
	}
	s.none(t, "results", 300*time.Millisecond)
	if h.worker.Stats.Expired.Load() != 1 {
		t.Fatalf("expired = %d", h.worker.Stats.Expired.Load())
	}
}

// A lease ahead of its due_at (the worker says Hello.waits_for_due) is held until
// then: Started carries the real start, never earlier than due_at.
func TestALeaseAheadOfItsDueInstantStartsNoEarlier(t *testing.T) {
	h := newHarness(t, 1)
	s := h.accept(t)
	if !s.next(t, "hello", time.Second).GetHello().WaitsForDue {
		t.Fatal("hello does not say the worker waits for due_at")
	}
	s.send(t, welcome(5*time.Second, time.Second))
	due := time.Now().Add(500 * time.Millisecond)
	lease := handlerLease("r9", 21, "upper", "x", 5*time.Second)
	lease.DueAt = timestamppb.New(due)
	s.send(t, leases(lease))
	started := s.next(t, "started", 3*time.Second).GetStarted()
	if at := started.At.AsTime(); at.Before(due) {
		t.Fatalf("started at %v, before its due instant %v", at, due)
	}
	res := s.next(t, "results", 2*time.Second, "output", "heartbeat").GetResults().Results[0]
	if res.State != pb.RunState_RUN_STATE_SUCCEEDED || res.StartedAt.AsTime().Before(due) {
		t.Fatalf("result: %v", res)
	}
}

// A cancel while the lease waits for its due instant ends the run unstarted.
func TestACancelWhileWaitingForTheDueInstantEndsTheRunUnstarted(t *testing.T) {
	h := newHarness(t, 1)
	s := h.accept(t)
	s.next(t, "hello", time.Second)
	s.send(t, welcome(5*time.Second, time.Second))
	lease := handlerLease("r10", 22, "upper", "x", 5*time.Second)
	lease.DueAt = timestamppb.New(time.Now().Add(3 * time.Second))
	s.send(t, leases(lease))
	waitFor(t, func() bool { return h.worker.Stats.Leased.Load() == 1 })
	s.send(t, &pb.PollerMessage{Body: &pb.PollerMessage_Cancels{Cancels: &pb.Cancels{Cancels: []*pb.Cancel{
		{RunId: "r10", FencingToken: 22, Reason: pb.RunReason_RUN_REASON_CANCELLED_BY_USER},
	}}}})
	res := s.next(t, "results", 2*time.Second, "heartbeat").GetResults().Results[0]
	if res.State != pb.RunState_RUN_STATE_CANCELLED || res.Reason != pb.RunReason_RUN_REASON_CANCELLED_BY_USER || res.StartedAt != nil {
		t.Fatalf("result: %v", res)
	}
}
