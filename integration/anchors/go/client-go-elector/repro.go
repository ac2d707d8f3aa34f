package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"fencing.local/lineproto"
)

// runRepro is `client-go-elector repro`: one candidate whose every step is
// reported, for the split-brain reproduction of
// integration/tests/tests/anchor_bugs (docs/anchor-bugs.md). It takes the
// program's usual flags (--kubeconfig, --namespace, --name, --identity and
// the three timings), campaigns once, and prints, each stamped "t" (unix
// ns):
//
//	{"event":"leading"}         OnStartedLeading ran: from here the work acts as leader
//	{"event":"renewed"}         a write of ours to the Lease succeeded (acquire or renew)
//	{"event":"term_ended"}      the context handed to OnStartedLeading was cancelled:
//	                            the work stops acting as leader
//	{"event":"stopped_leading"} OnStoppedLeading ran
//	{"event":"new_leader","identity":ID}
//
// It ends when stdin closes. client-go's defaults apply otherwise
// (ReleaseOnCancel as --release-on-cancel, true by default).
func runRepro(args []string) error {
	fs := flag.NewFlagSet("repro", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (required)")
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the Lease (required)")
	fs.StringVar(&o.name, "name", "", "name of the Lease (required)")
	fs.StringVar(&o.identity, "identity", "", "holderIdentity of this candidate (required)")
	fs.DurationVar(&o.leaseDuration, "lease-duration", 15*time.Second, "LeaseDuration")
	fs.DurationVar(&o.renewDeadline, "renew-deadline", 10*time.Second, "RenewDeadline")
	fs.DurationVar(&o.retry, "retry-period", 2*time.Second, "RetryPeriod")
	fs.BoolVar(&o.releaseOnCancel, "release-on-cancel", true, "release the Lease when the term ends")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.kubeconfig == "" || o.namespace == "" || o.name == "" || o.identity == "" {
		return errors.New("repro needs --kubeconfig, --namespace, --name and --identity")
	}
	config, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", o.kubeconfig, err)
	}
	// No client-side limit below client-go's own: each request is bounded
	// by the context leaderelection gives it (the renew deadline).
	config.Timeout = 0
	clients, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	root, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	lock := &reportingLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.namespace, Name: o.name},
		Client:     clients.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.identity},
	}}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.leaseDuration,
		RenewDeadline:   o.renewDeadline,
		RetryPeriod:     o.retry,
		ReleaseOnCancel: o.releaseOnCancel,
		Name:            "client-go-elector-repro",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(term context.Context) {
				emit(event{Event: "leading", Identity: o.identity})
				<-term.Done()
				emit(event{Event: "term_ended", Identity: o.identity})
			},
			OnStoppedLeading: func() {
				emit(event{Event: "stopped_leading", Identity: o.identity})
			},
			OnNewLeader: func(identity string) {
				emit(event{Event: "new_leader", Identity: identity})
			},
		},
	})
	if err != nil {
		return err
	}
	elector.Run(root)
	<-root.Done()
	lineproto.Emit(&event{Event: "done"})
	return nil
}

// reportingLock is client-go's LeaseLock, unchanged, that reports each of
// its successful writes (the acquiring one and every renewal).
type reportingLock struct {
	resourcelock.Interface
}

func (l *reportingLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, ler)
	if err == nil {
		emit(event{Event: "renewed", Identity: ler.HolderIdentity})
	}
	return err
}

func (l *reportingLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, ler)
	if err == nil {
		emit(event{Event: "renewed", Identity: ler.HolderIdentity})
	}
	return err
}
