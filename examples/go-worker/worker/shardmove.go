package worker

// Shard moves. A shard moves from one poller to another when a node joins and takes
// shards, or one dies or releases them. The new owner adopts the previous owner's
// leases from the store, under the tokens that owner issued, so a run leased just
// before a move needs no second execution: its worker only has to reach the new
// owner (proto/README.md, "Shard moves"). Every LeaseRef and RunResult names its
// job_id, which the poller maps to a shard.
//
//   - A lease is seeking while its poller answers not_owner, or its stream is down.
//     It is named in the Hello and every Heartbeat of every connected poller; the
//     first that renews it (ok, with expires_at) holds the run from then on. Other
//     pollers' refusals change nothing: the lease's deadline still bounds the run.
//   - A result is adrift while its poller answered not_owner, or its stream is down.
//     It is offered to every connected poller, one copy in flight per stream, and
//     again at each heartbeat to a poller that answered not_owner (the shard may
//     reach it later), until one accepts it or refuses it without not_owner (the
//     shard's owner found it stale).

import (
	"sort"

	pb "github.com/shardcron/shardcron/gen/go/shardcron/v1"
)

// streamKey names one stream of one link: a copy sent on an earlier stream of the
// same link will never be answered.
type streamKey struct {
	link   *link
	stream int
}

type adriftOffer struct {
	result *pb.RunResult
	asked  map[streamKey]bool // streams it was sent on whose answer has not come
}

// adriftResults are results waiting for the poller that serves their run's shard.
// Guarded by Worker.mu.
type adriftResults struct {
	offers map[resultKey]*adriftOffer
}

func newAdriftResults() *adriftResults {
	return &adriftResults{offers: map[resultKey]*adriftOffer{}}
}

func (a *adriftResults) len() int { return len(a.offers) }

func (a *adriftResults) add(res *pb.RunResult) {
	key := resultKey{res.RunId, res.FencingToken}
	if _, ok := a.offers[key]; !ok {
		a.offers[key] = &adriftOffer{result: res, asked: map[streamKey]bool{}}
	}
}

// offer returns the results to send on this stream now, in run id order: those not
// sent on it yet, or answered not_owner there since (notHere).
func (a *adriftResults) offer(on streamKey) []*pb.RunResult {
	var out []*pb.RunResult
	for _, o := range a.offers {
		if o.asked[on] {
			continue
		}
		for k := range o.asked {
			if k.link == on.link {
				delete(o.asked, k) // an earlier stream of this link will never answer
			}
		}
		o.asked[on] = true
		out = append(out, o.result)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RunId < out[j].RunId })
	return out
}

// notHere: that stream's poller does not serve the run's shard (yet): ask it again
// at its next heartbeat.
func (a *adriftResults) notHere(on streamKey, key resultKey) {
	if o := a.offers[key]; o != nil {
		delete(o.asked, on)
	}
}

// settle forgets a result a poller accepted, or the shard's owner refused; false if
// it was not adrift.
func (a *adriftResults) settle(key resultKey) bool {
	if _, ok := a.offers[key]; !ok {
		return false
	}
	delete(a.offers, key)
	return true
}

func (a *adriftResults) runIDs() []string {
	ids := make([]string, 0, len(a.offers))
	for k := range a.offers {
		ids = append(ids, k.runID)
	}
	sort.Strings(ids)
	return ids
}

// seeking: no poller renews the run's lease now (its shard moved, or its stream is
// down), so it is named to every poller (w.mu held).
func (r *run) seeking() bool { return r.adrift || !r.link.connected }

// seekingRefsLocked are the leases no poller renews now, named to l as well: every
// one but those whose own link l is.
func (w *Worker) seekingRefsLocked(l *link) []*pb.LeaseRef {
	var refs []*pb.LeaseRef
	for _, r := range w.sortedRuns() {
		if !r.lost() && r.link != l && r.seeking() {
			refs = append(refs, r.ref())
		}
	}
	return refs
}

// setAdriftLocked makes the results l did not acknowledge adrift: offered to every
// poller, since l's may be gone.
func (w *Worker) setAdriftLocked(l *link) {
	for k, res := range l.unacked {
		w.adrift.add(res)
		delete(l.unacked, k)
	}
}

// offerAdriftLocked queues on l's stream the adrift results it was not asked about.
// Results of other streams that are down become adrift first.
func (w *Worker) offerAdriftLocked(l *link) {
	for _, other := range w.links {
		if other != l && !other.connected && len(other.unacked) > 0 {
			w.setAdriftLocked(other)
		}
	}
	for _, res := range w.adrift.offer(streamKey{l, l.streams}) {
		l.out.addResult(res)
	}
}

// moveLocked: l's poller renewed a seeking lease, so it serves the run's shard now;
// the run's renewals, cancels, output and result go to it from now on.
func (w *Worker) moveLocked(r *run, l *link) {
	w.log.Info("run now held by another poller", "run", r.lease.RunId, "token", r.token,
		"from", r.link.addr, "to", l.addr)
	w.Stats.Moved.Add(1)
	r.link = l
	r.adrift = false
	r.pending = r.pending[:0]
}

// onAckLocked handles one ResultAck from l.
func (w *Worker) onAckLocked(l *link, a *pb.ResultAck) {
	key := resultKey{a.RunId, a.FencingToken}
	if a.NotOwner {
		// the run's shard moved: the result goes to whichever poller serves it now
		if res, ok := l.unacked[key]; ok {
			delete(l.unacked, key)
			w.log.Info("result's shard moved: offered to the other pollers", "run", a.RunId, "poller", l.addr)
			w.adrift.add(res)
		}
		w.adrift.notHere(streamKey{l, l.streams}, key)
		return
	}
	if _, ok := l.unacked[key]; ok {
		delete(l.unacked, key)
	} else if !w.adrift.settle(key) {
		return
	}
	if a.Accepted {
		w.Stats.Accepted.Add(1)
	} else {
		w.Stats.Rejected.Add(1)
		w.log.Info("result rejected", "run", a.RunId, "token", a.FencingToken, "reason", a.Reason)
	}
}
