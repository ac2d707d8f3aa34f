package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"fencing.local/lineproto"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// hold takes one mutex on a session of its own, reports the grant, keeps it
// --hold-ms and releases it: one holder of a failover benchmark. "at_ns" is
// the wall clock (Unix ns) when Lock returned; "token" is the own key's
// create revision, as contend computes it.
func hold(args []string) error {
	fs := flag.NewFlagSet("hold", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "", "comma-separated host:port list")
	prefix := fs.String("prefix", "", "the lock (its keys live under prefix/)")
	ttl := fs.Int("ttl", 60, "session lease TTL in seconds")
	holdMs := fs.Int("hold-ms", 0, "how long to hold the lock, in ms")
	fs.StringVar(&id, "id", id, "name reported in every event")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *prefix == "" || *ttl <= 0 || *holdMs < 0 {
		return errors.New("hold needs --prefix, --ttl > 0 and --hold-ms >= 0")
	}
	cli, s, err := connectSession(*endpoints, *ttl)
	if err != nil {
		return err
	}
	defer cli.Close()
	defer s.Close()
	m := concurrency.NewMutex(s, *prefix)
	if err := lock(m); err != nil {
		return err
	}
	at := time.Now().UnixNano()
	kr, err := get(cli, m.Key())
	if err != nil {
		return fmt.Errorf("get own key: %w", err)
	}
	if len(kr.Kvs) != 1 {
		return fmt.Errorf("own key %q missing after Lock (session expired?)", m.Key())
	}
	lineproto.Emit(map[string]any{"event": "locked", "id": id, "token": kr.Kvs[0].CreateRevision, "at_ns": at})
	time.Sleep(time.Duration(*holdMs) * time.Millisecond)
	if err := unlock(m); err != nil {
		return err
	}
	lineproto.Emit(map[string]any{"event": "done"})
	return nil
}
