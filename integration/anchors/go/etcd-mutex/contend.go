package main

import (
	"context"
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
	f := newMode("contend", lockHelp, 5)
	counter := f.String("counter", "", "key of the shared counter")
	rounds := f.Int("rounds", 0, "number of lock rounds")
	holdMs := f.Int("hold-ms", 5, "sleep between reading and writing the counter")
	f.StringVar(&id, "id", id, "name reported in every event")
	needs := "contend needs --prefix, --counter and --rounds > 0"
	c, err := f.open(args, needs, func() bool { return *counter != "" && *rounds > 0 })
	if err != nil {
		return err
	}
	defer c.Close()
	cli := c.cli

	for i := 0; i < *rounds; i++ {
		m := concurrency.NewMutex(c.s, *f.prefix)
		if err := lock(m); err != nil {
			return err
		}
		token, err := ownToken(cli, m)
		if err != nil {
			return err
		}

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
