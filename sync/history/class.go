package history

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// Class histories (SERVICE_SELECTION=class; make soak's "class" shape) run
// the binary as shipped in class mode: `serve` against a real
// kube-apiserver, the Data Plane test API over a real HAProxy (it writes
// the class frontends and backends into haproxy.cfg and reloads, as the
// real API does) with the admin socket beside it. Three Services of the
// class join and leave it, change and swap ports, are deleted and created
// again, their pods come, terminate, die and are noticed, serve crashes;
// clients go through every VIP port and the operator's own frontend all
// along (classEvaluate judges them), and after a third of the steps the
// history waits until what runs is what Kubernetes says — every port
// served by one of its claimants (the one that held it, if it still
// claims it), nothing on a port nobody claims, the status of each Service
// naming the VIP exactly when it holds its port (settle).

// classTarget is one HAProxy of a class history, its VIP, and the relays
// before its Data Plane API and admin socket (ClassTargetDown).
type classTarget struct {
	h           *haproxytest.HAProxy
	srv         *dataplanetest.Server
	vip         string
	api, socket *relay
	down        bool
}

const (
	classNS      = "hist-class"
	classLB      = "haproxy-k8s-sync.io/haproxy"
	classOp      = "be_op"
	classPodPort = 18080
	classOpPod   = 599
)

// classWorld is one class history as it runs.
type classWorld struct {
	t      *testing.T
	b      Bounds
	c      kubernetes.Interface
	tgs    []*classTarget
	env    []string
	ports  []int
	model  *classModel
	listen map[int]interface{ Close() }
	// sendProxy is HAPROXY_SEND_PROXY_V2 (drawn): the pods want the PROXY
	// v2 header (haproxytest.ProxyListener), the status says ipMode Proxy.
	sendProxy bool
	// balance is HAPROXY_BALANCE (drawn: leastconn or unset): every class
	// backend runs it (balanceDiffs).
	balance   string
	proxied   []*haproxytest.ProxyListener
	plainSaid int
	termAt    map[int]time.Time // when each pod began to terminate

	mu         sync.Mutex
	obs        []classObs
	violations []Violation
	step       int
	claimSince []time.Time
	// holders and settledAt: each target's at its last settled moment.
	holders   [][]int
	settledAt []time.Time
	requests  int
	failed    int

	serve *process
	// other: the other install runs (class_other.go), its Service on
	// otherPort; otherSince (UnixNano) is when a settled moment first
	// found it served: requests sent since are judged.
	other      bool
	otherPort  int
	otherServe *process
	otherSince atomic.Int64
}

func (w *classWorld) rec(o classObs) {
	if o.at.IsZero() {
		o.at = time.Now()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.obs = append(w.obs, o)
	if o.kind == cRequest {
		w.requests++
		if o.err != "" {
			w.failed++
		}
	}
}

func (w *classWorld) violation(inv Invariant, format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violations = append(w.violations, Violation{Invariant: inv, At: time.Now(), Step: w.step, What: fmt.Sprintf(format, args...)})
}

// RunClass runs the class history of seed with n steps.
func RunClass(t *testing.T, seed uint64, n int) Report {
	t.Helper()
	if !privateNet {
		t.Skip("class histories run as root, in a network namespace of their own (TestMain): Kubernetes refuses loopback endpoints")
	}
	targets := 1 + int(classDraw(seed)/4%2)
	steps := classSteps(seed, n, targets)
	w := startClassWorld(t, seed, targets)
	stopClients := w.clients()
	w.settle()
	for i, st := range steps {
		time.Sleep(st.Wait)
		w.apply(i, st)
		if st.Times == 1 {
			w.settle()
		}
	}
	w.settle()
	stopClients()
	w.serve.stop()
	if w.otherServe != nil {
		w.otherServe.stop()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ev := classEvaluate(w.obs, w.b, classServices)
	ev.Violations = append(ev.Violations, w.violations...)
	sort.SliceStable(ev.Violations, func(i, j int) bool { return ev.Violations[i].At.Before(ev.Violations[j].At) })
	shape := classShapeName
	if n == classShortSteps {
		shape = classShortShapeName
	}
	return Report{Setup: Setup{Seed: seed, Driver: Dataplane, Serve: true}, Shape: shape, Steps: steps,
		Requests: w.requests, Failed: w.failed, Evaluation: ev}
}

// classShapeName is make soak's class histories (classSoakSteps);
// classShortShapeName make test's (classShortSteps), to replay them as run.
const (
	classShapeName      = "class"
	classShortShapeName = "class-short"
	classShortSteps     = 30
	classSoakSteps      = 120
)

func startClassWorld(t *testing.T, seed uint64, targets int) *classWorld {
	t.Helper()
	cfg, c := startKube(t)
	w := &classWorld{t: t, b: BoundsOf(config.ShippedCheck()), c: c, model: classStart(), sendProxy: classDraw(seed)/8%2 == 1, balance: []string{"", "leastconn"}[classDraw(seed)/16%2], listen: map[int]interface{ Close() }{}, termAt: map[int]time.Time{},
		step: -1, claimSince: make([]time.Time, classServices), settledAt: make([]time.Time, targets)}
	w.clearKube()
	t.Cleanup(w.clearKube)

	haproxytest.Listen(t, "op", net.JoinHostPort(podAddr(classOpPod), strconv.Itoa(classPodPort)))
	var vips, apis, sockets []string
	for i := range targets {
		tg := w.startTarget(i)
		w.tgs = append(w.tgs, tg)
		w.holders = append(w.holders, []int{-1, -1, -1})
		vips, apis, sockets = append(vips, tg.vip), append(apis, "http://"+tg.api.addr), append(sockets, "tcp://"+tg.socket.addr)
	}
	// The same ports on every VIP; the other install's after the class's.
	w.other = classDraw(seed)/32%2 == 1
	w.ports = haproxytest.FreePorts(t, vips[0], classPorts+1)
	w.ports, w.otherPort = w.ports[:classPorts], w.ports[classPorts]

	// c-2 first, a second before the others: the oldest claimant.
	for _, s := range []int{2, 0, 1} {
		for n := range w.model.svcs[s].pods {
			w.startPod(s, n)
		}
		if err := w.writeService(s); err != nil {
			t.Fatal(err)
		}
		if s == 2 {
			time.Sleep(1100 * time.Millisecond)
		}
	}

	r := classDraw(seed)
	w.env = []string{"PATH=" + os.Getenv("PATH"), "KUBECONFIG=" + kubeconfigFile(t, cfg, hostPort(cfg.Host), t.TempDir()),
		"WEBHOOK_AUTH=token", "WEBHOOK_TOKEN=" + webhookToken, "LOG_LEVEL=debug", "LOG_FORMAT=json",
		"SERVICE_SELECTION=class", "LOAD_BALANCER_CLASS=" + classLB, "HAPROXY_VIP=" + strings.Join(vips, ","), "WATCH_NAMESPACES=" + classNS,
		"TARGET_ADDRESS=pod", "ALLOWED_SERVER_CIDRS=10.244.0.0/16",
		"HAPROXY_DATAPLANE_URL=" + strings.Join(apis, ","), "HAPROXY_RUNTIME_URL=" + strings.Join(sockets, ","),
		"CLUSTER_NAME=" + []string{"", "west"}[r%2], "RESYNC_PERIOD=" + []string{"0", "7s"}[r/2%2],
		"HAPROXY_SEND_PROXY_V2=" + strconv.FormatBool(w.sendProxy), "HAPROXY_BALANCE=" + w.balance}
	if dir := os.Getenv(coverDirEnv); dir != "" {
		w.env = append(w.env, "GOCOVERDIR="+dir)
	}
	w.startServe()
	if w.other {
		w.startOther()
	}
	t.Logf("class history %d: %s; the other install (%s): %v", seed, strings.Join(w.env[6:], " "), otherLB, w.other)
	// The claims count from serve's start (building the binary, once per
	// test process, comes before it).
	w.rec(classObs{kind: cStep, step: -1, claims: w.model.claims()})
	return w
}

// startTarget starts target i: a real HAProxy with the operator's own
// frontend and backend (nothing of the class's may touch them), the Data
// Plane test API over it, and relays before the API and the socket.
func (w *classWorld) startTarget(i int) *classTarget {
	t := w.t
	tg := &classTarget{vip: fmt.Sprintf("127.0.0.%d", 91+i)}
	tg.h = haproxytest.Start(t, haproxytest.Backend{Name: classOp, Lines: []string{"balance roundrobin"}})
	api := dataplanetest.Over(t, tg.h, dataplanetest.Options{ReloadDelay: 300 * time.Millisecond},
		func(began, ended time.Time) { w.rec(classObs{at: ended, began: began, kind: cReload, target: i}) }, classOp)
	opPort := int64(classPodPort)
	rr := "roundrobin"
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: classOp, Mode: "tcp", Balance: &models.Balance{Algorithm: &rr}}},
		models.Server{Name: "op", Address: podAddr(classOpPod), Port: &opPort})
	host, port, _ := net.SplitHostPort(tg.h.Frontends[classOp])
	fp, _ := strconv.ParseInt(port, 10, 64)
	api.AddFrontend(models.Frontend{FrontendBase: models.FrontendBase{Name: "fe_" + classOp, DefaultBackend: classOp}},
		models.Bind{Name: "b", Address: host, Port: &fp})
	tg.h.SetServers(t, classOp, api.ServerLines(classOp))
	tg.h.Reload(t)
	u, err := url.Parse(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	tg.srv = api
	tg.api = startRelay(t, "tcp", u.Host, nil)
	tg.socket = startRelay(t, "unix", tg.h.AdminSocket, nil)
	return tg
}

// classDraw is the seed's draw of the configuration: one bit each for
// CLUSTER_NAME, RESYNC_PERIOD, a second target, HAPROXY_SEND_PROXY_V2,
// HAPROXY_BALANCE and the other install.
func classDraw(seed uint64) uint64 { return (seed*2654435761 + 7) >> 7 }

func (w *classWorld) startServe() {
	port := freeTCPPort(w.t)
	env := append(slices.Clone(w.env), "PORT="+strconv.Itoa(port))
	w.serve = launchServe(w.t, env, port, lineLog(w.t, "serve", func([]byte) {}), "serve", 35*time.Second)
}

// clearKube empties the history's namespace.
func (w *classWorld) clearKube() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := w.c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: classNS}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		w.t.Fatal(err)
	}
	errs := []error{
		w.c.DiscoveryV1().EndpointSlices(classNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
		w.c.CoreV1().Events(classNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
	}
	svcs, err := w.c.CoreV1().Services(classNS).List(ctx, metav1.ListOptions{})
	errs = append(errs, err)
	if err == nil {
		for _, s := range svcs.Items {
			errs = append(errs, w.c.CoreV1().Services(classNS).Delete(ctx, s.Name, metav1.DeleteOptions{}))
		}
	}
	if err := errors.Join(errs...); err != nil {
		w.t.Errorf("empty the API server: %v", err)
	}
}

func (w *classWorld) startPod(s, n int) {
	name, addr := fmt.Sprintf("c%d-p-%d", s, n), net.JoinHostPort(podAddr(n), strconv.Itoa(classPodPort))
	if !w.sendProxy {
		w.listen[n] = haproxytest.Listen(w.t, name, addr)
		return
	}
	l := haproxytest.ListenProxyV2(w.t, name, addr)
	w.listen[n] = l
	w.proxied = append(w.proxied, l)
}

func (w *classWorld) stopPod(n int) {
	if l := w.listen[n]; l != nil {
		l.Close()
		delete(w.listen, n)
	}
}

// writeService writes Service s and its slice as the model holds them.
func (w *classWorld) writeService(s int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v := w.model.svcs[s]
	name := className(s)
	svcs, slices := w.c.CoreV1().Services(classNS), w.c.DiscoveryV1().EndpointSlices(classNS)
	if !v.exists {
		err := errors.Join(svcs.Delete(ctx, name, metav1.DeleteOptions{}), slices.Delete(ctx, name+"-0", metav1.DeleteOptions{}))
		return err
	}
	// serve writes the Service's status meanwhile: a conflict is read
	// again (class seed 7, 120 steps: step 38's port change refused).
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return w.updateService(ctx, s) }); err != nil {
		return err
	}
	return w.writeSlice(ctx, s)
}

// updateService creates or updates Service s's spec as the model holds it.
func (w *classWorld) updateService(ctx context.Context, s int) error {
	v := w.model.svcs[s]
	name := className(s)
	svcs := w.c.CoreV1().Services(classNS)
	cur, err := svcs.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cur = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: classNS, Name: name}}
	case err != nil:
		return err
	}
	cur.Spec.Ports = []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: int32(w.ports[v.port]), TargetPort: intstr.FromInt32(classPodPort)}}
	if v.inClass {
		cls, no := classLB, false
		cur.Spec.Type, cur.Spec.LoadBalancerClass, cur.Spec.AllocateLoadBalancerNodePorts = corev1.ServiceTypeLoadBalancer, &cls, &no
	} else {
		cur.Spec.Type, cur.Spec.LoadBalancerClass, cur.Spec.AllocateLoadBalancerNodePorts = corev1.ServiceTypeClusterIP, nil, nil
		cur.Spec.ExternalTrafficPolicy = ""
	}
	if cur.ResourceVersion == "" {
		_, err = svcs.Create(ctx, cur, metav1.CreateOptions{})
	} else {
		_, err = svcs.Update(ctx, cur, metav1.UpdateOptions{})
	}
	return err
}

func (w *classWorld) writeSlice(ctx context.Context, s int) error {
	v := w.model.svcs[s]
	name := className(s)
	port, pname := int32(classPodPort), "tcp"
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: classNS, Name: name + "-0", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port}},
	}
	pods := make([]int, 0, len(v.pods))
	for n := range v.pods {
		pods = append(pods, n)
	}
	sort.Ints(pods)
	for _, n := range pods {
		ready, term := v.pods[n] != cTerminating, v.pods[n] == cTerminating
		serving := true
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{podAddr(n)},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &term},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: classNS, Name: fmt.Sprintf("c%d-p-%d", s, n)},
		})
	}
	api := w.c.DiscoveryV1().EndpointSlices(classNS)
	cur, err := api.Get(ctx, sl.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, sl, metav1.CreateOptions{})
	case err == nil:
		sl.ResourceVersion = cur.ResourceVersion
		_, err = api.Update(ctx, sl, metav1.UpdateOptions{})
	}
	return err
}

// apply carries out step i.
func (w *classWorld) apply(i int, st Step) {
	before := w.model.claims()
	prev := w.model.svcs[st.Node]
	w.model.apply(st)
	w.mu.Lock()
	w.step = i
	w.mu.Unlock()
	s := st.Node
	var err error
	// changedAt: when a Service's claims change, the moment its write
	// began: the service may act on it before the write returns, and a
	// deleted Service's pods stop after it (a request they cut ended
	// before the step's record; class seed 7 of make test on 3.0, CI).
	var changedAt time.Time
	switch st.Kind {
	case ClassCrash:
		w.serve.crash()
		w.startServe()
	case ClassTargetDown, ClassTargetUp:
		tg := w.tgs[st.Target]
		on := st.Kind == ClassTargetDown
		w.rec(classObs{kind: cDown, target: st.Target, on: on})
		switch {
		case st.Fault == "hang":
			// Every request hangs, on connections open too (keep-alive).
			tg.socket.hang(true)
			tg.srv.InjectFault(dataplanetest.Fault{Hang: true})
		case on:
			tg.api.refuse(true)
			tg.socket.refuse(true)
		default:
			tg.socket.hang(false)
			tg.srv.ClearFault()
			tg.api.refuse(false)
			tg.socket.refuse(false)
		}
		w.mu.Lock()
		tg.down = on
		w.mu.Unlock()
	case ClassJoin, ClassLeave, ClassPort:
		for n := range w.model.svcs[s].pods {
			if w.listen[n] == nil {
				w.startPod(s, n)
			}
		}
		changedAt = time.Now()
		err = w.writeService(s)
	case ClassDelete:
		changedAt = time.Now()
		err = w.writeService(s)
		for n := range prev.pods {
			w.stopPod(n)
		}
	case ClassPodAdd:
		w.startPod(s, st.Pods[0])
		err = w.writeSlice(context.Background(), s)
	case ClassPodTerm:
		w.termAt[st.Pods[0]] = time.Now()
		err = w.writeSlice(context.Background(), s)
	case ClassPodGone:
		// A pod that terminated for its entry bound (its server drained)
		// exits; Kubernetes removes its endpoint.
		time.Sleep(time.Until(w.termAt[st.Pods[0]].Add(w.b.Entry)))
		err = w.writeSlice(context.Background(), s)
		// Its time before the stop: a request the stop cuts ends after it
		// (recorded after, it ended before its excuse; seed 7 of make
		// test, once in a few runs under -race).
		at := time.Now()
		w.stopPod(st.Pods[0])
		w.rec(classObs{at: at, kind: cGone, svc: s})
	case ClassPodKill:
		at := time.Now()
		w.stopPod(st.Pods[0])
		w.rec(classObs{at: at, kind: cDeath, svc: s})
	case ClassPodNotice:
		err = w.writeSlice(context.Background(), s)
		w.rec(classObs{kind: cNotice, svc: s})
	}
	if err != nil {
		w.t.Errorf("step %d (%s): %v", i, st, err)
	}
	claims := w.model.claims()
	now := time.Now()
	if !changedAt.IsZero() {
		now = changedAt
	}
	for s := range claims {
		if claims[s] != before[s] {
			w.claimSince[s] = now
		}
	}
	w.rec(classObs{at: now, kind: cStep, step: i, claims: claims})
}

// clients sends requests through every VIP port and the operator's
// frontend until the returned func is called.
func (w *classWorld) clients() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	run := func(tg, port int, addr string) {
		every(ctx, &wg, 25*time.Millisecond, func() {
			began := time.Now()
			name, err := haproxytest.Ask(addr)
			o := classObs{at: began, kind: cRequest, target: tg, port: port, svc: -1}
			if err != nil {
				o.at, o.began, o.err = time.Now(), began, err.Error()
			}
			switch {
			case port == otherPortIdx:
				if since := w.otherSince.Load(); since == 0 || began.UnixNano() < since {
					return
				}
				otherAnswer(&o, name)
			case err == nil && port != opPort:
				o.svc = classServiceOf(name)
			}
			w.rec(o)
		})
	}
	for i, tg := range w.tgs {
		for p, port := range w.ports {
			run(i, p, net.JoinHostPort(tg.vip, strconv.Itoa(port)))
			run(i, p, net.JoinHostPort(tg.vip, strconv.Itoa(port)))
		}
		run(i, opPort, tg.h.Frontends[classOp])
		if w.other {
			run(i, otherPortIdx, net.JoinHostPort(tg.vip, strconv.Itoa(w.otherPort)))
		}
	}
	return func() { cancel(); wg.Wait() }
}

// classServiceOf is the Service of a pod's answer ("c1-p-705"); -1: none.
func classServiceOf(name string) int {
	if len(name) < 3 || name[0] != 'c' || name[2] != '-' {
		return -1
	}
	return int(name[1] - '0')
}
