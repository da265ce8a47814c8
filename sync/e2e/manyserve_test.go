package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// TestManyServicesServeWithoutPost: the real binary in many-Services mode
// (annotation selection, WATCH, the runtime driver, a real HAProxy and
// kube-apiserver), nobody POSTing and RESYNC_PERIOD far away, so only the
// watch and the follow-up can act. Five annotated Services converge; a new
// ready pod in one is in service (traffic through its backend's frontend)
// within seconds, and no other Service's backend is reconciled for it; a
// Service whose annotation goes has its servers parked by one reconcile
// and deleted by the follow-up's next one.
func TestManyServicesServeWithoutPost(t *testing.T) {
	const n = 5
	var pbs []desired.PortBackend
	for i := range n {
		pbs = append(pbs, desired.PortBackend{Backend: fmt.Sprintf("be_m%d", i)})
	}
	w := newWorld(t, "unused", desired.PodMode, pbs)
	c := quietClient(t)
	svcName := func(i int) string { return fmt.Sprintf("m%d", i) }
	port := func(i int) int32 { return int32(22000 + i) }
	for i := range n {
		_, err := c.CoreV1().Services(w.ns).Create(w.ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: svcName(i), Annotations: map[string]string{services.Annotation: "http=be_m" + fmt.Sprint(i)}},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
				Selector: map[string]string{"app": svcName(i)}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip := fmt.Sprintf("10.245.128.%d", i+1)
		w.slice(svcName(i)+"-1", svcName(i), map[string]int32{"http": port(i)}, endpoint{ip: ip, pod: svcName(i) + "-a"})
		listen(t, svcName(i)+"-a", ip, port(i))
	}
	s := startService(t,
		"KUBECONFIG="+kubeconfigVia(t, apiHostPort(t)), "SERVICE_SELECTION=annotation", "ANNOTATION_BACKENDS=be_m*",
		"WATCH_NAMESPACES="+w.ns, "TARGET_ADDRESS=pod", "HAPROXY_RUNTIME_URL="+w.h.RuntimeURL(), "RESYNC_PERIOD=10m",
		"HAPROXY_CHECK_INTER=200ms", "HAPROXY_CHECK_RISE=1", "HAPROXY_CHECK_FALL=1", "LOG_LEVEL=debug")

	step(t, "ready once watching and the first full reconcile ran; every Service in service", func(t *testing.T) {
		s.wait(t, "/readyz", 10*time.Second)
		// The first full reconcile gates every new server; the lanes'
		// follow-ups put them in service.
		for i := range n {
			w.expectTraffic("be_m"+fmt.Sprint(i), svcName(i)+"-a")
		}
	})
	step(t, "a new ready pod in one Service is in service within seconds, through the watch and the follow-up", func(t *testing.T) {
		time.Sleep(500 * time.Millisecond) // the start's follow-ups are over
		mark := len(s.logs.String())
		before := map[string]map[string]bool{}
		for i := 1; i < n; i++ {
			before[fmt.Sprint(i)] = maintOf(w, "be_m"+fmt.Sprint(i))
		}
		listen(t, "m0-b", "10.245.129.1", port(0))
		start := time.Now()
		w.slice("m0-1", "m0", map[string]int32{"http": port(0)}, endpoint{ip: "10.245.128.1", pod: "m0-a"}, endpoint{ip: "10.245.129.1", pod: "m0-b"})
		w.expectTraffic("be_m0", "m0-a", "m0-b") // 5 s at most; RESYNC_PERIOD is 10m
		t.Logf("in service %s after the EndpointSlice change", time.Since(start).Round(time.Millisecond))
		time.Sleep(300 * time.Millisecond)
		after := s.logs.String()[mark:]
		for i := 1; i < n; i++ {
			for _, needle := range []string{`"` + w.ns + "/" + svcName(i) + `"`, `"be_m` + fmt.Sprint(i) + `"`} {
				if strings.Contains(after, needle) {
					t.Errorf("m0's change reconciled another Service: a log line names %s", needle)
				}
			}
			if got := maintOf(w, "be_m"+fmt.Sprint(i)); fmt.Sprint(got) != fmt.Sprint(before[fmt.Sprint(i)]) {
				t.Errorf("be_m%d changed: %v → %v", i, before[fmt.Sprint(i)], got)
			}
		}
		if !strings.Contains(after, `"source":"follow-up"`) {
			t.Errorf("no follow-up poke logged; logs:\n%s", after)
		}
	})
	step(t, "a Service whose annotation goes has its servers parked, then deleted by the follow-up", func(t *testing.T) {
		mark := len(s.logs.String())
		svc, err := c.CoreV1().Services(w.ns).Get(w.ctx, "m2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(svc.Annotations, services.Annotation)
		if _, err := c.CoreV1().Services(w.ns).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Nobody POSTs: the left backends' follow-up reads the Services
		// again and deletes what the first read parked (issue 54 row 7).
		deadline := time.Now().Add(10 * time.Second)
		for len(maintOf(w, "be_m2")) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("be_m2 servers (name → in maintenance): %v, want its server deleted by the follow-up", maintOf(w, "be_m2"))
			}
			time.Sleep(50 * time.Millisecond)
		}
		logs := s.logs.String()[mark:]
		parked := strings.Index(logs, `"server":"m2-a","backend":"be_m2","target":"`+w.h.RuntimeURL()+`","from":"ready","to":"maint"`)
		deleted := strings.Index(logs, `"from":"maint","to":"deleted"`)
		if parked < 0 || deleted < parked {
			t.Fatalf("m2-a not parked by one reconcile and deleted by a later one (parked at %d, deleted at %d):\n%s", parked, deleted, logs)
		}
		w.expectTraffic("be_m1", "m1-a") // the others go on
	})
	if n := w.h.Reloads(t); n != 0 {
		t.Errorf("HAProxy reloaded %d times", n)
	}
	step(t, "SIGTERM ends it at once when nothing runs", func(t *testing.T) {
		start := time.Now()
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("exit: %v; logs:\n%s", err, s.logs.String())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("still running 5 s after SIGTERM; logs:\n%s", s.logs.String())
		}
		t.Logf("exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	})
}

// maintOf returns backend's servers, each with whether it is in maintenance.
func maintOf(w *world, backend string) map[string]bool {
	out := map[string]bool{}
	for name, s := range w.h.Servers(w.t, backend) {
		out[name] = s.Maint()
	}
	return out
}

func allTrue(m map[string]bool) bool {
	for _, v := range m {
		if !v {
			return false
		}
	}
	return true
}
