package worker

import (
	"context"
	"sync"
	"time"

	pb "github.com/shardcron/shardcron/gen/go/shardcron/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Batching limits of the send queue (the Python worker uses the same numbers).
const (
	maxOutputMessage     = 64 << 10 // bytes of output per Output message
	maxResultsPerMessage = 500
	outputInterval       = 100 * time.Millisecond // output waits at most this long for more
	coalesceLinger       = 5 * time.Millisecond   // Started/Results wait this long for more
	maxBufferedOutput    = 8 << 20                // older output is dropped past this
)

type startedRef struct {
	ref *pb.LeaseRef
	at  time.Time
}

// outbox is the send queue of one poller link. Everything the worker sends after
// Welcome goes through it, so the order on the wire is fixed in one place:
// Credits, Refused, Started, Output, Results, Heartbeat. A run's output is always queued
// before its result, and next() sends all queued output before any queued
// result, so the poller sees a run's output before the result that ends it.
type outbox struct {
	mu          sync.Mutex
	refused     []*pb.LeaseRef
	started     []startedRef
	results     []*pb.RunResult
	chunks      []*pb.OutputChunk
	chunkBytes  int
	chunksSince time.Time // when the oldest buffered chunk was queued; zero = none
	credits     *int32
	heartbeat   bool
	dropped     int64 // output bytes dropped because the buffer was full
	wake        chan struct{}
}

func newOutbox() *outbox { return &outbox{wake: make(chan struct{}, 1)} }

func (o *outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

func (o *outbox) addStarted(ref *pb.LeaseRef, at time.Time) {
	o.mu.Lock()
	o.started = append(o.started, startedRef{ref: ref, at: at})
	o.mu.Unlock()
	o.signal()
}

func (o *outbox) addRefused(ref *pb.LeaseRef) {
	o.mu.Lock()
	o.refused = append(o.refused, ref)
	o.mu.Unlock()
	o.signal()
}

func (o *outbox) addResult(res *pb.RunResult) {
	o.mu.Lock()
	o.results = append(o.results, res)
	o.mu.Unlock()
	o.signal()
}

func (o *outbox) setCredits(limit int32) {
	o.mu.Lock()
	o.credits = &limit
	o.mu.Unlock()
	o.signal()
}

func (o *outbox) requestHeartbeat() {
	o.mu.Lock()
	o.heartbeat = true
	o.mu.Unlock()
	o.signal()
}

// addOutput queues output of a run under its lease's fencing token (the poller keeps
// output only with the token of the lease it holds); consecutive writes of one
// lease and stream merge.
func (o *outbox) addOutput(runID string, token uint64, stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	o.mu.Lock()
	wasEmpty := len(o.chunks) == 0
	for len(data) > 0 {
		n := min(len(data), maxOutputMessage)
		piece := data[:n]
		data = data[n:]
		if k := len(o.chunks); k > 0 {
			last := o.chunks[k-1]
			if last.RunId == runID && last.FencingToken == token && last.Stream == stream && len(last.Data)+len(piece) <= maxOutputMessage {
				last.Data = append(last.Data, piece...)
				o.chunkBytes += len(piece)
				continue
			}
		}
		o.chunks = append(o.chunks, &pb.OutputChunk{RunId: runID, FencingToken: token, Stream: stream, Data: append([]byte(nil), piece...)})
		o.chunkBytes += len(piece)
	}
	if wasEmpty {
		o.chunksSince = time.Now()
	}
	for o.chunkBytes > maxBufferedOutput && len(o.chunks) > 1 {
		o.chunkBytes -= len(o.chunks[0].Data)
		o.dropped += int64(len(o.chunks[0].Data))
		o.chunks = o.chunks[1:]
	}
	urgent := wasEmpty || o.chunkBytes >= maxOutputMessage
	o.mu.Unlock()
	if urgent {
		o.signal()
	}
}

// hasOutputFor tells whether output of the run is still waiting to be sent.
func (o *outbox) hasOutputFor(runID string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.chunks {
		if c.RunId == runID {
			return true
		}
	}
	return false
}

// reset starts a new stream: Refused, Started, Results, Credits and heartbeats of the old
// stream are dropped (Hello.held and Hello.pending_results carry what matters);
// buffered output is kept.
func (o *outbox) reset() {
	o.mu.Lock()
	o.refused = nil // the old stream's leases are no longer granted on the new one
	o.started = nil
	o.results = nil
	o.credits = nil
	o.heartbeat = false
	o.mu.Unlock()
}

// dueLocked: 0 when something must be sent now, a positive wait until buffered
// output is due, or -1 when the queue is empty.
func (o *outbox) dueLocked(now time.Time) time.Duration {
	if o.credits != nil || len(o.refused) > 0 || len(o.started) > 0 || len(o.results) > 0 || o.heartbeat {
		return 0
	}
	if len(o.chunks) > 0 {
		if o.chunkBytes >= maxOutputMessage {
			return 0
		}
		if wait := o.chunksSince.Add(outputInterval).Sub(now); wait > 0 {
			return wait
		}
		return 0
	}
	return -1
}

// next waits until something is due and returns it as wire messages, in order.
// buildHeartbeat is called (without the outbox lock held) when a heartbeat is due;
// it returns nil when there is nothing to heartbeat.
func (o *outbox) next(ctx context.Context, buildHeartbeat func() *pb.Heartbeat) ([]*pb.WorkerMessage, error) {
	for {
		o.mu.Lock()
		wait := o.dueLocked(time.Now())
		o.mu.Unlock()
		if wait == 0 {
			break
		}
		var timer <-chan time.Time
		if wait > 0 {
			t := time.NewTimer(wait)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-o.wake:
		case <-timer:
		}
	}
	o.mu.Lock()
	burst := len(o.started) > 0 || len(o.results) > 0
	o.mu.Unlock()
	if burst { // let the rest of a burst of starts/results join this message
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(coalesceLinger):
		}
	}
	return o.drain(buildHeartbeat), nil
}

func (o *outbox) drain(buildHeartbeat func() *pb.Heartbeat) []*pb.WorkerMessage {
	o.mu.Lock()
	var out []*pb.WorkerMessage
	if o.credits != nil {
		out = append(out, &pb.WorkerMessage{Body: &pb.WorkerMessage_Credits{Credits: &pb.Credits{Limit: *o.credits}}})
		o.credits = nil
	}
	if len(o.refused) > 0 {
		out = append(out, &pb.WorkerMessage{Body: &pb.WorkerMessage_Refused{Refused: &pb.Refused{Leases: o.refused}}})
		o.refused = nil
	}
	if len(o.started) > 0 {
		msg := &pb.Started{At: timestamppb.New(o.started[0].at)}
		for _, s := range o.started {
			msg.Leases = append(msg.Leases, s.ref)
		}
		out = append(out, &pb.WorkerMessage{Body: &pb.WorkerMessage_Started{Started: msg}})
		o.started = nil
	}
	if len(o.chunks) > 0 && (len(o.results) > 0 || o.chunkBytes >= maxOutputMessage ||
		time.Since(o.chunksSince) >= outputInterval) {
		var batch []*pb.OutputChunk
		size := 0
		for _, c := range o.chunks {
			if len(batch) > 0 && size+len(c.Data) > maxOutputMessage {
				out = append(out, &pb.WorkerMessage{Body: &pb.WorkerMessage_Output{Output: &pb.Output{Chunks: batch}}})
				batch, size = nil, 0
			}
			batch = append(batch, c)
			size += len(c.Data)
		}
		out = append(out, &pb.WorkerMessage{Body: &pb.WorkerMessage_Output{Output: &pb.Output{Chunks: batch}}})
		o.chunks, o.chunkBytes, o.chunksSince = nil, 0, time.Time{}
	}
	for len(o.results) > 0 {
		n := min(len(o.results), maxResultsPerMessage)
		out = append(out, &pb.WorkerMessage{Body: &pb.WorkerMessage_Results{Results: &pb.Results{Results: o.results[:n]}}})
		o.results = o.results[n:]
	}
	o.results = nil
	heartbeat := o.heartbeat
	o.heartbeat = false
	o.mu.Unlock()
	if heartbeat {
		// sent even empty: it tells the poller this worker is alive while it holds nothing
		if hb := buildHeartbeat(); hb != nil {
			out = append(out, &pb.WorkerMessage{Body: &pb.WorkerMessage_Heartbeat{Heartbeat: hb}})
		}
	}
	return out
}
