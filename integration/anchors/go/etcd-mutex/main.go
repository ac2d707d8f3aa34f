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

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: etcd-mutex contend|bench|held|hold|cycles|waiters|campaign [flags]"))
	}
	var err error
	switch os.Args[1] {
	case "contend":
		err = contend(os.Args[2:])
	case "bench":
		err = bench(os.Args[2:])
	case "held":
		err = held(os.Args[2:])
	case "hold":
		err = hold(os.Args[2:])
	case "cycles":
		err = cycles(os.Args[2:])
	case "waiters":
		err = waiters(os.Args[2:])
	case "campaign":
		err = runCampaign(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q (want contend, bench, held, hold, cycles, waiters or campaign)", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
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

// connectSession connects and starts one session; on error nothing is left
// open.
func connectSession(endpoints string, ttl int) (*clientv3.Client, *concurrency.Session, error) {
	cli, err := connect(endpoints)
	if err != nil {
		return nil, nil, err
	}
	s, err := newSession(cli, ttl)
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return cli, s, nil
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
