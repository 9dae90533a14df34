package worker

import (
	"context"
	"testing"
	"time"

	pb "github.com/shardcron/shardcron/gen/go/shardcron/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// shardMove is a worker streaming to two fake pollers, "old" and "new", running r1
// (handler hold, job job-r1, token 7) leased by old.
type shardMove struct {
	h        *harness
	old, new *fakeStream
}

func startShardMove(t *testing.T) *shardMove {
	t.Helper()
	h := newHarnessOf(t, 2, 2, nil)
	m := &shardMove{h: h, old: h.acceptOn(t, 0), new: h.acceptOn(t, 1)}
	for _, s := range []*fakeStream{m.old, m.new} {
		s.next(t, "hello", time.Second)
		s.send(t, welcome(5*time.Second, 100*time.Millisecond))
	}
	waitFor(t, func() bool { return connectedLinks(h.worker) == 2 })
	m.old.send(t, leases(handlerLease("r1", 7, "hold", "", 5*time.Second)))
	m.old.next(t, "started", 2*time.Second, "heartbeat")
	return m
}

func connectedLinks(w *Worker) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.links {
		if l.connected {
			n++
		}
	}
	return n
}

// naming returns the next heartbeat of s that names runID (skipping other messages).
func naming(t *testing.T, s *fakeStream, runID string) *pb.LeaseRef {
	t.Helper()
	deadline := time.After(3 * time.Second)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				t.Fatalf("stream ended while waiting for a heartbeat naming %s", runID)
			}
			for _, ref := range m.GetHeartbeat().GetLeases() {
				if ref.RunId == runID {
					return ref
				}
			}
		case <-deadline:
			t.Fatalf("no heartbeat named %s", runID)
		}
	}
}

// notNaming asserts that no heartbeat of s names runID within d.
func notNaming(t *testing.T, s *fakeStream, runID string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case m := <-s.msgs:
			for _, ref := range m.GetHeartbeat().GetLeases() {
				if ref.RunId == runID {
					t.Fatalf("named %s: %v", runID, m)
				}
			}
		case <-deadline:
			return
		}
	}
}

func renewal(ref *pb.LeaseRef, ok, notOwner bool) *pb.PollerMessage {
	ren := &pb.Renewal{RunId: ref.RunId, FencingToken: ref.FencingToken, Ok: ok, NotOwner: notOwner}
	if ok {
		ren.ExpiresAt = timestamppb.New(time.Now().Add(5 * time.Second))
	}
	return &pb.PollerMessage{Body: &pb.PollerMessage_Renewals{Renewals: &pb.Renewals{Renewals: []*pb.Renewal{ren}}}}
}

func ack(res *pb.RunResult, accepted, notOwner bool) *pb.PollerMessage {
	return &pb.PollerMessage{Body: &pb.PollerMessage_Acks{Acks: &pb.ResultAcks{Acks: []*pb.ResultAck{
		{RunId: res.RunId, FencingToken: res.FencingToken, Accepted: accepted, NotOwner: notOwner},
	}}}}
}

// A poller answers not_owner (the run's shard moved): the lease is named to the
// other poller, whose refusal does not kill the run and whose renewal makes it the
// lease's own; the result goes there.
func TestLeaseWhoseShardMovedGoesToThePollerThatRenewsIt(t *testing.T) {
	m := startShardMove(t)
	w := m.h.worker
	notNaming(t, m.new, "r1", 400*time.Millisecond) // its own poller renews it
	ref := naming(t, m.old, "r1")
	if ref.JobId != "job-r1" {
		t.Fatalf("lease named without its job: %v", ref)
	}
	m.old.send(t, renewal(ref, false, true))

	ref = naming(t, m.new, "r1")
	if ref.JobId != "job-r1" || ref.FencingToken != 7 {
		t.Fatalf("named to the other poller as %v", ref)
	}
	m.new.send(t, renewal(ref, false, false)) // an older poller refuses what it does not serve
	naming(t, m.new, "r1")                    // still seeking: the refusal killed nothing
	if w.Stats.Revoked.Load() != 0 || w.Stats.Dropped.Load() != 0 || len(m.h.ctxDone) != 0 {
		t.Fatalf("a refusal from another poller stopped the run: revoked %d dropped %d",
			w.Stats.Revoked.Load(), w.Stats.Dropped.Load())
	}
	m.new.send(t, renewal(ref, true, false))
	waitFor(t, func() bool { return w.Stats.Moved.Load() == 1 })

	close(m.h.release)
	res := m.new.next(t, "results", 3*time.Second, "heartbeat", "output").GetResults().Results[0]
	if res.RunId != "r1" || res.JobId != "job-r1" || res.State != pb.RunState_RUN_STATE_SUCCEEDED {
		t.Fatalf("result at the new owner: %v", res)
	}
	m.new.send(t, ack(res, true, false))
	waitFor(t, func() bool { return w.Stats.Accepted.Load() == 1 })
	m.old.none(t, "results", 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
}

// A result reaches the old owner after the move: it answers not_owner, and the
// result is offered to the other poller and forgotten once accepted there.
func TestResultWhoseShardMovedIsOfferedToTheOtherPollers(t *testing.T) {
	m := startShardMove(t)
	w := m.h.worker
	close(m.h.release)
	res := m.old.next(t, "results", 3*time.Second, "heartbeat", "output").GetResults().Results[0]
	if res.JobId != "job-r1" {
		t.Fatalf("result without its job: %v", res)
	}
	m.old.send(t, ack(res, false, true))
	offered := m.new.next(t, "results", 3*time.Second, "heartbeat").GetResults().Results[0]
	if offered.RunId != "r1" || offered.FencingToken != 7 || offered.State != pb.RunState_RUN_STATE_SUCCEEDED {
		t.Fatalf("offered to the other poller: %v", offered)
	}
	m.new.send(t, ack(offered, true, false))
	waitFor(t, func() bool { return w.Stats.Accepted.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if w.Stats.Rejected.Load() != 0 {
		t.Fatalf("rejected %d", w.Stats.Rejected.Load())
	}
}

// The poller that leased a run dies with its result unacknowledged, and another
// run of it still going: the lease is named to the surviving poller, which adopted
// the shard and renews it; both results go there.
func TestLeasesAndResultsOfADeadPollerGoToTheOneThatServesTheirShard(t *testing.T) {
	m := startShardMove(t)
	w := m.h.worker
	m.old.send(t, leases(handlerLease("r2", 8, "upper", "x", 5*time.Second)))
	done := m.old.next(t, "results", 3*time.Second, "heartbeat", "output", "started").GetResults().Results[0]
	if done.RunId != "r2" {
		t.Fatalf("result: %v", done)
	}
	m.h.servers[0].Stop() // the old poller dies before it acknowledges r2

	ref := naming(t, m.new, "r1")
	m.new.send(t, renewal(ref, true, false))
	waitFor(t, func() bool { return w.Stats.Moved.Load() == 1 })
	got := map[string]*pb.RunResult{}
	close(m.h.release)
	for len(got) < 2 {
		for _, res := range m.new.next(t, "results", 3*time.Second, "heartbeat", "output").GetResults().Results {
			got[res.RunId] = res
			m.new.send(t, ack(res, true, false))
		}
	}
	if got["r2"].FencingToken != 8 || got["r1"].FencingToken != 7 || got["r1"].JobId != "job-r1" {
		t.Fatalf("results at the surviving poller: %v", got)
	}
	waitFor(t, func() bool { return w.Stats.Accepted.Load() == 2 })
}

func TestAdriftResultOfferedOncePerStreamUntilSettled(t *testing.T) {
	a := newAdriftResults()
	l1, l2 := &link{}, &link{}
	res := &pb.RunResult{RunId: "r", FencingToken: 3}
	a.add(res)
	a.add(res) // once
	if got := a.offer(streamKey{l1, 1}); len(got) != 1 {
		t.Fatalf("first offer: %v", got)
	}
	if got := a.offer(streamKey{l1, 1}); len(got) != 0 {
		t.Fatalf("one copy in flight per stream: %v", got)
	}
	if got := a.offer(streamKey{l2, 1}); len(got) != 1 {
		t.Fatalf("another poller: %v", got)
	}
	if got := a.offer(streamKey{l1, 2}); len(got) != 1 {
		t.Fatalf("a new stream of the same link: %v", got)
	}
	a.notHere(streamKey{l1, 2}, resultKey{"r", 3})
	if got := a.offer(streamKey{l1, 2}); len(got) != 1 {
		t.Fatalf("asked again after not_owner: %v", got)
	}
	if !a.settle(resultKey{"r", 3}) || a.settle(resultKey{"r", 3}) || a.len() != 0 {
		t.Fatal("settle")
	}
}
