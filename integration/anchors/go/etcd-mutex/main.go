// Command etcd-mutex drives the official etcd Go client's concurrency.Mutex so
// that Rust tests can contend with a real Go holder on the same lock prefix
// (key = prefix + "/" + hex lease id, order = create revision).
//
// Every event is one JSON object on its own line on stdout. os.Stdout is
// unbuffered in Go and each event is a single Write, so a reader sees it at
// once.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

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

func emit(v map[string]any) {
	b, _ := json.Marshal(v)
	os.Stdout.Write(append(b, '\n'))
}

func fail(err error) {
	emit(map[string]any{"event": "error", "id": id, "error": err.Error()})
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
		emit(map[string]any{"event": "held", "id": id, "token": token, "read": value})
		if err := unlock(m); err != nil {
			return err
		}
	}
	emit(map[string]any{"event": "done", "id": id, "rounds": *rounds})
	return nil
}

func bench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "", "comma-separated host:port list")
	prefix := fs.String("prefix", "", "lock prefix (the mutex keys live under prefix/)")
	iterations := fs.Int("iterations", 0, "number of measured iterations per phase")
	ttl := fs.Int("ttl", 60, "session lease TTL in seconds")
	settleMs := fs.Int("settle-ms", 0, "extra wait after the waiter queued, before A unlocks")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *prefix == "" || *iterations <= 0 {
		return errors.New("bench needs --prefix and --iterations > 0")
	}
	cli, sa, err := connectSession(*endpoints, *ttl)
	if err != nil {
		return err
	}
	defer cli.Close()
	defer sa.Close()
	sb, err := newSession(cli, *ttl)
	if err != nil {
		return err
	}
	defer sb.Close()

	unc := make([]time.Duration, 0, *iterations)
	for i := 0; i < *iterations; i++ {
		m := concurrency.NewMutex(sa, *prefix)
		t0 := time.Now()
		if err := lock(m); err != nil {
			return err
		}
		if err := unlock(m); err != nil {
			return err
		}
		unc = append(unc, time.Since(t0))
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
	emit(map[string]any{"event": "bench", "uncontended_median_us": um, "uncontended_p90_us": up,
		"handover_median_us": hm, "handover_p90_us": hp, "iterations": *iterations, "settle_ms": *settleMs})
	return nil
}

// cycles runs uncontended Lock+Unlock cycles on one session in blocks that
// its driver asks for: each stdin line holds a count N, and the answer is one
// "cycles" event with the N durations in µs. The driver interleaves these
// blocks with its own and reads the server's request counters between them,
// so the session's setup is never counted or timed. EOF ends it.
func cycles(args []string) error {
	fs := flag.NewFlagSet("cycles", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "", "comma-separated host:port list")
	prefix := fs.String("prefix", "", "the lock (its keys live under prefix/)")
	ttl := fs.Int("ttl", 60, "session lease TTL in seconds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *prefix == "" {
		return errors.New("cycles needs --prefix")
	}
	cli, s, err := connectSession(*endpoints, *ttl)
	if err != nil {
		return err
	}
	defer cli.Close()
	defer s.Close()
	emit(map[string]any{"event": "ready"})
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(in.Text()))
		if err != nil || n <= 0 {
			return fmt.Errorf("cycles: want a positive count per line, got %q", in.Text())
		}
		us := make([]int64, 0, n)
		for i := 0; i < n; i++ {
			m := concurrency.NewMutex(s, *prefix)
			t0 := time.Now()
			if err := lock(m); err != nil {
				return err
			}
			if err := unlock(m); err != nil {
				return err
			}
			us = append(us, time.Since(t0).Microseconds())
		}
		emit(map[string]any{"event": "cycles", "us": us})
	}
	return in.Err()
}

// waiters queues --count waiters, each on its own session, behind a holder
// on one lock, then (on a stdin line) releases the holder: the lock passes
// down the queue, each waiter unlocking as soon as it holds. It reports
// when each grant happened, in µs after the holder's release was sent, and
// closes its sessions on the next stdin line.
func waiters(args []string) error {
	fs := flag.NewFlagSet("waiters", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "", "comma-separated host:port list")
	prefix := fs.String("prefix", "", "the lock (its keys live under prefix/)")
	count := fs.Int("count", 0, "how many waiters")
	ttl := fs.Int("ttl", 60, "session lease TTL in seconds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *prefix == "" || *count <= 0 {
		return errors.New("waiters needs --prefix and --count > 0")
	}
	cli, err := connect(*endpoints)
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
	emit(map[string]any{"event": "queued"})
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
	emit(map[string]any{"event": "done", "granted_us": us})
	// The sessions close (deferred) after the driver has read its counters.
	in.ReadString('\n')
	return nil
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

// held connects ("connected"), takes --count mutexes (prefix/lock-I) on one
// session, --in-flight at a time, and reports ("held") throughput, resident
// memory, its own CPU time over the acquires and how busy the host's CPUs
// were meanwhile. It then holds them and answers stdin lines: "cpu" gets a
// "cpu" event with this process's CPU time (user+system, getrusage) and the
// wall time since it started, both in µs; any other line releases them all,
// --release-in-flight at a time, and memory is reported again.
func held(args []string) error {
	fs := flag.NewFlagSet("held", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "", "comma-separated host:port list")
	prefix := fs.String("prefix", "", "lock prefix")
	count := fs.Int("count", 0, "how many locks to hold at once")
	inFlight := fs.Int("in-flight", 64, "acquires in flight at once")
	releaseInFlight := fs.Int("release-in-flight", 1, "releases in flight at once")
	ttl := fs.Int("ttl", 60, "session lease TTL in seconds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *prefix == "" || *count <= 0 || *inFlight <= 0 || *releaseInFlight <= 0 {
		return errors.New("held needs --prefix, --count > 0, --in-flight > 0 and --release-in-flight > 0")
	}
	started := time.Now()
	cli, s, err := connectSession(*endpoints, *ttl)
	if err != nil {
		return err
	}
	defer cli.Close()
	defer s.Close()
	emit(map[string]any{"event": "connected"})
	before := rssKB()
	mutexes := make([]*concurrency.Mutex, *count)
	hostBefore := hostTicks()
	cpuBefore := cpuMicros()
	t0 := time.Now()
	err = inParallel(*count, *inFlight, func(i int) error {
		m := concurrency.NewMutex(s, fmt.Sprintf("%s/lock-%d", *prefix, i))
		if err := lock(m); err != nil {
			return err
		}
		mutexes[i] = m
		return nil
	})
	if err != nil {
		return err
	}
	elapsed := time.Since(t0)
	emit(map[string]any{"event": "held", "count": *count, "seconds": elapsed.Seconds(),
		"rss_kb_before": before, "rss_kb_held": rssKB(),
		"host_busy_pct": hostTicks().busyPct(hostBefore), "cpu_us_acquire": cpuMicros() - cpuBefore})
	in := bufio.NewScanner(os.Stdin)
	for {
		if !in.Scan() {
			return fmt.Errorf("waiting for the release line: %v", in.Err())
		}
		if strings.TrimSpace(in.Text()) != "cpu" {
			break
		}
		emit(map[string]any{"event": "cpu", "cpu_us": cpuMicros(),
			"wall_us": time.Since(started).Microseconds()})
	}
	err = inParallel(*count, *releaseInFlight, func(i int) error { return unlock(mutexes[i]) })
	if err != nil {
		return err
	}
	emit(map[string]any{"event": "released", "rss_kb_after": rssKB()})
	return nil
}

// inParallel runs f(0..count-1) on `workers` goroutines, worker w taking
// w, w+workers, ...; it returns the first error once all have stopped.
func inParallel(count, workers int, f func(i int) error) error {
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers && w < count; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < count; i += workers {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// cpuMicros is this process's user+system CPU time in µs (0 if unknown).
func cpuMicros() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Sec*1e6 + ru.Utime.Usec + ru.Stime.Sec*1e6 + ru.Stime.Usec
}

// ticks is the host's CPU time from the first line of /proc/stat: all of
// it, and the part spent neither idle nor waiting for I/O.
type ticks struct{ total, busy int64 }

func hostTicks() ticks {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return ticks{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var t ticks
	for i := 1; i < len(f); i++ {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		// user nice system idle iowait irq softirq steal guest guest_nice;
		// guest time is already counted in user and nice.
		if i > 8 {
			break
		}
		t.total += v
		if i != 4 && i != 5 {
			t.busy += v
		}
	}
	return t
}

// busyPct is the share of all the host's CPUs that was busy since earlier,
// in percent (0 if unknown).
func (t ticks) busyPct(earlier ticks) float64 {
	if t.total <= earlier.total {
		return 0
	}
	return 100 * float64(t.busy-earlier.busy) / float64(t.total-earlier.total)
}

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
	emit(map[string]any{"event": "locked", "id": id, "token": kr.Kvs[0].CreateRevision, "at_ns": at})
	time.Sleep(time.Duration(*holdMs) * time.Millisecond)
	if err := unlock(m); err != nil {
		return err
	}
	emit(map[string]any{"event": "done"})
	return nil
}

// rssKB reads VmRSS from /proc/self/status (0 if it cannot).
func rssKB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}
