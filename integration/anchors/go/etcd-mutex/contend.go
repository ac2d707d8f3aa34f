package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"fencing.local/lineproto"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// contend takes the mutex --rounds times on one session and, holding it,
// increments the --counter key by a deliberately non-atomic
// read-modify-write: one "held" event per round (the token and the value
// read), then "done".
func contend(args []string) error {
	fs := flag.NewFlagSet("contend", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "", "comma-separated host:port list")
	prefix := fs.String("prefix", "", "lock prefix (the mutex keys live under prefix/)")
	counter := fs.String("counter", "", "key of the shared counter")
	rounds := fs.Int("rounds", 0, "number of lock rounds")
	ttl := fs.Int("ttl", 5, "session lease TTL in seconds")
	holdMs := fs.Int("hold-ms", 5, "sleep between reading and writing the counter")
	fs.StringVar(&id, "id", id, "name reported in every event")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *prefix == "" || *counter == "" || *rounds <= 0 {
		return errors.New("contend needs --prefix, --counter and --rounds > 0")
	}
	cli, s, err := connectSession(*endpoints, *ttl)
	if err != nil {
		return err
	}
	defer cli.Close()
	defer s.Close()

	for i := 0; i < *rounds; i++ {
		m := concurrency.NewMutex(s, *prefix)
		if err := lock(m); err != nil {
			return err
		}
		// The fencing token is our key's create revision (the order Mutex
		// grants in); m.Header().Revision is only the store revision at the
		// moment Lock returned.
		kr, err := get(cli, m.Key())
		if err != nil {
			return fmt.Errorf("get own key: %w", err)
		}
		if len(kr.Kvs) != 1 {
			return fmt.Errorf("own key %q missing after Lock (session expired?)", m.Key())
		}
		token := kr.Kvs[0].CreateRevision

		// Deliberately non-atomic read-modify-write: only the lock keeps the
		// counter consistent, which is what the test checks.
		cr, err := get(cli, *counter)
		if err != nil {
			return fmt.Errorf("get counter: %w", err)
		}
		var value int64
		if len(cr.Kvs) == 1 {
			if value, err = strconv.ParseInt(string(cr.Kvs[0].Value), 10, 64); err != nil {
				return fmt.Errorf("counter value %q: %w", cr.Kvs[0].Value, err)
			}
		}
		time.Sleep(time.Duration(*holdMs) * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		_, err = cli.Put(ctx, *counter, strconv.FormatInt(value+1, 10))
		cancel()
		if err != nil {
			return fmt.Errorf("put counter: %w", err)
		}
		lineproto.Emit(map[string]any{"event": "held", "id": id, "token": token, "read": value})
		if err := unlock(m); err != nil {
			return err
		}
	}
	lineproto.Emit(map[string]any{"event": "done", "id": id, "rounds": *rounds})
	return nil
}
