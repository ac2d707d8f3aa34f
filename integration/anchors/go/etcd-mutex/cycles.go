package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"fencing.local/lineproto"
	"go.etcd.io/etcd/client/v3/concurrency"
)

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
	lineproto.Emit(map[string]any{"event": "ready"})
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
		lineproto.Emit(map[string]any{"event": "cycles", "us": us})
	}
	return in.Err()
}
