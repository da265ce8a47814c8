// Package gate answers the pod readiness gate haproxy-k8s-sync.io/in-service
// (POD_READINESS_GATE, pod mode): after each reconcile it sets the condition
// True on a pod whose server is in service with a passed check on every
// HAProxy target, and False, with the reason, on one whose server is not
// (waiting for its check, drained, in maintenance, absent). A Deployment's
// rolling update then waits for HAProxy: a new pod is Ready only once
// HAProxy sends it traffic, so the old ones are not removed before.
//
// It computes the condition afresh from what the reconcile read and keeps
// nothing. It writes only a change (status, reason or message), to the status
// subresource, as a kubelet does; it reads a pod only when its endpoint is
// ready but its server is not in service (the reconcile read the others).
package gate

import (
	"context"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/cut"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// Reasons of the condition.
const (
	ReasonInService    = "InService"
	ReasonNotInService = "NotInService"
)

// MaxWrites bounds the pods read or patched per reconcile; the rest wait
// for the next one (the follow-up comes while servers wait for checks).
const MaxWrites = 100

// Client reads and patches pods: sync/kube.Client.
type Client interface {
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	PatchPodCondition(ctx context.Context, namespace, name string, cond corev1.PodCondition) error
}

// Writer sets the condition on the pods of one namespace.
type Writer struct {
	Client    Client
	Namespace string
	Log       *slog.Logger
	// OnWrite, when set, is told of each pod read ("get") and each
	// condition written ("true", "false"); it may be called concurrently.
	OnWrite func(op string)
	now     func() time.Time
}

// Update writes the condition each pod of in calls for: first it reads the
// pods it must (ready endpoints whose server is out), then it writes the
// conditions that change, writers at a time, MaxWrites requests at most.
func (w *Writer) Update(ctx context.Context, in reconcile.GateInput) {
	budget := MaxWrites
	pods := make([]*corev1.Pod, len(in.Servers))
	var toRead []int
	for i, s := range in.Servers {
		pods[i] = in.Pods[s.Pod]
		// A pod not read has a ready endpoint, so it is Ready: its gate is
		// True if it has one. Only a server out of service changes that.
		if pods[i] == nil && !s.InService && budget > 0 {
			toRead = append(toRead, i)
			budget--
		}
	}
	each(len(toRead), func(k int) {
		i := toRead[k]
		p, err := w.Client.GetPod(ctx, w.Namespace, in.Servers[i].Pod)
		w.wrote("get")
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			w.log().Warn("readiness gate: cannot read pod", "pod", in.Servers[i].Pod, "error", err)
		default:
			pods[i] = p
		}
	})
	type patch struct {
		pod  string
		cond corev1.PodCondition
	}
	var patches []patch
	for i, s := range in.Servers {
		pod := pods[i]
		if pod == nil || !desired.ListsGate(pod) {
			continue
		}
		want := corev1.PodCondition{Type: desired.ReadinessGate, Status: corev1.ConditionTrue, Reason: ReasonInService,
			Message: "in service with a passed check on every HAProxy target"}
		if !s.InService {
			want.Status, want.Reason, want.Message = corev1.ConditionFalse, ReasonNotInService, cut.To(s.Why, 512)
		}
		cur := desired.GateCondition(pod)
		if cur != nil && cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message {
			continue
		}
		if budget == 0 {
			w.log().Info("readiness gate: more pods to update than one reconcile writes; the next one goes on", "limit", MaxWrites)
			break
		}
		budget--
		want.LastTransitionTime = metav1.NewTime(w.clock())
		if cur != nil && cur.Status == want.Status {
			// Only the reason or message changed: no transition, as a
			// kubelet keeps the time of a condition whose status stays.
			want.LastTransitionTime = cur.LastTransitionTime
		}
		patches = append(patches, patch{s.Pod, want})
	}
	each(len(patches), func(k int) {
		p := patches[k]
		if err := w.Client.PatchPodCondition(ctx, w.Namespace, p.pod, p.cond); err != nil {
			if !apierrors.IsNotFound(err) {
				w.log().Warn("readiness gate: cannot set the condition", "pod", p.pod, "status", p.cond.Status, "error", err)
			}
			return
		}
		w.wrote(map[corev1.ConditionStatus]string{corev1.ConditionTrue: "true", corev1.ConditionFalse: "false"}[p.cond.Status])
		w.log().Info("readiness gate", "pod", p.pod, "status", p.cond.Status, "reason", p.cond.Reason, "message", p.cond.Message)
	})
}

// writers bounds the requests in flight.
const writers = 8

// each runs f(0..n-1), writers at a time, and waits.
func each(n int, f func(int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, writers)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

func (w *Writer) wrote(op string) {
	if w.OnWrite != nil {
		w.OnWrite(op)
	}
}

func (w *Writer) clock() time.Time {
	if w.now != nil {
		return w.now()
	}
	return time.Now()
}

func (w *Writer) log() *slog.Logger {
	if w.Log != nil {
		return w.Log
	}
	return slog.New(slog.DiscardHandler)
}
