package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"fencing.local/lineproto"
)

// cycles runs uncontended Lock+Unlock cycles on one session in blocks that
// its driver asks for: each stdin line holds a count N, and the answer is one
// "cycles" event with the N durations in µs. The driver interleaves these
// blocks with its own and reads the server's request counters between them,
// so the session's setup is never counted or timed. EOF ends it.
func cycles(args []string) error {
	f := newMode("cycles", lockHelp, 60)
	c, err := f.open(args, "cycles needs --prefix", func() bool { return true })
	if err != nil {
		return err
	}
	defer c.Close()
	lineproto.Emit(map[string]any{"event": "ready"})
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(in.Text()))
		if err != nil || n <= 0 {
			return fmt.Errorf("cycles: want a positive count per line, got %q", in.Text())
		}
		us := make([]int64, 0, n)
		for i := 0; i < n; i++ {
			d, err := cycle(c.s, *f.prefix)
			if err != nil {
				return err
			}
			us = append(us, d.Microseconds())
		}
		lineproto.Emit(map[string]any{"event": "cycles", "us": us})
	}
	return in.Err()
}
