package gate

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// client serves pods and records what is asked.
type client struct {
	mu      sync.Mutex
	pods    map[string]*corev1.Pod
	gets    []string
	patches []string // "pod=Status"
	last    corev1.PodCondition
}

func (c *client) GetPod(_ context.Context, _, name string) (*corev1.Pod, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gets = append(c.gets, name)
	if p, ok := c.pods[name]; ok {
		return p, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
}

func (c *client) PatchPodCondition(_ context.Context, _, name string, cond corev1.PodCondition) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.patches = append(c.patches, name+"="+string(cond.Status))
	c.last = cond
	return nil
}

func gated(name string, cond *corev1.PodCondition) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: desired.ReadinessGate}}}}
	if cond != nil {
		cond.Type = desired.ReadinessGate
		p.Status.Conditions = []corev1.PodCondition{*cond}
	}
	return p
}

func TestUpdate(t *testing.T) {
	trueCond := &corev1.PodCondition{Status: corev1.ConditionTrue, Reason: ReasonInService, Message: "in service with a passed check on every HAProxy target"}
	falseCond := func() *corev1.PodCondition {
		return &corev1.PodCondition{Status: corev1.ConditionFalse, Reason: ReasonNotInService, Message: "an older reason"}
	}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}
	for _, tt := range []struct {
		name          string
		server        reconcile.GateServer
		read, stored  *corev1.Pod // read with the endpoints; stored in the API
		gets, patches []string
	}{
		{"read, in service, no condition yet: True", reconcile.GateServer{Pod: "a", InService: true}, gated("a", nil), nil, nil, []string{"a=True"}},
		{"read, in service, True already: nothing", reconcile.GateServer{Pod: "a", InService: true}, gated("a", trueCond), nil, nil, nil},
		{"read, waiting: False", reconcile.GateServer{Pod: "a", Why: "waiting for its check on t be"}, gated("a", nil), nil, nil, []string{"a=False"}},
		{"read, False already, same message: nothing", reconcile.GateServer{Pod: "a", Why: "an older reason"}, gated("a", falseCond()), nil, nil, nil},
		{"read, False already, another message: False again", reconcile.GateServer{Pod: "a", Why: "drain on t be"}, gated("a", falseCond()), nil, nil, []string{"a=False"}},
		{"read, True, now drained: False", reconcile.GateServer{Pod: "a", Why: "drain on t be"}, gated("a", trueCond), nil, nil, []string{"a=False"}},
		{"read, no gate listed: nothing", reconcile.GateServer{Pod: "plain", InService: true}, plain, nil, nil, nil},
		{"endpoint ready, in service: no read", reconcile.GateServer{Pod: "a", InService: true}, nil, gated("a", trueCond), nil, nil},
		{"endpoint ready, server out: read, then False", reconcile.GateServer{Pod: "a", Why: "maint on t be"}, nil, gated("a", trueCond), []string{"a"}, []string{"a=False"}},
		{"endpoint ready, server out, no gate: read only", reconcile.GateServer{Pod: "plain", Why: "maint on t be"}, nil, plain, []string{"plain"}, nil},
		{"endpoint ready, pod gone: nothing", reconcile.GateServer{Pod: "gone", Why: "absent from t be"}, nil, nil, []string{"gone"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &client{pods: map[string]*corev1.Pod{}}
			if tt.stored != nil {
				c.pods[tt.stored.Name] = tt.stored
			}
			in := reconcile.GateInput{Servers: []reconcile.GateServer{tt.server}, Pods: map[string]*corev1.Pod{}}
			if tt.read != nil {
				in.Pods[tt.read.Name] = tt.read
			}
			(&Writer{Client: c, Namespace: "ns"}).Update(context.Background(), in)
			if fmt.Sprint(c.gets) != fmt.Sprint(tt.gets) || fmt.Sprint(c.patches) != fmt.Sprint(tt.patches) {
				t.Errorf("gets %v patches %v, want %v %v", c.gets, c.patches, tt.gets, tt.patches)
			}
		})
	}
}

// TestTransitionTime: a condition's lastTransitionTime moves when its
// status does, not when only its message does.
func TestTransitionTime(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	now := time.Date(2026, 11, 24, 12, 5, 0, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		server reconcile.GateServer
		want   time.Time
	}{
		{"False, another message: kept", reconcile.GateServer{Pod: "a", Why: "drain on t be"}, then.Time},
		{"False to True: now", reconcile.GateServer{Pod: "a", InService: true}, now},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &client{}
			pod := gated("a", &corev1.PodCondition{Status: corev1.ConditionFalse, Reason: ReasonNotInService,
				Message: "waiting for its check on t be", LastTransitionTime: then})
			in := reconcile.GateInput{Servers: []reconcile.GateServer{tt.server}, Pods: map[string]*corev1.Pod{"a": pod}}
			(&Writer{Client: c, Namespace: "ns", now: func() time.Time { return now }}).Update(context.Background(), in)
			if len(c.patches) != 1 || !c.last.LastTransitionTime.Time.Equal(tt.want) {
				t.Errorf("patches %v, lastTransitionTime %v, want %v", c.patches, c.last.LastTransitionTime, tt.want)
			}
		})
	}
}

// TestUpdateIsBounded: one reconcile writes MaxWrites at most.
func TestUpdateIsBounded(t *testing.T) {
	c := &client{}
	in := reconcile.GateInput{Pods: map[string]*corev1.Pod{}}
	for i := range 3 * MaxWrites {
		name := fmt.Sprintf("p%d", i)
		in.Pods[name] = gated(name, nil)
		in.Servers = append(in.Servers, reconcile.GateServer{Pod: name, InService: true})
	}
	(&Writer{Client: c, Namespace: "ns"}).Update(context.Background(), in)
	if len(c.patches) != MaxWrites {
		t.Errorf("%d patches, want %d", len(c.patches), MaxWrites)
	}
}
