package main

import (
	"sort"
	"time"

	"fencing.local/lineproto"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// bench times --iterations uncontended Lock+Unlock cycles on one session,
// then --iterations handovers between two (A unlocks, B's queued Lock
// returns), and reports the median and 90th percentile of each in one
// "bench" event.
func bench(args []string) error {
	f := newMode("bench", lockHelp, 60)
	iterations := f.Int("iterations", 0, "number of measured iterations per phase")
	settleMs := f.Int("settle-ms", 0, "extra wait after the waiter queued, before A unlocks")
	c, err := f.open(args, "bench needs --prefix and --iterations > 0", func() bool { return *iterations > 0 })
	if err != nil {
		return err
	}
	defer c.Close()
	cli, sa, prefix := c.cli, c.s, f.prefix
	sb, err := newSession(cli, *f.ttl)
	if err != nil {
		return err
	}
	defer sb.Close()

	unc := make([]time.Duration, 0, *iterations)
	for i := 0; i < *iterations; i++ {
		d, err := cycle(sa, *prefix)
		if err != nil {
			return err
		}
		unc = append(unc, d)
	}

	type result struct {
		at  time.Time
		err error
	}
	hand := make([]time.Duration, 0, *iterations)
	for i := 0; i < *iterations; i++ {
		a, b := concurrency.NewMutex(sa, *prefix), concurrency.NewMutex(sb, *prefix)
		if err := lock(a); err != nil {
			return err
		}
		done := make(chan result, 1)
		go func() {
			err := lock(b)
			done <- result{time.Now(), err}
		}()
		// B is queued once its key exists; its watch starts at a revision it
		// has seen, so it cannot miss A's delete. But Mutex watches FROM the
		// Get's header revision (not +1), so the server puts that watcher in
		// its "unsynced" group, which it catches up only every 100 ms: an
		// unlock right after B queued costs B up to 100 ms. --settle-ms > 100
		// measures the handover to an already-synced watcher instead.
		if err := waitKeys(cli, *prefix+"/", 2); err != nil {
			return err
		}
		time.Sleep(time.Duration(*settleMs) * time.Millisecond)
		t0 := time.Now()
		if err := unlock(a); err != nil {
			return err
		}
		r := <-done
		if r.err != nil {
			return r.err
		}
		hand = append(hand, r.at.Sub(t0))
		if err := unlock(b); err != nil {
			return err
		}
	}

	um, up := stats(unc)
	hm, hp := stats(hand)
	lineproto.Emit(map[string]any{"event": "bench", "uncontended_median_us": um, "uncontended_p90_us": up,
		"handover_median_us": hm, "handover_p90_us": hp, "iterations": *iterations, "settle_ms": *settleMs})
	return nil
}

// stats returns the median and the 90th percentile (nearest rank) in µs.
func stats(d []time.Duration) (int64, int64) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	rank := func(p float64) int64 {
		i := int(p*float64(len(d))+0.999999) - 1
		if i < 0 {
			i = 0
		}
		return d[i].Microseconds()
	}
	return rank(0.5), rank(0.9)
}
