// Command etcd-mutex drives the official etcd Go client's concurrency.Mutex so
// that Rust tests can contend with a real Go holder on the same lock prefix
// (key = prefix + "/" + hex lease id, order = create revision).
//
// Every event is one JSON object on its own line on stdout. os.Stdout is
// unbuffered in Go and each event is a single Write, so a reader sees it at
// once (lineproto.Emit, shared with client-go-elector in ../lineproto).
//
// Each subcommand lives in the file of its name: contend.go, bench.go,
// held.go, hold.go, cycles.go, waiters.go and campaign.go; this file holds
// the dispatch and the etcd plumbing they share.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"fencing.local/lineproto"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Timeouts: lockTimeout bounds a (possibly contended) Lock; opTimeout bounds
// every other single request so a dead cluster cannot hang the test.
const (
	lockTimeout = 30 * time.Second
	opTimeout   = 5 * time.Second
)

var id = fmt.Sprintf("go-%d", os.Getpid())

func fail(err error) {
	lineproto.Emit(map[string]any{"event": "error", "id": id, "error": err.Error()})
	os.Exit(1)
}

// modes are the subcommands, each in the file of its name.
var modes = map[string]func(args []string) error{"contend": contend, "bench": bench, "held": held,
	"hold": hold, "cycles": cycles, "waiters": waiters, "campaign": runCampaign, "repro": repro}

const modeNames = "contend, bench, held, hold, cycles, waiters, campaign or repro"

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: etcd-mutex contend|bench|held|hold|cycles|waiters|campaign [flags]"))
	}
	run, ok := modes[os.Args[1]]
	if !ok {
		fail(fmt.Errorf("unknown subcommand %q (want %s)", os.Args[1], modeNames))
	}
	if err := run(os.Args[2:]); err != nil {
		fail(err)
	}
}

// lockHelp describes --prefix where it names one lock.
const lockHelp = "the lock (its keys live under prefix/)"

// mode is a subcommand's flag set, begun with the flags every mode takes:
// where etcd is, the lock prefix and the session TTL.
type mode struct {
	*flag.FlagSet
	endpoints, prefix *string
	ttl               *int
}

func newMode(name, prefixHelp string, ttl int) mode {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return mode{
		FlagSet:   fs,
		endpoints: fs.String("endpoints", "", "comma-separated host:port list"),
		prefix:    fs.String("prefix", "", prefixHelp),
		ttl:       fs.Int("ttl", ttl, "session lease TTL in seconds"),
	}
}

// client parses args and connects to --endpoints. A mode without --prefix,
// or whose own flags fail ok, is refused with needs, the sentence that says
// what the mode needs.
func (m mode) client(args []string, needs string, ok func() bool) (*clientv3.Client, error) {
	if err := m.Parse(args); err != nil {
		return nil, err
	}
	if *m.prefix == "" || !ok() {
		return nil, errors.New(needs)
	}
	return connect(*m.endpoints)
}

// conn is a client with one session of its own.
type conn struct {
	cli *clientv3.Client
	s   *concurrency.Session
}

func (c conn) Close() {
	c.s.Close()
	c.cli.Close()
}

// open parses args and connects as client does, and starts a session of
// --ttl; on error nothing is left open.
func (m mode) open(args []string, needs string, ok func() bool) (conn, error) {
	cli, err := m.client(args, needs, ok)
	if err != nil {
		return conn{}, err
	}
	s, err := newSession(cli, *m.ttl)
	if err != nil {
		cli.Close()
		return conn{}, err
	}
	return conn{cli, s}, nil
}

func connect(endpoints string) (*clientv3.Client, error) {
	var eps []string
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil, errors.New("--endpoints is required")
	}
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
}

// newSession grants the lease itself under a timeout: NewSession would use its
// context both for Grant and for the lifetime of the keep-alive, so a deadline
// there would later kill the keep-alive.
func newSession(cli *clientv3.Client, ttl int) (*concurrency.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	lease, err := cli.Grant(ctx, int64(ttl))
	if err != nil {
		return nil, fmt.Errorf("grant: %w", err)
	}
	// WithTTL too: Session.Close uses it as the Revoke timeout.
	return concurrency.NewSession(cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(ttl))
}

func lock(m *concurrency.Mutex) error {
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	if err := m.Lock(ctx); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	return nil
}

func unlock(m *concurrency.Mutex) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := m.Unlock(ctx); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

// ownToken is the fencing token of a held Mutex: its key's create revision
// (the order Mutex grants in); m.Header().Revision is only the store
// revision at the moment Lock returned.
func ownToken(cli *clientv3.Client, m *concurrency.Mutex) (int64, error) {
	kr, err := get(cli, m.Key())
	if err != nil {
		return 0, fmt.Errorf("get own key: %w", err)
	}
	if len(kr.Kvs) != 1 {
		return 0, fmt.Errorf("own key %q missing after Lock (session expired?)", m.Key())
	}
	return kr.Kvs[0].CreateRevision, nil
}

// cycle times one uncontended Lock+Unlock on s.
func cycle(s *concurrency.Session, prefix string) (time.Duration, error) {
	m := concurrency.NewMutex(s, prefix)
	t0 := time.Now()
	if err := lock(m); err != nil {
		return 0, err
	}
	if err := unlock(m); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

func get(cli *clientv3.Client, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return cli.Get(ctx, key, opts...)
}

// waitKeys polls (bounded) until n keys exist under pfx.
func waitKeys(cli *clientv3.Client, pfx string, n int64) error {
	deadline := time.Now().Add(opTimeout)
	for {
		r, err := get(cli, pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return fmt.Errorf("count waiters: %w", err)
		}
		if r.Count >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiter did not queue within %v (%d keys under %q)", opTimeout, r.Count, pfx)
		}
		time.Sleep(200 * time.Microsecond)
	}
}
