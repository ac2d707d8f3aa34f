package main

// The anchor client of the Rust fault campaign (integration/src/campaign):
// concurrency.Mutex on the same lock prefix as the campaign's Rust clients,
// under the same faults, speaking their line protocol. It learns of a lost
// session only when Session.Done() closes, as a Go user of the package
// would; the campaign's checker exempts it from noticing a loss in time and
// demands instead that the storage refused its late writes.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"math/rand"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// replyLimit matches the Rust clients' write limit.
const replyLimit = 2 * time.Second

type reply struct {
	ID       uint64 `json:"id"`
	Accepted bool   `json:"accepted"`
}

// anchor is one campaign client's state: where it sends lines and how it
// waits for the controller's answers.
type anchor struct {
	resource string
	replies  chan reply
	stopped  chan struct{}
	nextID   uint64
	value    uint64
	out      sync.Mutex
}

// send writes one line of the campaign protocol: {"kind": {fields}}.
func (a *anchor) send(kind string, fields map[string]any) {
	fields["resource"] = a.resource
	b, _ := json.Marshal(map[string]any{kind: fields})
	a.out.Lock()
	defer a.out.Unlock()
	if _, err := os.Stdout.Write(append(b, '\n')); err != nil {
		os.Exit(0) // the controller is gone
	}
}

// await waits for the answer to request id; false when none came in time.
func (a *anchor) await(id uint64) bool {
	deadline := time.After(replyLimit)
	for {
		select {
		case r := <-a.replies:
			if r.ID == id {
				return r.Accepted
			}
		case <-deadline:
			return false
		}
	}
}

// readStdin passes answers on and closes stopped when stdin closes.
func (a *anchor) readStdin() {
	scanner := bufio.NewScanner(os.Stdin)
	for scanner.Scan() {
		var r reply
		if json.Unmarshal(scanner.Bytes(), &r) == nil {
			a.replies <- r
		}
	}
	close(a.stopped)
}

func (a *anchor) stopping() bool {
	select {
	case <-a.stopped:
		return true
	default:
		return false
	}
}

func runCampaign(args []string) error {
	fs := flag.NewFlagSet("campaign", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "", "comma-separated host:port list")
	prefix := fs.String("prefix", "", "the Rust source's prefix (its URL's path)")
	resource := fs.String("lock", "", "the lock, a resource name")
	ttl := fs.Int("ttl", 2, "session lease TTL in seconds")
	seed := fs.Int64("seed", 1, "seed of the hold times")
	longHoldMs := fs.Int("long-hold-ms", 3000, "the longest hold")
	longPercent := fs.Int("long-percent", 5, "share of holds (percent) from 1 s up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *prefix == "" || *resource == "" {
		return errors.New("campaign needs --prefix and --lock")
	}
	cli, err := connect(*endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	a := &anchor{resource: *resource, replies: make(chan reply, 64), stopped: make(chan struct{})}
	go a.readStdin()
	rng := rand.New(rand.NewSource(*seed))
	var session *concurrency.Session
	for !a.stopping() {
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
		a.holdOnce(cli, session, *prefix+"/"+*resource, hold)
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
func (a *anchor) holdOnce(cli *clientv3.Client, s *concurrency.Session, pfx string, hold time.Duration) {
	a.send("acquire_start", map[string]any{})
	m := concurrency.NewMutex(s, pfx)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := m.Lock(ctx)
	cancel()
	if err != nil {
		time.Sleep(50 * time.Millisecond)
		return
	}
	kr, err := get(cli, m.Key())
	if err != nil || len(kr.Kvs) != 1 {
		_ = unlock(m)
		return
	}
	token := kr.Kvs[0].CreateRevision
	a.send("grant", map[string]any{"token": token})
	until := time.Now().Add(hold)
	for time.Now().Before(until) && !a.stopping() {
		select {
		case <-s.Done():
			a.send("lost", map[string]any{"token": token, "reason": "session done"})
			return
		case <-time.After(25 * time.Millisecond):
		}
		a.nextID++
		a.value++
		a.send("mem_write", map[string]any{"id": a.nextID, "token": token, "value": a.value})
		a.await(a.nextID)
	}
	a.nextID++
	a.send("release", map[string]any{"token": token, "id": a.nextID})
	a.await(a.nextID)
	if unlock(m) != nil {
		// The key may still be there: a new Mutex on this session would
		// find it and "lock" again with the same revision. The session is
		// left to expire (Orphan returns once Done is closed), and the
		// next lock uses a new one.
		s.Orphan()
	}
}
