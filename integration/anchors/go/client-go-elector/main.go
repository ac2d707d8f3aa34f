// Command client-go-elector campaigns for a coordination.k8s.io/v1 Lease
// with client-go's own leader election (tools/leaderelection with a
// resourcelock.LeaseLock), so that Rust tests can check that fencing's
// KubeLeaseSource and client-go candidates share one Lease correctly, and
// benchmarks can compare their latencies.
//
// # Flags
//
//	--kubeconfig PATH        client credentials (required)
//	--namespace NS, --name N the Lease (required)
//	--identity ID            this candidate's holderIdentity (required)
//	--lease-duration D       Go durations; client-go needs
//	--renew-deadline D         lease-duration > renew-deadline >
//	--retry-period D           1.2 * retry-period (defaults 15s, 10s, 2s)
//	--release-on-cancel      release the Lease when a round ends (default true)
//	--rounds N               campaign N times in a row (default 1)
//	--hold D                 stay leader D per round, then cancel (release);
//	                         0 = until stdin closes or SIGTERM/SIGINT, which
//	                         also ends the program (default 0)
//	--pause D                wait D between two rounds (default 0)
//	--gate-url URL           while leading, send --writes PUT requests to URL
//	--writes K               with header "Fencing-Token: <token>" (default 3)
//	--coordinated B[:E]      join coordinated leader election: a LeaseCandidate
//	                         named --identity, binary version B, emulation
//	                         version E (default B), and Coordinated: true
//
// `client-go-elector campaign [flags]` is instead the anchor client of the
// Rust fault campaign: see campaign.go.
//
// # Output
//
// One JSON object per line on stdout (lineproto.Emit, shared with
// etcd-mutex in ../lineproto); every object has "event" and "t" (unix
// nanoseconds when it was printed):
//
//	{"event":"started"}                                  before the first campaign
//	{"event":"new_leader","identity":ID}                 client-go's OnNewLeader (any holder, us too)
//	{"event":"leading","round":R,"identity":ID,"token":RV}
//	{"event":"write","round":R,"token":RV,"status":CODE} one per gate PUT (409: the gate refused it)
//	{"event":"stopped_leading","round":R}                after the release write, if any
//	{"event":"done"}                                     last line of a normal exit (code 0)
//
// A round that ends without ever leading prints no leading/stopped_leading.
// Errors (bad flags, unreachable server, a failed gate request) go to
// stderr and the exit code is not 0. client-go's own log lines (klog) go to
// stderr too.
//
// # The token
//
// client-go does not expose the resourceVersion of the write that made it
// leader, so right after OnStartedLeading the program GETs the Lease (a
// quorum read, no resourceVersion given) and, if it still names this
// identity, reports its metadata.resourceVersion as the fencing token. That
// value is a valid token for this term: the Lease names us, so the version
// is that of a write made in our term (the acquiring write or one of our
// renewals; another holder's write would have changed holderIdentity, and a
// release clears it). Every write of an earlier term happened before our
// acquiring write, so it has a smaller resourceVersion; the next holder's
// acquiring write happens after our last write, so it has a larger one.
// Tokens therefore grow strictly from term to term, as fencing needs, even
// though this one may be a renewal's version rather than the acquisition's.
// If the Lease no longer names us when read, the term is already over: no
// "leading" line is printed and the round ends as client-go notices.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"fencing.local/lineproto"
	coordinationv1 "k8s.io/api/coordination/v1"
)

// requestTimeout bounds the token read and every gate request.
const requestTimeout = 5 * time.Second

type options struct {
	kubeconfig, namespace, name, identity string
	leaseDuration, renewDeadline, retry   time.Duration
	releaseOnCancel                       bool
	rounds                                int
	hold, pause                           time.Duration
	gateURL                               string
	writes                                int
	coordinated                           string
}

func parseFlags() (options, error) {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (required)")
	flag.StringVar(&o.namespace, "namespace", "", "namespace of the Lease (required)")
	flag.StringVar(&o.name, "name", "", "name of the Lease (required)")
	flag.StringVar(&o.identity, "identity", "", "holderIdentity of this candidate (required)")
	flag.DurationVar(&o.leaseDuration, "lease-duration", 15*time.Second, "LeaseDuration")
	flag.DurationVar(&o.renewDeadline, "renew-deadline", 10*time.Second, "RenewDeadline")
	flag.DurationVar(&o.retry, "retry-period", 2*time.Second, "RetryPeriod")
	flag.BoolVar(&o.releaseOnCancel, "release-on-cancel", true, "release the Lease when a round ends")
	flag.IntVar(&o.rounds, "rounds", 1, "how many times to campaign")
	flag.DurationVar(&o.hold, "hold", 0, "how long to lead per round (0: until stdin closes or SIGTERM)")
	flag.DurationVar(&o.pause, "pause", 0, "wait between two rounds")
	flag.StringVar(&o.gateURL, "gate-url", "", "send PUT requests with the Fencing-Token header here while leading")
	flag.IntVar(&o.writes, "writes", 3, "how many gate PUT requests per term")
	flag.StringVar(&o.coordinated, "coordinated", "", "BINARY[:EMULATION]: campaign through coordinated leader election")
	flag.Parse()
	for flagName, v := range map[string]string{"kubeconfig": o.kubeconfig, "namespace": o.namespace, "name": o.name, "identity": o.identity} {
		if v == "" {
			return o, fmt.Errorf("--%s is required", flagName)
		}
	}
	if flag.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", flag.Args())
	}
	if o.rounds < 1 || o.writes < 0 || o.hold < 0 || o.pause < 0 {
		return o, errors.New("--rounds must be at least 1; --writes, --hold and --pause must not be negative")
	}
	return o, nil
}

// event is one output line; empty fields are left out.
type event struct {
	Event    string `json:"event"`
	T        int64  `json:"t"`
	Round    int    `json:"round,omitempty"`
	Identity string `json:"identity,omitempty"`
	Token    string `json:"token,omitempty"`
	Status   int    `json:"status,omitempty"`
}

// Stamp sets "t": lineproto.Emit calls it under its output lock, so the
// stamps grow in output order.
func (e *event) Stamp(unixNanos int64) { e.T = unixNanos }

func emit(e event) {
	lineproto.Emit(&e)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "client-go-elector: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	// "campaign" is a subcommand of its own (campaign.go); every other
	// use is the flags above.
	if len(os.Args) > 1 && os.Args[1] == "campaign" {
		if err := runCampaign(os.Args[2:]); err != nil {
			fail("campaign: %v", err)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "repro" {
		if err := runRepro(os.Args[2:]); err != nil {
			fail("repro: %v", err)
		}
		return
	}
	o, err := parseFlags()
	if err != nil {
		fmt.Fprintf(os.Stderr, "client-go-elector: %v\n", err)
		os.Exit(2)
	}
	config, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		fail("reading %s: %v", o.kubeconfig, err)
	}
	config.Timeout = requestTimeout
	clients, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail("building a client: %v", err)
	}

	// The program ends on SIGTERM/SIGINT, and with --hold 0 also when
	// stdin closes.
	root, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if o.hold == 0 {
		var cancel context.CancelFunc
		root, cancel = context.WithCancel(root)
		go func() {
			io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}

	if o.coordinated != "" {
		if err := candidate(root, clients, o); err != nil {
			fail("coordinated candidate: %v", err)
		}
	}
	emit(event{Event: "started"})
	for round := 1; round <= o.rounds && root.Err() == nil; round++ {
		if round > 1 && o.pause > 0 {
			select {
			case <-time.After(o.pause):
			case <-root.Done():
			}
		}
		if err := campaign(root, clients, o, round); err != nil {
			fail("round %d: %v", round, err)
		}
	}
	emit(event{Event: "done"})
}

// campaign runs one round: acquire, lead (hold, write), release.
func campaign(root context.Context, clients *kubernetes.Clientset, o options, round int) error {
	ctx, cancel := context.WithCancel(root)
	defer cancel()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.namespace, Name: o.name},
		Client:     clients.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.identity},
	}
	var (
		led     atomic.Bool // a "leading" line was printed this round
		leadErr error
		// The callback runs in client-go's own goroutine, which may start
		// only after Run returned; terms counts the callbacks to wait for,
		// and once ended is set a late callback returns at once.
		mu    sync.Mutex
		ended bool
		terms sync.WaitGroup
	)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.leaseDuration,
		RenewDeadline:   o.renewDeadline,
		RetryPeriod:     o.retry,
		ReleaseOnCancel: o.releaseOnCancel,
		Coordinated:     o.coordinated != "",
		Name:            "client-go-elector",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(termCtx context.Context) {
				mu.Lock()
				if ended {
					mu.Unlock()
					return
				}
				terms.Add(1)
				mu.Unlock()
				defer terms.Done()
				if err := lead(termCtx, clients, o, round, &led); err != nil {
					mu.Lock()
					leadErr = err
					mu.Unlock()
					cancel()
					return
				}
				if o.hold > 0 {
					select {
					case <-time.After(o.hold):
					case <-termCtx.Done():
					}
					cancel()
				}
			},
			OnStoppedLeading: func() {
				if led.Load() {
					emit(event{Event: "stopped_leading", Round: round})
				}
			},
			OnNewLeader: func(identity string) {
				emit(event{Event: "new_leader", Identity: identity})
			},
		},
	})
	if err != nil {
		return err
	}
	elector.Run(ctx)
	mu.Lock()
	ended = true
	mu.Unlock()
	terms.Wait()
	mu.Lock()
	defer mu.Unlock()
	return leadErr
}

// lead reads the token and sends the gate writes of one term.
func lead(ctx context.Context, clients *kubernetes.Clientset, o options, round int, led *atomic.Bool) error {
	readCtx, cancel := context.WithTimeout(ctx, requestTimeout)
	lease, err := clients.CoordinationV1().Leases(o.namespace).Get(readCtx, o.name, metav1.GetOptions{})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil // the term ended while reading
		}
		return fmt.Errorf("reading the Lease after becoming leader: %w", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != o.identity {
		fmt.Fprintf(os.Stderr, "client-go-elector: round %d: the Lease no longer names us; no token\n", round)
		return nil
	}
	token := lease.ResourceVersion
	led.Store(true)
	emit(event{Event: "leading", Round: round, Identity: o.identity, Token: token})
	if o.gateURL == "" {
		return nil
	}
	for i := 0; i < o.writes && ctx.Err() == nil; i++ {
		status, err := gateWrite(ctx, o, token, round, i)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		emit(event{Event: "write", Round: round, Token: token, Status: status})
	}
	return nil
}

// gateWrite sends one PUT carrying the token and returns the status code.
func gateWrite(ctx context.Context, o options, token string, round, seq int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	body := fmt.Sprintf(`{"identity":%q,"round":%d,"seq":%d}`, o.identity, round, seq)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, o.gateURL, strings.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("gate request: %w", err)
	}
	req.Header.Set("Fencing-Token", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("gate PUT %s: %w", o.gateURL, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// candidate publishes this program's LeaseCandidate (named --identity) and
// keeps answering the election controller's pings until root ends.
func candidate(root context.Context, clients *kubernetes.Clientset, o options) error {
	binary, emulation, found := strings.Cut(o.coordinated, ":")
	if !found {
		emulation = binary
	}
	lc, waiter, err := leaderelection.NewCandidate(clients, o.namespace, o.identity, o.name,
		binary, emulation, coordinationv1.OldestEmulationVersion)
	if err != nil {
		return err
	}
	go lc.Run(root)
	waiter.WaitForCacheSync(root.Done())
	return nil
}
