package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"time"

	"fencing.local/lineproto"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// waiters queues --count waiters, each on its own session, behind a holder
// on one lock, then (on a stdin line) releases the holder: the lock passes
// down the queue, each waiter unlocking as soon as it holds. It reports
// when each grant happened, in µs after the holder's release was sent, and
// closes its sessions on the next stdin line.
func waiters(args []string) error {
	f := newMode("waiters", lockHelp, 60)
	count := f.Int("count", 0, "how many waiters")
	prefix, ttl := f.prefix, f.ttl
	cli, err := f.client(args, "waiters needs --prefix and --count > 0", func() bool { return *count > 0 })
	if err != nil {
		return err
	}
	defer cli.Close()
	sessions := make([]*concurrency.Session, *count+1)
	for i := range sessions {
		if sessions[i], err = newSession(cli, *ttl); err != nil {
			return err
		}
		defer sessions[i].Close()
	}
	holder := concurrency.NewMutex(sessions[0], *prefix)
	if err := lock(holder); err != nil {
		return err
	}
	type grant struct {
		at  time.Time
		err error
	}
	grants := make(chan grant, *count)
	for i := 1; i <= *count; i++ {
		go func(s *concurrency.Session) {
			m := concurrency.NewMutex(s, *prefix)
			if err := lock(m); err != nil {
				grants <- grant{err: err}
				return
			}
			at := time.Now()
			grants <- grant{at: at, err: unlock(m)}
		}(sessions[i])
	}
	if err := waitKeys(cli, *prefix+"/", int64(*count+1)); err != nil {
		return err
	}
	lineproto.Emit(map[string]any{"event": "queued"})
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the release line: %w", err)
	}
	t0 := time.Now()
	if err := unlock(holder); err != nil {
		return err
	}
	us := make([]int64, 0, *count)
	for i := 0; i < *count; i++ {
		g := <-grants
		if g.err != nil {
			return g.err
		}
		us = append(us, g.at.Sub(t0).Microseconds())
	}
	sort.Slice(us, func(i, j int) bool { return us[i] < us[j] })
	lineproto.Emit(map[string]any{"event": "done", "granted_us": us})
	// The sessions close (deferred) after the driver has read its counters.
	in.ReadString('\n')
	return nil
}
