package main

// The anchor client of the Rust fault campaign (integration/campaign):
// concurrency.Mutex on the same lock prefix as the campaign's Rust clients,
// under the same faults, speaking their line protocol. It learns of a lost
// session only when Session.Done() closes, as a Go user of the package
// would; the campaign's checker exempts it from noticing a loss in time and
// demands instead that the storage refused its late writes.

import (
	"context"
	"math/rand"
	"time"

	"fencing.local/lineproto"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func runCampaign(args []string) error {
	f := newMode("campaign", "the Rust source's prefix (its URL's path)", 2)
	resource := f.String("lock", "", "the lock, a resource name")
	seed := f.Int64("seed", 1, "seed of the hold times")
	longHoldMs := f.Int("long-hold-ms", 3000, "the longest hold")
	longPercent := f.Int("long-percent", 5, "share of holds (percent) from 1 s up")
	prefix, ttl := f.prefix, f.ttl
	cli, err := f.client(args, "campaign needs --prefix and --lock", func() bool { return *resource != "" })
	if err != nil {
		return err
	}
	defer cli.Close()
	// false: once stdin has closed, Await still waits out the reply limit.
	a := lineproto.NewAnchor(*resource, false)
	rng := rand.New(rand.NewSource(*seed))
	var session *concurrency.Session
	for !a.Stopping() {
		if session == nil || isDone(session) {
			if session, err = newSession(cli, *ttl); err != nil {
				session = nil
				time.Sleep(200 * time.Millisecond)
				continue
			}
		}
		// The Rust clients' mix: mostly 10-150 ms, some from 1 s up.
		hold := time.Duration(10+rng.Intn(141)) * time.Millisecond
		if rng.Intn(100) < *longPercent {
			hold = time.Duration(1000+rng.Intn(*longHoldMs-999)) * time.Millisecond
		}
		holdOnce(a, cli, session, *prefix+"/"+*resource, hold)
	}
	if session != nil {
		session.Close()
	}
	return nil
}

func isDone(s *concurrency.Session) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

// holdOnce locks, writes every 25 ms for hold (or until the session ends),
// and unlocks.
func holdOnce(a *lineproto.Anchor, cli *clientv3.Client, s *concurrency.Session, pfx string, hold time.Duration) {
	a.Send("acquire_start", map[string]any{})
	m := concurrency.NewMutex(s, pfx)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := m.Lock(ctx)
	cancel()
	if err != nil {
		time.Sleep(50 * time.Millisecond)
		return
	}
	token, err := ownToken(cli, m)
	if err != nil {
		_ = unlock(m)
		return
	}
	a.Send("grant", map[string]any{"token": token})
	until := time.Now().Add(hold)
	for time.Now().Before(until) && !a.Stopping() {
		select {
		case <-s.Done():
			a.Send("lost", map[string]any{"token": token, "reason": "session done"})
			return
		case <-time.After(25 * time.Millisecond):
		}
		a.MemWrite(token)
	}
	a.Await(a.SendRelease(token))
	if unlock(m) != nil {
		// The key may still be there: a new Mutex on this session would
		// find it and "lock" again with the same revision. The session is
		// left to expire (Orphan returns once Done is closed), and the
		// next lock uses a new one.
		s.Orphan()
	}
}
