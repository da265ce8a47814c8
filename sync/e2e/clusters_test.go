package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestTwoClustersShareABackend: two instances of the real service, each
// following its own Service (standing for a cluster of its own) with its
// own CLUSTER_NAME, both through the runtime socket of one real HAProxy
// backend that also has a static server of haproxy.cfg. Blue goes through
// a rolling update under client traffic through the frontend: every
// request is answered, and green's servers and the static one keep their
// name, id, address and state throughout: nobody but their owner (or
// nobody, for the static one) touches them.
func TestTwoClustersShareABackend(t *testing.T) {
	w := newWorld(t, "blue", desired.PodMode, []desired.PortBackend{{Backend: "be"}})
	w.service("blue", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80})
	w.service("green", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80})
	port := int32(haproxytest.FreePort(t, "10.245.200.1"))
	ports := map[string]int32{"http": port}

	listen(t, "static1", "10.245.202.1", port)
	w.h.SetServers(t, "be", []string{fmt.Sprintf("server static1 10.245.202.1:%d check inter 500ms", port)})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) { // the master socket comes up after the worker's
		if c, err := net.Dial("unix", w.h.MasterSocket); err == nil {
			c.Close()
			break
		} else if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	w.h.Reload(t)

	blue := map[string]*haproxytest.Listener{}
	for i, pod := range []string{"web-a1", "web-a2"} {
		blue[pod] = listen(t, pod, fmt.Sprintf("10.245.200.%d", i+1), port)
	}
	for i, pod := range []string{"web-b1", "web-b2"} {
		listen(t, pod, fmt.Sprintf("10.245.201.%d", i+1), port)
	}
	w.slice("blue-1", "blue", ports, endpoint{ip: "10.245.200.1", pod: "web-a1"}, endpoint{ip: "10.245.200.2", pod: "web-a2"})
	w.slice("green-1", "green", ports, endpoint{ip: "10.245.201.1", pod: "web-b1"}, endpoint{ip: "10.245.201.2", pod: "web-b2"})

	common := []string{"KUBECONFIG=" + kubeconfigVia(t, apiHostPort(t)), "INGRESS_NAMESPACE=" + w.ns,
		"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL=" + w.h.RuntimeURL(), "TARGET_ADDRESS=pod"}
	sb := startService(t, append(common, "INGRESS_SERVICE_NAME=blue", "CLUSTER_NAME=blue")...)
	sg := startService(t, append(common, "INGRESS_SERVICE_NAME=green", "CLUSTER_NAME=green")...)

	until := func(what string, limit time.Duration, ok func(map[string]haproxytest.Server) bool) {
		t.Helper()
		for deadline := time.Now().Add(limit); !ok(w.h.Servers(t, "be")); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after %s; servers %+v\nblue logs:\n%s\ngreen logs:\n%s", what, limit, w.h.Servers(t, "be"), sb.logs.String(), sg.logs.String())
			}
		}
	}
	inService := func(names ...string) func(map[string]haproxytest.Server) bool {
		return func(got map[string]haproxytest.Server) bool {
			for _, n := range names {
				s, ok := got[n]
				if !ok || !s.Up() || s.Drain() || s.Maint() {
					return false
				}
			}
			return true
		}
	}
	until("both clusters in service", 20*time.Second, inService("blue-web-a1", "blue-web-a2", "green-web-b1", "green-web-b2", "static1"))
	w.expectTraffic("be", "web-a1", "web-a2", "web-b1", "web-b2", "static1")
	if !strings.Contains(sb.logs.String(), `"owns":"servers named blue-* (cluster blue); others are left alone"`) {
		t.Errorf("blue's start line does not say what it owns:\n%s", sb.logs.String())
	}

	// The others' servers as they are now; a watcher compares every read.
	others := map[string]haproxytest.Server{}
	for _, n := range []string{"green-web-b1", "green-web-b2", "static1"} {
		others[n] = w.h.Servers(t, "be")[n]
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent, failed, reads atomic.Int64
	touched := make(chan string, 1)
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		for ctx.Err() == nil {
			sent.Add(1)
			if _, err := haproxytest.Ask(w.h.Frontends["be"]); err != nil {
				failed.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		for ctx.Err() == nil {
			reply, err := w.h.Command("show servers state be")
			if err == nil {
				got := haproxytest.ParseServers(reply, "be")
				reads.Add(1)
				for n, want := range others {
					g := got[n]
					if g.Name != want.Name || g.ID != want.ID || g.Address != want.Address || g.Port != want.Port ||
						g.Admin != want.Admin || g.Weight != want.Weight || !g.Up() {
						select {
						case touched <- fmt.Sprintf("%s: %+v, was %+v", n, g, want):
						default:
						}
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// Blue's rolling update, one pod at a time: the new pod comes up,
	// enters service once its check passes, then the old one terminates
	// (drain), leaves the slice, is deleted, and only then stops.
	replace := func(old, oldIP, newPod, newIP string, keep endpoint) {
		blue[newPod] = listen(t, newPod, newIP, port)
		oldEP := endpoint{ip: oldIP, pod: old}
		w.slice("blue-1", "blue", ports, keep, oldEP, endpoint{ip: newIP, pod: newPod})
		until(newPod+" in service", 20*time.Second, inService("blue-"+newPod))
		oldEP.terminating = true
		w.slice("blue-1", "blue", ports, keep, oldEP, endpoint{ip: newIP, pod: newPod})
		until(old+" drained", 10*time.Second, func(got map[string]haproxytest.Server) bool { return got["blue-"+old].Drain() })
		w.slice("blue-1", "blue", ports, keep, endpoint{ip: newIP, pod: newPod})
		until(old+" gone", 20*time.Second, func(got map[string]haproxytest.Server) bool { _, ok := got["blue-"+old]; return !ok })
		blue[old].Close()
	}
	replace("web-a1", "10.245.200.1", "web-a3", "10.245.200.3", endpoint{ip: "10.245.200.2", pod: "web-a2"})
	replace("web-a2", "10.245.200.2", "web-a4", "10.245.200.4", endpoint{ip: "10.245.200.3", pod: "web-a3"})
	w.expectTraffic("be", "web-a3", "web-a4", "web-b1", "web-b2", "static1")
	time.Sleep(time.Second) // a few more reconciles (follow-ups, watch) of both
	cancel()
	<-done
	<-done

	select {
	case msg := <-touched:
		t.Errorf("a server blue does not own was touched: %s", msg)
	default:
	}
	if reads.Load() < 20 {
		t.Errorf("only %d reads of the others' servers", reads.Load())
	}
	if failed.Load() != 0 || sent.Load() < 50 {
		t.Errorf("%d of %d client connections failed during blue's rolling update", failed.Load(), sent.Load())
	}
	got := w.h.Servers(t, "be")
	if len(got) != 5 {
		t.Errorf("servers after the update: %v, want blue's two, green's two and static1", keys(got))
	}
	t.Logf("%d client connections, none failed; the others' servers read %d times, untouched", sent.Load(), reads.Load())
}
