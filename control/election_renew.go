package control

// The leader's own bound on its term (issue 27; docs/ha.md, "Leader
// election and failover").
//
// etcd expires a lease one TTL after it received the last renewal. The
// client's session gives up on it one TTL after the answer to its last
// renewal, and checks that once a second: later than etcd, by the answer's
// delay and up to a second more. Ending the term with the session alone
// let a cut-off leader believe it led while etcd had already elected
// another daemon (0.6 to 0.9 s with TTL 2 s and answers 300 ms late,
// TestElectionLeaderEndsTermBeforeSuccessorLeads).
//
// So the leader renews its lease itself, every TTL/8, each renewal a
// KeepAliveOnce bounded by the term's deadline, and remembers when it sent
// the last one that succeeded: etcd received that one after it was sent,
// so the lease lives until at least sent + TTL. The term ends at
// sent + 3/4 TTL (termBound), a quarter of a TTL before etcd can expire
// the lease: the margin covers a timer that fires late on a loaded host
// and a step-down that takes a moment to be noticed (clocks' rates differ
// by parts per million). Half a TTL was too tight: with TTL 2 s a leader
// stepped down when one of three embedded etcd members was killed and the
// raft election that followed held renewals for a second
// (TestHAEmbeddedQuorum, "lose 1 of 3: no interruption").

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// termBound is how long after sending its last renewal that succeeded a
// leader still leads: 3/4 of the TTL.
func (e *Election) termBound() time.Duration { return e.cfg.TTL - e.cfg.TTL/4 }

// renew keeps lease alive for term t and ends t termBound after the last
// renewal that succeeded was sent (sent: the first one, Campaign's), or at
// once when etcd says the lease is gone. It returns when t ends or ctx
// does.
func (e *Election) renew(ctx context.Context, t *Term, lease clientv3.LeaseID, sent time.Time) {
	bound := e.termBound()
	type result struct {
		sent time.Time
		err  error
	}
	results := make(chan result)
	deadline := time.NewTimer(time.Until(sent.Add(bound)))
	defer deadline.Stop()
	tick := time.NewTicker(e.cfg.TTL / 8)
	defer tick.Stop()
	took := func(r result) bool {
		if errors.Is(r.err, rpctypes.ErrLeaseNotFound) {
			t.end(fmt.Errorf("our election lease is gone: etcd expired or revoked it (%v)", r.err))
			return false
		}
		if r.err == nil && r.sent.After(sent) {
			sent = r.sent
			deadline.Reset(time.Until(sent.Add(bound)))
		}
		return true
	}
	for {
		select {
		case <-t.done:
			return
		case <-ctx.Done():
			return
		case r := <-results:
			if !took(r) {
				return
			}
		case <-deadline.C:
			// A renewal that succeeded just now still counts.
			select {
			case r := <-results:
				if !took(r) {
					return
				}
				if time.Now().Before(sent.Add(bound)) {
					continue
				}
			default:
			}
			t.end(fmt.Errorf("no renewal of our election lease (TTL %v) succeeded for %v since the last one that did was sent: stepping down before etcd can expire it (etcd counts the TTL from when it received that renewal, after it was sent)", e.cfg.TTL, time.Since(sent).Round(time.Millisecond)))
			return
		case <-tick.C:
			until := sent.Add(bound) // no use to a term that ended
			go func() {
				rctx, cancel := context.WithDeadline(ctx, until)
				defer cancel()
				at := time.Now()
				_, err := e.cfg.Client.KeepAliveOnce(rctx, lease)
				select {
				case results <- result{at, err}:
				case <-t.done:
				case <-ctx.Done():
				}
			}()
		}
	}
}
