package main

import (
	"time"

	"fencing.local/lineproto"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// hold takes one mutex on a session of its own, reports the grant, keeps it
// --hold-ms and releases it: one holder of a failover benchmark. "at_ns" is
// the wall clock (Unix ns) when Lock returned; "token" is the own key's
// create revision, as contend computes it.
func hold(args []string) error {
	f := newMode("hold", lockHelp, 60)
	holdMs := f.Int("hold-ms", 0, "how long to hold the lock, in ms")
	f.StringVar(&id, "id", id, "name reported in every event")
	needs := "hold needs --prefix, --ttl > 0 and --hold-ms >= 0"
	c, err := f.open(args, needs, func() bool { return *f.ttl > 0 && *holdMs >= 0 })
	if err != nil {
		return err
	}
	defer c.Close()
	m := concurrency.NewMutex(c.s, *f.prefix)
	if err := lock(m); err != nil {
		return err
	}
	at := time.Now().UnixNano()
	token, err := ownToken(c.cli, m)
	if err != nil {
		return err
	}
	lineproto.Emit(map[string]any{"event": "locked", "id": id, "token": token, "at_ns": at})
	time.Sleep(time.Duration(*holdMs) * time.Millisecond)
	if err := unlock(m); err != nil {
		return err
	}
	lineproto.Emit(map[string]any{"event": "done"})
	return nil
}
