package main

// The anchor client of the Rust fault campaign (integration/campaign):
// client-go's leader election with a LeaseLock on the same Lease as the
// campaign's Rust clients (the lock's name in their namespace), under the
// same faults, speaking their line protocol. Each hold is one
// LeaderElector.Run: leading, it writes every 25 ms for the hold and then
// cancels (ReleaseOnCancel gives the Lease back; after a pause that release
// clears the record of whoever holds the Lease now, a client-go bug the
// checker excuses in its victims: stale_client_go_release). It learns of a lost
// Lease only through OnStoppedLeading (and the context client-go hands to
// OnStartedLeading, which ends just before), as a client-go user would; the
// campaign's checker exempts it from noticing a loss in time and demands
// instead that the storage refused its late writes.
//
// The token is the Lease's resourceVersion read right after
// OnStartedLeading, taken only if the Lease still names this candidate (see
// "The token" in main.go).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"time"

	"fencing.local/lineproto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

const (
	// acquireLimit bounds one acquire, as the Rust clients wait.
	acquireLimit = 5 * time.Second
	writeEvery   = 25 * time.Millisecond
)

type campaignOptions struct {
	namespace, lock, identity           string
	leaseDuration, renewDeadline, retry time.Duration
	longHold                            time.Duration
	longPercent                         int
}

func runCampaign(args []string) error {
	fs := flag.NewFlagSet("campaign", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (required)")
	namespace := fs.String("namespace", "", "namespace of the Lease (required)")
	lock := fs.String("lock", "", "the lock, the Lease's name (required)")
	name := fs.String("name", "anchor", "the client's name; its identity is NAME-PID")
	ttlMs := fs.Int("ttl-ms", 2000, "lease duration in ms; renew deadline and retry period scale 15:10:2")
	timeoutMs := fs.Int("timeout-ms", 1000, "bound of one request")
	seed := fs.Int64("seed", 1, "seed of the hold times")
	longHoldMs := fs.Int("long-hold-ms", 3000, "the longest hold")
	longPercent := fs.Int("long-percent", 5, "share of holds (percent) from 1 s up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" || *namespace == "" || *lock == "" {
		return errors.New("campaign needs --kubeconfig, --namespace and --lock")
	}
	if *ttlMs < 1000 || *timeoutMs <= 0 || *longHoldMs < 1000 {
		return errors.New("campaign needs --ttl-ms >= 1000, --timeout-ms > 0 and --long-hold-ms >= 1000")
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", *kubeconfig, err)
	}
	config.Timeout = time.Duration(*timeoutMs) * time.Millisecond
	// Renewals every retry period must not wait for client-go's default
	// rate limit (5 per second).
	config.QPS, config.Burst = 100, 200
	clients, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("building a client: %w", err)
	}
	lease := time.Duration(*ttlMs) * time.Millisecond
	o := campaignOptions{
		namespace: *namespace,
		lock:      *lock,
		identity:  fmt.Sprintf("%s-%d", *name, os.Getpid()),
		// fencing's LeaderTimings::scaled_to: client-go's 15:10:2.
		leaseDuration: lease,
		renewDeadline: lease * 2 / 3,
		retry:         lease * 2 / 15,
		longHold:      time.Duration(*longHoldMs) * time.Millisecond,
		longPercent:   *longPercent,
	}
	// true: once stdin has closed, Await gives up at once.
	a := lineproto.NewAnchor(*lock, true)
	rng := rand.New(rand.NewSource(*seed))
	for !a.Stopping() {
		// The Rust clients' mix: mostly 10-150 ms, some from 1 s up.
		hold := time.Duration(10+rng.Intn(141)) * time.Millisecond
		if rng.Intn(100) < o.longPercent {
			hold = time.Duration(1000+rng.Intn(int(o.longHold/time.Millisecond)-999)) * time.Millisecond
		}
		if err := holdOnce(a, clients, o, hold); err != nil {
			return err
		}
	}
	return nil
}

// term is what one LeaderElector.Run has told the controller.
type term struct {
	mu      sync.Mutex
	started bool // OnStartedLeading ran (the acquire limit no longer applies)
	gaveUp  bool // the acquire limit passed first
	granted bool
	ended   bool // released or lost was sent
	token   uint64
}

// holdOnce runs one election: acquire (bounded), lead for hold writing
// every 25 ms, release. It returns once client-go's goroutines are done.
func holdOnce(a *lineproto.Anchor, clients *kubernetes.Clientset, o campaignOptions, hold time.Duration) error {
	a.Send("acquire_start", map[string]any{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t := &term{}
	limit := time.AfterFunc(acquireLimit, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.started {
			t.gaveUp = true
			cancel()
		}
	})
	defer limit.Stop()
	var leading sync.WaitGroup
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: o.namespace, Name: o.lock},
			Client:     clients.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: o.identity},
		},
		LeaseDuration:   o.leaseDuration,
		RenewDeadline:   o.renewDeadline,
		RetryPeriod:     o.retry,
		ReleaseOnCancel: true,
		Name:            "campaign-anchor",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(termCtx context.Context) {
				t.mu.Lock()
				if t.gaveUp {
					t.mu.Unlock()
					return
				}
				t.started = true
				leading.Add(1)
				t.mu.Unlock()
				defer leading.Done()
				leadTerm(termCtx, a, clients, o, t, hold)
				cancel() // the hold is over: release
			},
			OnStoppedLeading: func() {
				t.mu.Lock()
				defer t.mu.Unlock()
				if t.granted && !t.ended {
					t.ended = true
					a.Send("lost", map[string]any{"token": t.token, "reason": "OnStoppedLeading"})
				}
			},
		},
	})
	if err != nil {
		return err
	}
	elector.Run(ctx)
	t.mu.Lock()
	t.gaveUp = true // a late OnStartedLeading returns at once
	t.mu.Unlock()
	leading.Wait()
	if !t.granted {
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// leadTerm reads the token, then writes every 25 ms until the hold or the
// term ends, and reports the release unless the loss was reported.
func leadTerm(termCtx context.Context, a *lineproto.Anchor, clients *kubernetes.Clientset, o campaignOptions, t *term, hold time.Duration) {
	readCtx, cancelRead := context.WithTimeout(termCtx, lineproto.ReplyLimit)
	lease, err := clients.CoordinationV1().Leases(o.namespace).Get(readCtx, o.lock, metav1.GetOptions{})
	cancelRead()
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != o.identity {
		fmt.Fprintf(os.Stderr, "campaign: leading but no token (%v)\n", err)
		return
	}
	token, err := strconv.ParseUint(lease.ResourceVersion, 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "campaign: resourceVersion %q is no token\n", lease.ResourceVersion)
		return
	}
	t.mu.Lock()
	if termCtx.Err() != nil {
		// The term ended while reading (OnStoppedLeading follows).
		t.mu.Unlock()
		return
	}
	t.granted, t.token = true, token
	a.Send("grant", map[string]any{"token": token})
	t.mu.Unlock()
	until := time.Now().Add(hold)
	for time.Now().Before(until) && !a.Stopping() {
		select {
		case <-termCtx.Done():
			return // lost: OnStoppedLeading reports it
		case <-time.After(writeEvery):
		}
		a.MemWrite(token)
	}
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return
	}
	t.ended = true
	id := a.SendRelease(token)
	t.mu.Unlock()
	a.Await(id)
}
