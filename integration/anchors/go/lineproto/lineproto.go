// Package lineproto is the line protocol the Go anchor programs
// (etcd-mutex, client-go-elector) speak to their Rust drivers: one JSON
// object per line on stdout, and, for the fault campaign's anchor clients,
// the controller's answers read line by line from stdin.
//
// Each line is a single Write on os.Stdout, which is unbuffered in Go, so a
// reader sees it whole and at once; lines written from different goroutines
// never interleave.
//
// The module is used through a local replace directive in each program's
// go.mod (replace fencing.local/lineproto => ../lineproto), so building
// needs nothing from the network.
package lineproto

import (
	"bufio"
	"encoding/json"
	"os"
	"sync"
	"time"
)

// out serializes the lines, and with them the stamps of Stamped events.
var out sync.Mutex

// Stamped is an event that carries the time it was printed: Emit stamps it
// (unix nanoseconds) under the output lock, so stamps grow in output order.
type Stamped interface {
	Stamp(unixNanos int64)
}

// Emit writes v as one JSON line on stdout and returns the write's error.
// A Stamped v (a pointer) is stamped first.
func Emit(v any) error {
	out.Lock()
	defer out.Unlock()
	if s, ok := v.(Stamped); ok {
		s.Stamp(time.Now().UnixNano())
	}
	b, _ := json.Marshal(v)
	_, err := os.Stdout.Write(append(b, '\n'))
	return err
}

// ReplyLimit matches the Rust campaign clients' write limit: an answer later
// than this is no answer.
const ReplyLimit = 2 * time.Second

// Reply is the campaign controller's answer to a mem_write or release line:
// {"id":N,"accepted":BOOL}.
type Reply struct {
	ID       uint64 `json:"id"`
	Accepted bool   `json:"accepted"`
}

// Anchor is one campaign anchor client's side of the campaign protocol.
// Lines out are {"kind":{fields..., "resource":R}}; lines in are Replies.
// Closing stdin asks the anchor to stop.
type Anchor struct {
	resource string
	replies  chan Reply
	stopped  chan struct{}
	// stopEndsAwait: Await gives up as soon as stdin has closed, instead of
	// waiting out ReplyLimit.
	stopEndsAwait bool
	nextID        uint64
	value         uint64
}

// NewAnchor starts reading the controller's answers from stdin for the
// anchor of lock resource. With stopEndsAwait, Await returns false as soon
// as stdin has closed (client-go-elector); without it, Await waits out
// ReplyLimit even then (etcd-mutex).
func NewAnchor(resource string, stopEndsAwait bool) *Anchor {
	a := &Anchor{
		resource:      resource,
		replies:       make(chan Reply, 64),
		stopped:       make(chan struct{}),
		stopEndsAwait: stopEndsAwait,
	}
	go a.readStdin()
	return a
}

// Send writes one line of the campaign protocol: {"kind": {fields}}, with
// "resource" added to fields. The program exits (code 0) when the line
// cannot be written: the controller is gone.
func (a *Anchor) Send(kind string, fields map[string]any) {
	fields["resource"] = a.resource
	if Emit(map[string]any{kind: fields}) != nil {
		os.Exit(0)
	}
}

// NextID numbers the anchor's next request.
func (a *Anchor) NextID() uint64 {
	a.nextID++
	return a.nextID
}

// MemWrite sends one mem_write line (the next request id, token and the
// next value) and waits for its answer; false when it was refused or none
// came in time.
func (a *Anchor) MemWrite(token any) bool {
	id := a.NextID()
	a.value++
	a.Send("mem_write", map[string]any{"id": id, "token": token, "value": a.value})
	return a.Await(id)
}

// SendRelease sends the release line of token and returns its request id,
// for Await.
func (a *Anchor) SendRelease(token any) uint64 {
	id := a.NextID()
	a.Send("release", map[string]any{"token": token, "id": id})
	return id
}

// Await waits for the answer to request id; false when none came in time
// (see NewAnchor for what closing stdin does).
func (a *Anchor) Await(id uint64) bool {
	deadline := time.After(ReplyLimit)
	var stopped chan struct{} // nil: never ready
	if a.stopEndsAwait {
		stopped = a.stopped
	}
	for {
		select {
		case r := <-a.replies:
			if r.ID == id {
				return r.Accepted
			}
		case <-stopped:
			return false
		case <-deadline:
			return false
		}
	}
}

// Stopping reports whether stdin has closed.
func (a *Anchor) Stopping() bool {
	select {
	case <-a.stopped:
		return true
	default:
		return false
	}
}

// readStdin passes answers on and closes stopped when stdin closes. An
// answer that finds the queue full is dropped: nobody waits for it any more.
func (a *Anchor) readStdin() {
	scanner := bufio.NewScanner(os.Stdin)
	for scanner.Scan() {
		var r Reply
		if json.Unmarshal(scanner.Bytes(), &r) == nil {
			select {
			case a.replies <- r:
			default:
			}
		}
	}
	close(a.stopped)
}
