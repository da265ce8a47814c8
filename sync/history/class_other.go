package history

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// The other install (drawn in half the class histories): a second `serve`
// of another LOAD_BALANCER_CLASS, with the same CLUSTER_NAME, on the same
// HAProxies (their Data Plane APIs and sockets, their VIPs), following one
// Service of its class whose two pods never change. Its frontend and
// backend are that install's: nothing the history's install does — its
// Services joining, leaving, deleted, refused, its crashes, its resyncs,
// its reloads — may touch them, and the two write through one API at once.
// Once the other Service is served on every target (a settled moment found
// it), every request sent through its port since is answered by one of
// its pods, as
// through the operator's own frontend (OthersUntouchedAcross); each settled
// moment finds it served and its status naming the VIPs; no pod of it
// answers a port of the history's class (classEvaluate: a pod of no
// Service).

const (
	otherLB      = "haproxy-k8s-sync.io/other"
	otherService = "x-0"
	// otherPortIdx is the other install's Service in requests.
	otherPortIdx = -2
)

// installPods are the other Service's pods: apart from classPodNum's and
// classOpPod.
var installPods = []int{590, 591}

func otherPodName(n int) string { return fmt.Sprintf("x-p-%d", n) }

// startOther starts the other install: its pods, its Service and slice,
// its serve (the history's environment but the class and port).
func (w *classWorld) startOther() {
	t := w.t
	for _, n := range installPods {
		addr := net.JoinHostPort(podAddr(n), strconv.Itoa(classPodPort))
		if w.sendProxy {
			w.proxied = append(w.proxied, haproxytest.ListenProxyV2(t, otherPodName(n), addr))
		} else {
			haproxytest.Listen(t, otherPodName(n), addr)
		}
	}
	if err := w.writeOther(); err != nil {
		t.Fatal(err)
	}
	env := slices.Clone(w.env)
	for i, e := range env {
		if strings.HasPrefix(e, "LOAD_BALANCER_CLASS=") {
			env[i] = "LOAD_BALANCER_CLASS=" + otherLB
		}
	}
	port := freeTCPPort(t)
	w.otherServe = launchServe(t, append(env, "PORT="+strconv.Itoa(port)), port, lineLog(t, "other install", func([]byte) {}), "other install", 35*time.Second)
}

// writeOther writes the other Service, of the other class, and its slice.
func (w *classWorld) writeOther() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cls, no := otherLB, false
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: classNS, Name: otherService},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, AllocateLoadBalancerNodePorts: &no,
			Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: int32(w.otherPort), TargetPort: intstr.FromInt32(classPodPort)}}},
	}
	if _, err := w.c.CoreV1().Services(classNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	port, pname, yes, not := int32(classPodPort), "tcp", true, false
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: classNS, Name: otherService + "-0", Labels: map[string]string{discoveryv1.LabelServiceName: otherService}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port}},
	}
	for _, n := range installPods {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{podAddr(n)},
			Conditions: discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &not},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: classNS, Name: otherPodName(n)},
		})
	}
	_, err := w.c.DiscoveryV1().EndpointSlices(classNS).Create(ctx, sl, metav1.CreateOptions{})
	return err
}

// otherAnswer is a request through the other Service's port as the judge
// takes it: svc 0 for one of its pods, else -1 and why in err.
func otherAnswer(o *classObs, name string) {
	o.svc = -1
	if strings.HasPrefix(name, "x-p-") {
		o.svc = 0
	} else if o.err == "" {
		o.err = fmt.Sprintf("answered by %q, no pod of %s", name, otherService)
	}
}

// otherDiffs: through target i the other Service's port is answered by its
// pods, both of them (a server of it parked or deleted by the history's
// install fails no request).
func (w *classWorld) otherDiffs(i int, tg *classTarget) []string {
	if !w.other {
		return nil
	}
	seen := map[string]bool{}
	for range 8 {
		name, err := haproxytest.Ask(net.JoinHostPort(tg.vip, strconv.Itoa(w.otherPort)))
		if err != nil || !strings.HasPrefix(name, "x-p-") {
			return []string{fmt.Sprintf("the other install's %s through target %d answered %q (%v)", otherService, i, name, err)}
		}
		if seen[name] = true; len(seen) == len(installPods) {
			return nil
		}
	}
	return []string{fmt.Sprintf("the other install's %s through target %d answered by %v only, of its %d pods", otherService, i, seen, len(installPods))}
}

// otherStatus: the other Service's status names every VIP, with the
// ipMode HAPROXY_SEND_PROXY_V2 asks (every target up).
func (w *classWorld) otherStatus(ctx context.Context, vips []string) []string {
	if !w.other {
		return nil
	}
	svc, err := w.c.CoreV1().Services(classNS).Get(ctx, otherService, metav1.GetOptions{})
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", otherService, err)}
	}
	mode := corev1.LoadBalancerIPModeVIP
	if w.sendProxy {
		mode = corev1.LoadBalancerIPModeProxy
	}
	var ips []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		ips = append(ips, in.IP)
		if got := ptr.Deref(in.IPMode, corev1.LoadBalancerIPModeVIP); got != mode {
			return []string{fmt.Sprintf("the other install's %s's status says %s with ipMode %s, want %s", otherService, in.IP, got, mode)}
		}
	}
	if !slices.Equal(ips, vips) {
		return []string{fmt.Sprintf("the other install's %s's status says %v, want %v", otherService, ips, vips)}
	}
	return nil
}
