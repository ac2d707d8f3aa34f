package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"fencing.local/lineproto"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
)

// repro replays one known bug of the concurrency package step by step, so a
// Rust test (integration/tests/tests/anchor_bugs) can force the bug's
// interleaving with a TCP proxy it controls:
//
//	--case unlock-retry    etcd-io/etcd#22082: Unlock's delete is applied but
//	                       its answer lost; the same session locks again (the
//	                       same key name, a newer create revision); the old
//	                       Mutex's Unlock, retried, deletes the newer lock.
//	--case resign          etcd-io/etcd#22123: a Resign whose request fails
//	                       forgets the leader key; the next Resign does nothing
//	                       and the key stays as long as the session lives.
//	--case campaign-error  etcd-io/etcd#21128: Campaign fails while waiting
//	                       (its watch resumes at a compacted revision) and
//	                       returns without deleting its key.
//
// --endpoints is the subject's path to etcd (through the test's proxies);
// --direct reaches the members straight, for the other parties. At each
// {"event":"step","step":NAME} line the program waits for one stdin line,
// during which the test applies its fault. The other lines report what the
// package did; "done" ends a run whatever the verdict: the test judges.
func repro(args []string) error {
	fs := flag.NewFlagSet("repro", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "", "the subject's endpoints (through proxies)")
	direct := fs.String("direct", "", "endpoints reached without a proxy")
	prefix := fs.String("prefix", "", "the lock or election prefix")
	ttl := fs.Int("ttl", 10, "session TTL in seconds")
	which := fs.String("case", "", "unlock-retry, resign or campaign-error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *prefix == "" || *direct == "" {
		return errors.New("repro needs --endpoints, --direct, --prefix and --case")
	}
	r := &stepper{in: bufio.NewScanner(os.Stdin)}
	switch *which {
	case "unlock-retry":
		return r.unlockRetry(*endpoints, *direct, *prefix, *ttl)
	case "resign":
		return r.resign(*endpoints, *direct, *prefix, *ttl)
	case "campaign-error":
		return r.campaignError(*endpoints, *direct, *prefix, *ttl)
	}
	return fmt.Errorf("unknown --case %q (want unlock-retry, resign or campaign-error)", *which)
}

// stepper pauses the program at each step until the driving test answers.
type stepper struct {
	in *bufio.Scanner
}

func (r *stepper) step(name string, fields map[string]any) error {
	if fields == nil {
		fields = map[string]any{}
	}
	fields["event"], fields["step"] = "step", name
	lineproto.Emit(fields)
	if !r.in.Scan() {
		return fmt.Errorf("stdin closed at step %s", name)
	}
	return nil
}

func report(event string, fields map[string]any) {
	fields["event"] = event
	lineproto.Emit(fields)
}

// errText is err's message, or "" for none (JSON-friendly).
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// retried calls op until it succeeds, at most 10 times 100 ms apart, as a
// caller does after a connection error: the connections the test cut may
// fail one more request each before the client has replaced them.
func retried(op func() error) (err error) {
	for range 10 {
		if err = op(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// created is the create revision of key, 0 when it does not exist.
func created(cli *clientv3.Client, key string) (int64, error) {
	r, err := get(cli, key)
	if err != nil {
		return 0, err
	}
	if len(r.Kvs) == 0 {
		return 0, nil
	}
	return r.Kvs[0].CreateRevision, nil
}

// unlockRetry: #22082. The fault (replies dropped, then connections cut)
// is the test's; this side only calls the package as a user would: lock,
// unlock (fails), lock again on the same session, retry the failed unlock.
func (r *stepper) unlockRetry(endpoints, direct, prefix string, ttl int) error {
	cli, err := connect(endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	s, err := newSession(cli, ttl)
	if err != nil {
		return err
	}
	defer s.Close()
	first := concurrency.NewMutex(s, prefix)
	if err := lock(first); err != nil {
		return err
	}
	firstRev, err := created(cli, first.Key())
	if err != nil {
		return err
	}
	if err := r.step("unlock", map[string]any{"key": first.Key(), "rev": firstRev}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err = first.Unlock(ctx)
	cancel()
	report("unlocked", map[string]any{"error": errText(err)})
	if err == nil {
		return errors.New("the first Unlock succeeded: the fault did not reach it")
	}
	// The caller sees an error and does what the error invites: it keeps
	// the Mutex to retry the unlock later; meanwhile the same session
	// locks again.
	second := concurrency.NewMutex(s, prefix)
	if err := retried(func() error { return lock(second) }); err != nil {
		return err
	}
	rev, err := created(cli, second.Key())
	if err != nil {
		return err
	}
	report("relocked", map[string]any{"key": second.Key(), "rev": rev})
	err = retried(func() error { return unlock(first) })
	report("retried", map[string]any{"error": errText(err)})
	after, err := created(cli, second.Key())
	if err != nil {
		return err
	}
	// Whether someone else can now lock while second still believes it
	// holds: a second session, straight to the members.
	other, err := connect(direct)
	if err != nil {
		return err
	}
	defer other.Close()
	s2, err := newSession(other, ttl)
	if err != nil {
		return err
	}
	defer s2.Close()
	third := concurrency.NewMutex(s2, prefix)
	ctx, cancel = context.WithTimeout(context.Background(), opTimeout)
	tryErr := third.TryLock(ctx)
	cancel()
	report("verdict", map[string]any{"second_key_rev": after, "second_rev": rev,
		"other_locked": tryErr == nil, "other_error": errText(tryErr)})
	lineproto.Emit(map[string]any{"event": "done"})
	return nil
}

// resign: #22123. The first Resign runs into a blackhole (its context
// expires); after the heal the second Resign returns nil.
func (r *stepper) resign(endpoints, direct, prefix string, ttl int) error {
	cli, err := connect(endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	s, err := newSession(cli, ttl)
	if err != nil {
		return err
	}
	defer s.Close()
	e := concurrency.NewElection(s, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	err = e.Campaign(ctx, "subject")
	cancel()
	if err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	key := e.Key()
	if err := r.step("resign", map[string]any{"key": key}); err != nil {
		return err
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	err = e.Resign(ctx)
	cancel()
	report("resigned", map[string]any{"error": errText(err), "key_after": e.Key()})
	if err := r.step("resign-again", nil); err != nil {
		return err
	}
	ctx, cancel = context.WithTimeout(context.Background(), opTimeout)
	err = e.Resign(ctx)
	cancel()
	rev, gerr := created(cli, key)
	if gerr != nil {
		return gerr
	}
	// A second candidate, straight to the members, while the subject's
	// session lives on (as the process that resigned does).
	other, oerr := connect(direct)
	if oerr != nil {
		return oerr
	}
	defer other.Close()
	s2, serr := newSession(other, ttl)
	if serr != nil {
		return serr
	}
	defer s2.Close()
	e2 := concurrency.NewElection(s2, prefix)
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
	elected := e2.Campaign(ctx, "other")
	cancel()
	report("verdict", map[string]any{"error": errText(err), "key_rev_after": rev,
		"other_elected": elected == nil, "other_error": errText(elected)})
	lineproto.Emit(map[string]any{"event": "done"})
	return nil
}

// watchSpy reports (once per arming) a watch the server confirmed: the
// test's cue that Campaign waits in its watch. It only observes replies.
type watchSpy struct {
	mu      sync.Mutex
	created chan struct{}
}

func (w *watchSpy) interceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
	method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != "/etcdserverpb.Watch/Watch" {
		return cs, err
	}
	return &spiedStream{ClientStream: cs, spy: w}, nil
}

type spiedStream struct {
	grpc.ClientStream
	spy *watchSpy
}

func (s *spiedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if wr, ok := m.(*pb.WatchResponse); ok && err == nil && wr.Created {
		s.spy.mu.Lock()
		if s.spy.created != nil {
			close(s.spy.created)
			s.spy.created = nil
		}
		s.spy.mu.Unlock()
	}
	return err
}

// campaignError: #21128. A leader holds; the subject campaigns and waits in
// its watch; the test compacts past the watch's start revision and cuts
// the subject's connections, so the watch resumes at a compacted revision
// and Campaign returns ErrCompacted.
func (r *stepper) campaignError(endpoints, direct, prefix string, ttl int) error {
	other, err := connect(direct)
	if err != nil {
		return err
	}
	defer other.Close()
	sl, err := newSession(other, ttl)
	if err != nil {
		return err
	}
	defer sl.Close()
	leader := concurrency.NewElection(sl, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	err = leader.Campaign(ctx, "leader")
	cancel()
	if err != nil {
		return fmt.Errorf("leader campaign: %w", err)
	}

	spy := &watchSpy{created: make(chan struct{})}
	watching := spy.created
	cli, err := clientv3.New(clientv3.Config{Endpoints: splitEndpoints(endpoints), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(spy.interceptor)}})
	if err != nil {
		return err
	}
	defer cli.Close()
	s, err := newSession(cli, ttl)
	if err != nil {
		return err
	}
	defer s.Close()
	e := concurrency.NewElection(s, prefix)
	returned := make(chan error, 1)
	go func() { returned <- e.Campaign(context.Background(), "subject") }()
	key := fmt.Sprintf("%s/%x", prefix, s.Lease())
	select {
	case <-watching:
	case err := <-returned:
		return fmt.Errorf("campaign returned before waiting: %v", err)
	case <-time.After(lockTimeout):
		return errors.New("campaign never started its watch")
	}
	if err := r.step("watching", map[string]any{"key": key}); err != nil {
		return err
	}
	var campaignErr error
	select {
	case campaignErr = <-returned:
	case <-time.After(20 * time.Second):
		return errors.New("campaign neither failed nor won within 20 s of the fault")
	}
	left, err := created(other, key)
	if err != nil {
		return err
	}
	report("campaign_returned", map[string]any{"error": errText(campaignErr), "key_rev": left})
	// The caller cleans up as the API invites: Resign.
	ctx, cancel = context.WithTimeout(context.Background(), opTimeout)
	resignErr := e.Resign(ctx)
	cancel()
	afterResign, err := created(other, key)
	if err != nil {
		return err
	}
	// The leader steps down; a third candidate should be elected.
	ctx, cancel = context.WithTimeout(context.Background(), opTimeout)
	err = leader.Resign(ctx)
	cancel()
	if err != nil {
		return fmt.Errorf("leader resign: %w", err)
	}
	s3, err := newSession(other, ttl)
	if err != nil {
		return err
	}
	defer s3.Close()
	third := concurrency.NewElection(s3, prefix)
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
	elected := third.Campaign(ctx, "third")
	cancel()
	now := ""
	ctx, cancel = context.WithTimeout(context.Background(), opTimeout)
	if lr, err := third.Leader(ctx); err == nil && len(lr.Kvs) > 0 {
		now = string(lr.Kvs[0].Value)
	}
	cancel()
	report("verdict", map[string]any{"resign_error": errText(resignErr), "key_rev_after_resign": afterResign,
		"third_elected": elected == nil, "leader_value": now})
	lineproto.Emit(map[string]any{"event": "done"})
	return nil
}

// splitEndpoints is connect's parsing of a comma-separated list.
func splitEndpoints(list string) []string {
	var eps []string
	for _, e := range strings.Split(list, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return eps
}
