package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"fencing.local/lineproto"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// held connects ("connected"), takes --count mutexes (prefix/lock-I) on one
// session, --in-flight at a time, and reports ("held") throughput, resident
// memory, its own CPU time over the acquires and how busy the host's CPUs
// were meanwhile. It then holds them and answers stdin lines: "cpu" gets a
// "cpu" event with this process's CPU time (user+system, getrusage) and the
// wall time since it started, both in µs; any other line releases them all,
// --release-in-flight at a time, and memory is reported again.
func held(args []string) error {
	f := newMode("held", "lock prefix (the locks are prefix/lock-I)", 60)
	count := f.Int("count", 0, "how many locks to hold at once")
	inFlight := f.Int("in-flight", 64, "acquires in flight at once")
	releaseInFlight := f.Int("release-in-flight", 1, "releases in flight at once")
	needs := "held needs --prefix, --count > 0, --in-flight > 0 and --release-in-flight > 0"
	started := time.Now()
	c, err := f.open(args, needs, func() bool { return *count > 0 && *inFlight > 0 && *releaseInFlight > 0 })
	if err != nil {
		return err
	}
	defer c.Close()
	s, prefix := c.s, f.prefix
	lineproto.Emit(map[string]any{"event": "connected"})
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
	lineproto.Emit(map[string]any{"event": "held", "count": *count, "seconds": elapsed.Seconds(),
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
		lineproto.Emit(map[string]any{"event": "cpu", "cpu_us": cpuMicros(),
			"wall_us": time.Since(started).Microseconds()})
	}
	err = inParallel(*count, *releaseInFlight, func(i int) error { return unlock(mutexes[i]) })
	if err != nil {
		return err
	}
	lineproto.Emit(map[string]any{"event": "released", "rss_kb_after": rssKB()})
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
