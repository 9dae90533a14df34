package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	pb "github.com/shardcron/shardcron/gen/go/shardcron/v1"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// OwnerMetadataKey names the caller's owner (tenant) in gRPC metadata.
const OwnerMetadataKey = "x-shardcron-owner"

const (
	welcomeTimeout = 10 * time.Second
	backoffMin     = 100 * time.Millisecond
	backoffMax     = 5 * time.Second
)

// link is the worker's connection to one poller: one Connect stream at a time,
// reopened with backoff. Runs do not belong to a stream: they keep going until
// their lease deadline whether or not a stream is up, and are named in the next
// stream's Hello.held.
type link struct {
	w    *Worker
	addr string
	out  *outbox

	// guarded by w.mu
	unacked           map[resultKey]*pb.RunResult // sent or queued, not yet acknowledged
	leaseTTL          time.Duration
	heartbeatInterval time.Duration
	pollerID          string
	connected         bool
	streams           int // streams opened so far: an adrift result is offered once per stream
}

func newLink(w *Worker, addr string) *link {
	return &link{
		w:                 w,
		addr:              addr,
		out:               newOutbox(),
		unacked:           map[resultKey]*pb.RunResult{},
		leaseTTL:          defaultLeaseTTL,
		heartbeatInterval: defaultLeaseTTL / 3,
	}
}

// backoff is the delay before reconnect attempt n (n consecutive failed attempts):
// exponential from 100 ms to 5 s, with jitter (50-100 %).
func backoff(failures int) time.Duration {
	d := backoffMin << min(failures, 10)
	if d > backoffMax {
		d = backoffMax
	}
	return time.Duration(float64(d) * (0.5 + rand.Float64()/2))
}

func (l *link) run(ctx context.Context) {
	creds := l.w.cfg.TransportCredentials
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true,
		}),
		// The channel's own reconnect backoff (default 1 s base, 120 s max) would
		// add to ours: a restarted poller must see the worker back within a TTL.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: backoffMin, Multiplier: 1.6, Jitter: 0.2, MaxDelay: backoffMax},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, l.w.cfg.DialOptions...)
	conn, err := grpc.NewClient(l.addr, opts...)
	if err != nil {
		l.w.log.Error("bad poller address", "poller", l.addr, "err", err)
		return
	}
	defer conn.Close()
	client := pb.NewWorkerServiceClient(conn)
	failures := 0
	for ctx.Err() == nil {
		welcomed, err := l.session(ctx, client)
		if ctx.Err() != nil {
			return
		}
		l.w.log.Info("stream to poller ended", "poller", l.addr, "err", err)
		l.w.Stats.Reconnects.Add(1)
		if welcomed {
			failures = 0
		} else {
			failures++
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff(failures)):
		}
	}
}

var errNoWelcome = errors.New("no Welcome within 10s")

// session runs one stream until it ends or fails.
func (l *link) session(parent context.Context, client pb.WorkerServiceClient) (welcomed bool, err error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	if owner := l.w.cfg.Owner; owner != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, OwnerMetadataKey, owner)
	}
	if token := l.w.cfg.Token; token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, AuthorizationMetadataKey, "Bearer "+token)
	}
	stream, err := client.Connect(ctx)
	if err != nil {
		return false, err
	}
	l.w.mu.Lock()
	hello := l.w.helloLocked(l)
	l.w.mu.Unlock()
	if err := stream.Send(&pb.WorkerMessage{Body: &pb.WorkerMessage_Hello{Hello: hello}}); err != nil {
		return false, fmt.Errorf("send Hello: %w", err)
	}

	timer := time.AfterFunc(welcomeTimeout, cancel)
	first, err := stream.Recv()
	if !timer.Stop() {
		return false, errNoWelcome
	}
	if err != nil {
		return false, err
	}
	welcome := first.GetWelcome()
	if welcome == nil {
		return false, fmt.Errorf("protocol: expected Welcome, got %T", first.Body)
	}
	l.w.mu.Lock()
	l.welcomeLocked(welcome)
	l.connected = true
	ttl, every := l.leaseTTL, l.heartbeatInterval
	l.w.mu.Unlock()
	l.w.log.Info("connected", "poller", l.addr, "poller_id", welcome.PollerId, "epoch", welcome.Epoch,
		"lease_ttl", ttl, "heartbeat", every, "held", len(hello.Held),
		"pending_results", len(hello.PendingResults))
	defer func() {
		l.w.mu.Lock()
		l.connected = false
		l.w.mu.Unlock()
	}()

	var wg sync.WaitGroup
	defer wg.Wait() // the next stream must not start while this one still sends
	defer cancel()
	wg.Add(2)
	go func() { defer wg.Done(); l.send(ctx, cancel, stream) }()
	go func() { defer wg.Done(); l.heartbeats(ctx) }()
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			return true, errors.New("stream closed by the poller")
		}
		if err != nil {
			return true, err
		}
		l.w.dispatch(l, msg)
	}
}

func (l *link) welcomeLocked(wel *pb.Welcome) {
	l.pollerID = wel.PollerId
	l.leaseTTL = durationOr(wel.LeaseTtl, defaultLeaseTTL)
	l.heartbeatInterval = durationOr(wel.HeartbeatInterval, l.leaseTTL/3)
}

// send drains the outbox into the stream until the session ends.
func (l *link) send(ctx context.Context, cancel context.CancelFunc, stream pb.WorkerService_ConnectClient) {
	for {
		msgs, err := l.out.next(ctx, func() *pb.Heartbeat { return l.w.heartbeat(l) })
		if err != nil {
			return
		}
		for _, m := range msgs {
			if err := stream.Send(m); err != nil {
				cancel() // Recv fails next; results stay unacked and go in the next Hello
				return
			}
		}
	}
}

func (l *link) heartbeats(ctx context.Context) {
	for {
		l.w.mu.Lock()
		every := l.heartbeatInterval
		l.w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
			l.out.requestHeartbeat()
		}
	}
}

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d != nil {
		if v := d.AsDuration(); v > 0 {
			return v
		}
	}
	return def
}

func timestamp(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// Epoch and Sequence split a fencing token (epoch << 32 | sequence). Workers
// compare tokens for equality only; the parts are for logs.
func Epoch(token uint64) uint64 { return token >> 32 }

// Sequence is the low 32 bits of a fencing token.
func Sequence(token uint64) uint32 { return uint32(token) }
