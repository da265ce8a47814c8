package e2e

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/gate"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

// podSim plays the kubelet and the EndpointSlice controller for the pods of
// one namespace (envtest runs neither): a pod is Ready when its containers
// are and every readiness gate it lists is True, and the Service's slice
// lists the member pods, ready as their pod is, terminating when the test
// says so (as after a pod's deletion).
type podSim struct {
	t      *testing.T
	w      *world
	port   int32
	mu     sync.Mutex
	member []string // pod names, in order
	ips    map[string]string
	term   map[string]bool // terminating
	last   []discoveryv1.Endpoint
	// publish plays a Service with publishNotReadyAddresses: every
	// endpoint is ready; serving alone says whether its pod is.
	publish bool
}

func (s *podSim) set(members []string, terminating ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.member = members
	s.term = map[string]bool{}
	for _, n := range terminating {
		s.term[n] = true
	}
}

// pod creates a pod listing the gate at ip, its containers ready or not.
func (s *podSim) pod(name, ip string, containersReady bool) {
	s.t.Helper()
	c := cluster.client.CoreV1().Pods(s.w.ns)
	p, err := c.Create(s.w.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:2"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: desired.ReadinessGate}}}}, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	now := metav1.Now()
	cr := map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}[containersReady]
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, Conditions: []corev1.PodCondition{
		{Type: corev1.ContainersReady, Status: cr, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now},
	}}
	if _, err := c.UpdateStatus(s.w.ctx, p, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.ips[name] = ip
	s.mu.Unlock()
}

// containersReady marks a pod's containers ready, as its kubelet does once
// they start: the pod stays not Ready while its gate is not True, so its
// endpoint, and the slice, do not change.
func (s *podSim) containersReady(name string) {
	s.t.Helper()
	c := cluster.client.CoreV1().Pods(s.w.ns)
	for {
		p, err := c.Get(s.w.ctx, name, metav1.GetOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.ContainersReady {
				p.Status.Conditions[i].Status = corev1.ConditionTrue
			}
		}
		if _, err = c.UpdateStatus(s.w.ctx, p, metav1.UpdateOptions{}); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			s.t.Fatal(err)
		}
	}
}

// run keeps pods' Ready and the slice up to date until ctx ends.
func (s *podSim) run(ctx context.Context) {
	for ctx.Err() == nil {
		s.tick(ctx)
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *podSim) tick(ctx context.Context) {
	c := cluster.client.CoreV1().Pods(s.w.ns)
	list, err := c.List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	ready := map[string]bool{}
	for i := range list.Items {
		p := &list.Items[i]
		cond := map[corev1.PodConditionType]corev1.ConditionStatus{}
		for _, pc := range p.Status.Conditions {
			cond[pc.Type] = pc.Status
		}
		r := cond[corev1.ContainersReady] == corev1.ConditionTrue
		for _, g := range p.Spec.ReadinessGates {
			r = r && cond[g.ConditionType] == corev1.ConditionTrue
		}
		ready[p.Name] = r
		if (cond[corev1.PodReady] == corev1.ConditionTrue) != r {
			for j := range p.Status.Conditions {
				if p.Status.Conditions[j].Type == corev1.PodReady {
					p.Status.Conditions[j].Status = map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}[r]
					p.Status.Conditions[j].LastTransitionTime = metav1.Now()
				}
			}
			if _, err := c.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
				s.t.Logf("kubelet: %v", err)
			}
		}
	}
	s.mu.Lock()
	var eps []discoveryv1.Endpoint
	for _, n := range s.member {
		r, term, serving := ready[n] && !s.term[n] || s.publish, s.term[n], ready[n]
		eps = append(eps, discoveryv1.Endpoint{Addresses: []string{s.ips[n]},
			Conditions: discoveryv1.EndpointConditions{Ready: &r, Serving: &serving, Terminating: &term},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: s.w.ns, Name: n}})
	}
	changed := !reflect.DeepEqual(eps, s.last)
	s.last = eps
	s.mu.Unlock()
	if !changed {
		return
	}
	name, port := "http", s.port
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: s.w.ns, Labels: map[string]string{discoveryv1.LabelServiceName: "web"},
			Annotations: map[string]string{desired.LastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339Nano)}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
		Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}
	sc := cluster.client.DiscoveryV1().EndpointSlices(s.w.ns)
	old, err := sc.Get(ctx, "web-1", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = sc.Create(ctx, sl, metav1.CreateOptions{})
	} else if err == nil {
		sl.ResourceVersion = old.ResourceVersion
		_, err = sc.Update(ctx, sl, metav1.UpdateOptions{})
	}
	if err != nil {
		s.mu.Lock()
		s.last = nil // write again next tick
		s.mu.Unlock()
	}
}

func (s *podSim) condition(name string) (ready bool, gateCond *corev1.PodCondition) {
	s.t.Helper()
	p, err := cluster.client.CoreV1().Pods(s.w.ns).Get(s.w.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	return ready, desired.GateCondition(p)
}

// TestReadinessGateHoldsTheRollout: a Deployment's rolling update (maxSurge
// 1, maxUnavailable 0) of pods that list haproxy-k8s-sync.io/in-service,
// with the real service (POD_READINESS_GATE=true, nobody POSTing), a real
// kube-apiserver and HAProxy. The new pod starts with its containers not
// ready; once they are (a change no EndpointSlice shows) its server enters
// gated; while it fails its check the pod is not Ready (the gate is False,
// saying why), so the rollout waits and the old pod keeps serving; once the check passes the gate turns True, and only then
// does the rollout retire the old pod: at that moment HAProxy has the new
// server in service. Clients see no failed connection throughout, and the
// retired pod's gate turns False with its drain.
func TestReadinessGateHoldsTheRollout(t *testing.T) {
	w := newWorld(t, "web", desired.PodMode, []desired.PortBackend{{Backend: "be"}})
	w.service("web", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80})
	port := int32(haproxytest.FreePort(t, "10.244.1.1"))
	sim := &podSim{t: t, w: w, port: port, ips: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sim.run(ctx)

	s := startService(t, "KUBECONFIG="+kubeconfigVia(t, apiHostPort(t)), "INGRESS_NAMESPACE="+w.ns, "INGRESS_SERVICE_NAME=web",
		"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL="+w.h.RuntimeURL(), "TARGET_ADDRESS=pod", "POD_READINESS_GATE=true")
	until := func(what string, limit time.Duration, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(limit); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after %s; servers %+v\nservice logs:\n%s", what, limit, w.h.Servers(t, "be"), s.logs.String())
			}
		}
	}
	inService := func(name string) bool {
		srv, ok := w.h.Servers(t, "be")[name]
		return ok && srv.Up() && !srv.Drain() && !srv.Maint()
	}

	listen(t, "web-old", "10.244.1.1", port)
	sim.pod("web-old", "10.244.1.1", true)
	sim.set([]string{"web-old"})
	until("the first pod Ready through its gate", 20*time.Second, func() bool { r, _ := sim.condition("web-old"); return r })
	if !inService("web-old") {
		t.Fatalf("web-old Ready but not in service: %+v", w.h.Servers(t, "be"))
	}
	w.expectTraffic("be", "web-old")

	var sent, failed atomic.Int64
	probe, stopProbe := context.WithCancel(ctx)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		for probe.Err() == nil {
			sent.Add(1)
			if _, err := haproxytest.Ask(w.h.Frontends["be"]); err != nil {
				failed.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	// The new pod starts: its containers are not ready yet.
	sim.pod("web-new", "10.244.1.2", false)
	sim.set([]string{"web-old", "web-new"})
	until("the new pod's gate False", 10*time.Second, func() bool {
		_, c := sim.condition("web-new")
		return c != nil && c.Status == corev1.ConditionFalse
	})
	if inService("web-new") {
		t.Fatal("a pod whose containers are not ready is in service")
	}
	// Its containers get ready, but nothing answers on its port yet. No
	// slice changes: the service must look again by itself.
	sim.containersReady("web-new")
	until("the new pod waiting for its check", 10*time.Second, func() bool {
		_, c := sim.condition("web-new")
		return c != nil && strings.Contains(c.Message, "waiting for its check")
	})
	time.Sleep(2 * time.Second) // checks fail meanwhile
	ready, c := sim.condition("web-new")
	if ready || c.Reason != gate.ReasonNotInService || !strings.Contains(c.Message, "waiting for its check") || inService("web-new") {
		t.Fatalf("unchecked new pod: Ready %v, gate %+v, in service %v", ready, c, inService("web-new"))
	}
	if !inService("web-old") {
		t.Fatal("the old pod left service while the new one is unchecked")
	}

	listen(t, "web-new", "10.244.1.2", port)
	until("the new pod Ready", 20*time.Second, func() bool { r, _ := sim.condition("web-new"); return r })
	// The Deployment controller sees the new pod Ready (available) and
	// retires the old one: HAProxy must serve the new one already.
	if !inService("web-new") {
		t.Fatalf("the new pod is Ready but its server is not in service: %+v", w.h.Servers(t, "be"))
	}
	sim.set([]string{"web-old", "web-new"}, "web-old")
	until("the old server drained", 10*time.Second, func() bool { return w.h.Servers(t, "be")["web-old"].Drain() })
	until("the old pod's gate False", 10*time.Second, func() bool {
		_, c := sim.condition("web-old")
		return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "drain")
	})
	sim.set([]string{"web-new"})
	until("the old server gone", 10*time.Second, func() bool { _, ok := w.h.Servers(t, "be")["web-old"]; return !ok })
	w.expectTraffic("be", "web-new")
	stopProbe()
	<-probed
	if failed.Load() != 0 || sent.Load() < 50 {
		t.Errorf("%d of %d client connections failed during the rollout", failed.Load(), sent.Load())
	}
}

// TestReadinessGateWithPublishNotReadyAddresses: on a Service that
// publishes not-ready addresses every endpoint is ready, so ready cannot say
// the pod is. A gated pod's server waits for its check (the gate False,
// saying so), and once the check passes the gate turns True and the pod
// Ready: the False written while it waited does not stay.
func TestReadinessGateWithPublishNotReadyAddresses(t *testing.T) {
	w := newWorld(t, "web", desired.PodMode, []desired.PortBackend{{Backend: "be"}})
	w.service("web", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80})
	port := int32(haproxytest.FreePort(t, "10.244.1.1"))
	sim := &podSim{t: t, w: w, port: port, ips: map[string]string{}, publish: true}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sim.run(ctx)
	s := startService(t, "KUBECONFIG="+kubeconfigVia(t, apiHostPort(t)), "INGRESS_NAMESPACE="+w.ns, "INGRESS_SERVICE_NAME=web",
		"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL="+w.h.RuntimeURL(), "TARGET_ADDRESS=pod", "POD_READINESS_GATE=true")
	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not in time; servers %+v\nservice logs:\n%s", what, w.h.Servers(t, "be"), s.logs.String())
			}
		}
	}
	sim.pod("web-a", "10.244.1.1", true)
	sim.set([]string{"web-a"})
	until("the gate False while nothing answers", func() bool {
		_, c := sim.condition("web-a")
		return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "waiting for its check")
	})
	listen(t, "web-a", "10.244.1.1", port)
	until("the pod Ready through its gate", func() bool { r, _ := sim.condition("web-a"); return r })
	w.expectTraffic("be", "web-a")
}

// countingClient counts the service's own pod requests.
type countingClient struct {
	*kube.Client
	gets, patches atomic.Int64
}

func (c *countingClient) GetPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	c.gets.Add(1)
	return c.Client.GetPod(ctx, ns, name)
}

func (c *countingClient) PatchPodCondition(ctx context.Context, ns, name string, cond corev1.PodCondition) error {
	c.patches.Add(1)
	return c.Client.PatchPodCondition(ctx, ns, name, cond)
}

// BenchmarkReadinessGateRollout1000 measures what POD_READINESS_GATE costs
// the API server when a Deployment of 1,000 pods that list the gate rolls
// (maxSurge 10, maxUnavailable 0) on a real kube-apiserver: per step ten
// new pods start (their containers ready), a reconcile adds their servers
// and the follow-up finds them UP; they turn Ready, ten old ones
// terminate, a reconcile; those go, a reconcile. HAProxy is
// the in-memory driver (what is measured is the pod requests: the reads
// of pods whose endpoint is not ready and the condition writes). Reports
// pod GETs and status patches per reconcile and per pod replaced.
// HKS_BENCH_GATE_STEPS (100) steps of ten: fewer replace only part of the
// Deployment (make unit's quick run, to keep it passing its own checks).
func BenchmarkReadinessGateRollout1000(b *testing.B) {
	ctx := context.Background()
	steps := rolloutSize(b, "HKS_BENCH_GATE_STEPS", 100)
	if steps > 100 {
		b.Fatalf("HKS_BENCH_GATE_STEPS=%d: at most 100 (1,000 pods, ten a step)", steps)
	}
	ns := strings.ToLower(b.Name())
	if _, err := cluster.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	pods := cluster.client.CoreV1().Pods(ns)
	type member struct {
		name, ip           string
		ready, terminating bool
	}
	create := func(name, ip string, ready bool) {
		p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web"}},
				ReadinessGates: []corev1.PodReadinessGate{{ConditionType: desired.ReadinessGate}}}}, metav1.CreateOptions{})
		if err != nil {
			b.Error(err)
			return
		}
		setReady(b, p, ip, ready)
	}
	var members []member
	for i := range 1000 {
		members = append(members, member{name: fmt.Sprintf("old-%d", i), ip: fmt.Sprintf("10.244.%d.%d", i/200, i%200+1), ready: true})
	}
	parallel(len(members), func(i int) { create(members[i].name, members[i].ip, true) })
	slice := func() desired.Input {
		in := desiredtest.PodCluster(ns, "web")
		for _, m := range members {
			r, term, serving := m.ready && !m.terminating, m.terminating, m.ready
			in.Slices[0].Endpoints = append(in.Slices[0].Endpoints, discoveryv1.Endpoint{Addresses: []string{m.ip},
				Conditions: discoveryv1.EndpointConditions{Ready: &r, Serving: &serving, Terminating: &term},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: m.name}})
		}
		return in
	}
	client := &countingClient{Client: cluster.service}
	live := desiredtest.NewLive(slice())
	src := &podsOf{live: live, pods: &kube.Source{Client: client, Namespace: ns, Pods: true}}
	rec := reconciletest.Reconciler(src, &reconciletest.Driver{})
	rec.Options.ReadinessGate = true
	rec.Gate = &gate.Writer{Client: client, Namespace: ns}
	reconciles := 0
	run := func() {
		live.Set(slice())
		if _, err := rec.Reconcile(ctx, false); err != nil {
			b.Fatal(err)
		}
		reconciles++
	}
	run()
	client.gets.Store(0)
	client.patches.Store(0)
	b.ResetTimer()
	for s := 0; s < steps*10; s += 10 {
		batch := len(members)
		for i := s; i < s+10; i++ {
			members = append(members, member{name: fmt.Sprintf("new-%d", i), ip: fmt.Sprintf("10.245.%d.%d", i/200, i%200+1)})
		}
		parallel(10, func(i int) { create(members[batch+i].name, members[batch+i].ip, false) })
		run() // the new pods enter HAProxy (gate False: no check passed yet)
		run() // the follow-up finds them UP: their gate turns True
		parallel(10, func(i int) {
			m := &members[batch+i]
			p, err := pods.Get(ctx, m.name, metav1.GetOptions{})
			if err != nil || desired.GateCondition(p) == nil || desired.GateCondition(p).Status != corev1.ConditionTrue {
				b.Errorf("%s: gate %+v (%v)", m.name, p.Status.Conditions, err)
				return
			}
			setReady(b, p, m.ip, true) // the kubelet: Ready now
			m.ready = true
		})
		if b.Failed() {
			b.FailNow()
		}
		for i := s; i < s+10; i++ {
			members[i-s].terminating = true // the Deployment retires ten old pods
		}
		run() // they drain; their gate turns False
		parallel(10, func(i int) {
			if err := pods.Delete(ctx, members[i].name, metav1.DeleteOptions{}); err != nil {
				b.Error(err)
			}
		})
		members = members[10:]
		run()
	}
	b.StopTimer()
	b.ReportMetric(float64(reconciles-1), "reconciles")
	b.ReportMetric(float64(client.gets.Load())/float64(reconciles-1), "gets/reconcile")
	b.ReportMetric(float64(client.patches.Load())/float64(reconciles-1), "patches/reconcile")
	b.ReportMetric(float64(client.gets.Load()+client.patches.Load())/float64(steps*10), "requests/pod")
}

// podsOf is a Kubernetes source whose slices come from live and whose pods
// are read from the API server as the service's Source reads them.
type podsOf struct {
	live *desiredtest.Live
	pods *kube.Source
}

func (p *podsOf) Read(ctx context.Context) (desired.Input, error) {
	in, err := p.live.Read(ctx)
	if err != nil {
		return in, err
	}
	in.Pods, err = p.pods.ReadPods(ctx, in.Slices)
	return in, err
}

// setReady writes a pod's status as a kubelet would: containers ready, and
// Ready as asked, at ip.
func setReady(b testing.TB, p *corev1.Pod, ip string, ready bool) {
	st := map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}
	now := metav1.Now()
	conds := []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: st[ready], LastTransitionTime: now}}
	if c := desired.GateCondition(p); c != nil {
		conds = append(conds, *c)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, Conditions: conds}
	if _, err := cluster.client.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		b.Error(err)
	}
}

// parallel runs f(0..n-1), 16 at a time, and waits.
func parallel(n int, f func(int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() { defer wg.Done(); defer func() { <-sem }(); f(i) }()
	}
	wg.Wait()
}
