package history

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// Driver names the HAProxy driver a history runs with.
type Driver string

const (
	// Runtime is the runtime API driver alone (HAPROXY_RUNTIME_URL).
	Runtime Driver = "runtime"
	// Dataplane is the Data Plane API driver with the same HAProxy's
	// socket (both URLs), against the test API, which reloads the real
	// HAProxy with what it wrote whenever the real API would.
	Dataplane Driver = "dataplane"
)

const (
	backend   = "be"
	namespace = "hist"
	service   = "web"
	// cluster is CLUSTER_NAME in histories with a static server: the
	// static server is someone else's, the pods' servers this instance's.
	cluster = "east"
	// cluster2 is the second instance's CLUSTER_NAME (Config.Writer2
	// cluster): its servers for the same pods are named west-….
	cluster2 = "west"
	// staticPod is the number of the static server's pod.
	staticPod = 0
)

// Setup is what a history runs against, beside its steps.
type Setup struct {
	Seed   uint64
	Driver Driver
	// Static adds a server of haproxy.cfg that is not the service's
	// (another CLUSTER_NAME's, or the operator's): it must never change.
	Static bool
	// ReloadDelay is the Data Plane API's reload_delay.
	ReloadDelay time.Duration
	// Targets is the number of HAProxy instances (an HA pair: 2); the
	// second one's socket and API may hang.
	Targets int
	// Zones puts every third pod in another zone than HAProxy's
	// (HAPROXY_LOCAL_ZONE): their servers are backups.
	Zones bool
	// DefaultServer (Data Plane driver) writes "default-server
	// send-proxy-v2" in the backend, and every pod, like an ingress behind
	// PROXY protocol, refuses a connection that does not start with its
	// header. The API then reloads for every add, as the real one does.
	DefaultServer bool
	// RuntimeFails (Data Plane driver): the API applies no server write at
	// runtime and reloads for each instead, as the real one does when its
	// runtime command fails, or when it cannot read HAProxy's version
	// (dataplaneapi v3.3.0 with HAProxy 3.2 and 3.4).
	RuntimeFails bool
	// Services runs the many-Services mode (SERVICE_SELECTION=annotation)
	// through the fleet: web names be, and a second Service, web2, may
	// name be2 (ServiceJoin); see world_services.go.
	Services bool
	// Nodes, when not 0, is node mode (TARGET_ADDRESS=node, the shipped
	// default): the pods run on that many Nodes, each a kube-proxy of its
	// own (nodes.go). NodeSetupOf draws it.
	Nodes int
	// HealthPort (node mode): the Service has a healthCheckNodePort
	// (externalTrafficPolicy Local, type LoadBalancer), which each Node's
	// kube-proxy answers (nodes_health.go), and HAProxy checks Nodes there
	// with GET /healthz: written by the service (HAPROXY_BALANCE with the
	// Data Plane driver, HAPROXY_CHECK_HEALTH_NODE_PORT=auto) or said by
	// haproxy.cfg (=on). NodeSetupOf draws it.
	HealthPort bool
	// KubeProxy (with HealthPort): the port is kube-proxy's own health
	// port (HAPROXY_CHECK_KUBE_PROXY_PORT) instead: the Service is a
	// NodePort with no healthCheckNodePort, and each Node's kube-proxy
	// answers 200 while it runs, whatever its pods, and 503 once the
	// autoscaler's taint marks its Node for deletion (KEP-3836).
	KubeProxy bool
	// BlackHoles: a killed pod of even number dies as a black hole (its
	// address drops connections instead of refusing them: blackhole.go).
	BlackHoles bool
	// Serve runs the binary's serve against a real kube-apiserver instead
	// of the histories' own loop (serve.go); ServeSetupOf draws it.
	Serve bool
	// Slots declares be's servers as slots of haproxy.cfg (runtime
	// driver; SlotsSetupOf draws it), reloads by others saving the server
	// state first or not (slots.go).
	Slots SlotSetup
	// Config is the service's configuration, drawn from the seed too.
	Config Config
	// TLS: the service reaches every admin socket over TLS with a client
	// certificate (tls:// URLs, HAPROXY_RUNTIME_TLS_*), short-lived and
	// renewed in place as cert-manager does (tls.go). Not with the refused
	// pod, whose refusal is written into the socket's clear text.
	TLS bool
}

// localZone is HAPROXY_LOCAL_ZONE in histories with zones.
const localZone = "zone-a"

// zoneOf is pod n's zone in histories with zones.
func zoneOf(n int) string {
	if n%3 == 0 && n != staticPod {
		return "zone-b"
	}
	return localZone
}

// SetupOf draws a history's setup from its seed, for driver.
func SetupOf(seed uint64, driver Driver) Setup {
	return Setup{Seed: seed, Driver: driver, Static: seed%2 == 1, ReloadDelay: time.Duration(1+seed%2) * time.Second,
		Targets: 1 + int(seed/2%2), Zones: seed/4%2 == 1, DefaultServer: driver == Dataplane && seed/8%2 == 1,
		RuntimeFails: driver == Dataplane && seed/16%2 == 1, Config: ConfigOf(seed), TLS: tlsDrawn(seed)}
}

// httpChecksInCfg (Setup.HealthPort): haproxy.cfg's backend says option
// httpchk GET /healthz, and HAPROXY_CHECK_HEALTH_NODE_PORT=on, unless the
// service writes the check itself (HAPROXY_BALANCE, Data Plane driver).
func (s Setup) httpChecksInCfg() bool {
	return s.HealthPort && !(s.Driver == Dataplane && s.Config.Balance != "")
}

// publishNotReady says whether the Service has publishNotReadyAddresses
// (Config.PublishNotReady): pod-mode single-Service histories without the
// readiness gate (whose verdicts follow the pods' readiness, not the
// endpoints').
func (s Setup) publishNotReady() bool {
	return s.Config.PublishNotReady && s.Nodes == 0 && !s.Services && !s.Config.Gate
}

// asJudged is how the judge holds a pod Kubernetes holds in state st: with
// publishNotReadyAddresses an endpoint that is not ready (a pod not ready,
// or dead and noticed) is ready all the same.
func (s Setup) asJudged(st podState) podState {
	if s.publishNotReady() && (st == notReady || st == noticed) {
		return live
	}
	return st
}

// fixedPort says whether HAPROXY_BACKEND_PORT is set (Config.FixedPort):
// single-Service histories only, annotation mode refuses it.
func (s Setup) fixedPort() bool { return s.Config.FixedPort && !s.Services }

// ports says whether HAPROXY_BACKENDS maps the Service's two ports to be
// and be2 (Config.Ports): pod-mode single-Service histories without slots
// (a Node's second nodePort has no kube-proxy here; slots are be's).
func (s Setup) ports() bool {
	return s.Config.Ports && !s.Services && s.Nodes == 0 && s.Slots.N == 0 && !s.fixedPort() && !s.Config.Gate
}

// k8sPort is the port Kubernetes gives the pods (the EndpointSlices' port,
// the Service's targetPort and, node mode, its nodePort): w.port, where
// the pods and Nodes listen, unless HAPROXY_BACKEND_PORT says w.port and
// Kubernetes another, where nothing listens.
func (w *world) k8sPort() int {
	switch {
	case !w.setup.fixedPort():
		return w.port
	case w.port < 65535:
		return w.port + 1
	}
	return w.port - 1
}

// tlsDrawn draws Setup.TLS for a third of the seeds, from a stream of its
// own, where no pod is refused.
func tlsDrawn(seed uint64) bool {
	return ConfigOf(seed).Refused == 0 && rand.New(rand.NewPCG(seed^0x7150c, seed*3+1)).IntN(3) == 0
}

// world is one history's HAProxy targets, pods, Kubernetes and service.
type world struct {
	t       testing.TB
	setup   Setup
	targets []*target
	port    int
	// hcPort is the Service's healthCheckNodePort (Setup.HealthPort).
	hcPort int
	rec    *recorder

	mu   sync.Mutex
	pods map[int]*pod
	// lingering are the stops of gone pods whose process outlives their
	// endpoint (goneStop), due later.
	lingering []*time.Timer
	k8s       map[int]podState // the endpoints Kubernetes holds, by pod
	names     map[int]string   // a pod's name where it is not podName (Recreate)
	// reused is, for a pod that took a gone pod's address (AddReused), the
	// pod whose podAddr it has; addrMu guards it alone, as addrOf is asked
	// under w.mu and outside it.
	addrMu sync.Mutex
	reused map[int]int
	live   *desiredtest.Live
	poke   func()
	close  func()
	// svc is the many-Services part (Setup.Services), nil otherwise.
	svc *services
	// check is the check the service writes (cfg.Check): the bounds' base.
	check model.Check
	// gates are the pods' last readiness gate verdicts (Config.Gate).
	gates   map[int]bool
	gateWhy map[int]string // the last verdict's why, and when
	// targetOf names a target by index from a driver's name.
	targetOf map[string]int
	// first is the first writer's process, which a Crash replaces; cfg
	// its configuration; local its HAPROXY_LOCAL_ZONE now (Zones).
	first *process
	cfg   config.Config
	local string
	// nodes are the Nodes' kube-proxies, nflags what the history did to
	// them (node mode).
	nodes  map[int]*nodeProxy
	nflags map[int]*nodeFlags
	// oneShot runs the one-shot command every few steps (Config.OneShot).
	oneShot *oneShot
	// Serve histories (serve.go): the API server the world writes into,
	// the kubeconfig for it, each writer's variables, the HTTP callers.
	mirror     *kubeMirror
	kproxy     *kubeProxy
	kubeconfig string
	envs       []map[string]string
	posts      sync.WaitGroup
	// expired counts the watches the API server answered 410 (serve's log).
	expired atomic.Int64
	// serveStarts counts the serve processes started (replicas, restarts).
	serveStarts atomic.Int64
}

// newWorld starts the HAProxy targets (and their Data Plane test APIs when
// the driver needs them), and the service's reconcile loop as serve wires
// it, configured from the environment as a shipped install is
// (config.Load), with pod mode on loopback addresses.
func newWorld(t testing.TB, s Setup) *world {
	t.Helper()
	w := &world{t: t, setup: s, rec: &recorder{}, pods: map[int]*pod{}, k8s: map[int]podState{}, names: map[int]string{},
		gates: map[int]bool{}, gateWhy: map[int]string{}, targetOf: map[string]int{}}
	w.port = haproxytest.FreePort(t, podAddr(staticPod))
	if s.HealthPort {
		w.hcPort = haproxytest.FreePort(t, nodeAddr(1))
	}
	t.Cleanup(w.stopAll) // a history that stopped on a step's error too
	if s.Static {
		st := w.newPod(staticPod)
		if err := st.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.stop)
		w.pods[staticPod] = st
	}
	var runtimes, apis []string
	var tls *adminTLS
	if s.TLS {
		tls = startAdminTLS(t)
	}
	for i := range max(s.Targets, 1) {
		tg := startTarget(t, i, s, w.port, w.rec, tls)
		w.targets = append(w.targets, tg)
		runtimes = append(runtimes, tg.runtimeURL)
		w.targetOf[tg.runtimeURL] = i
		if tg.api != nil {
			apis = append(apis, tg.apiURL)
			w.targetOf[tg.apiURL] = i
		}
	}
	traceServers(t, w.targets)
	mode := "pod"
	if s.Nodes > 0 {
		mode = "node"
		w.startNodes()
	}
	env := map[string]string{
		"TARGET_ADDRESS": mode, "INGRESS_NAMESPACE": namespace, "INGRESS_SERVICE_NAME": service,
		"HAPROXY_BACKEND_NAME": backend, "ALLOWED_SERVER_CIDRS": allowedCIDRs,
		"HAPROXY_RUNTIME_URL": strings.Join(runtimes, ","), "HAPROXY_DATAPLANE_URL": strings.Join(apis, ","),
		"CLUSTER_NAME": "", "HAPROXY_LOCAL_ZONE": "",
	}
	if tls != nil {
		maps.Copy(env, tls.env())
	}
	if s.Zones {
		env["HAPROXY_LOCAL_ZONE"] = localZone
		w.local = localZone
	}
	if s.Static || s.Config.Writer2 == "cluster" {
		env["CLUSTER_NAME"] = cluster
	}
	if s.Services {
		env["SERVICE_SELECTION"], env["ANNOTATION_BACKENDS"] = "annotation", backend+","+backend2
	}
	for k, v := range s.Config.env() {
		env[k] = v
	}
	env["HAPROXY_BACKEND_PORT"] = "0"
	env["HAPROXY_CHECK_HEALTH_NODE_PORT"] = "auto"
	if s.httpChecksInCfg() {
		env["HAPROXY_CHECK_HEALTH_NODE_PORT"] = "on"
	}
	if s.KubeProxy {
		env["HAPROXY_CHECK_KUBE_PROXY_PORT"] = strconv.Itoa(w.hcPort)
	}
	if s.fixedPort() {
		env["HAPROXY_BACKEND_PORT"] = strconv.Itoa(w.port)
	}
	if s.ports() {
		env["HAPROXY_BACKENDS"] = "tcp=" + backend + ",tcp2=" + backend2
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	w.check = cfg.Check()
	w.cfg = cfg
	if s.Slots.N > 0 {
		w.declareSlots()
	}
	w.live = desiredtest.NewLive(w.input())
	if s.Serve {
		w.startServeWorld(env)
	} else if s.Services {
		w.poke, w.close = w.startFleet(cfg)
	} else {
		w.first = startProcess(t, cfg, w.live, w.writer(0))
		w.poke = func() {
			w.mu.Lock()
			p := w.first
			w.mu.Unlock()
			p.poke()
		}
		w.close = func() {
			w.mu.Lock()
			p := w.first
			w.mu.Unlock()
			p.stop()
		}
		if s.Config.Writer2 != "" {
			// A second writer on the same targets, poked by the same
			// changes: a replica, or another CLUSTER_NAME's instance.
			cfg2 := cfg
			if s.Config.Writer2 == "cluster" {
				t.Setenv("CLUSTER_NAME", cluster2)
				if cfg2, err = config.Load(); err != nil {
					t.Fatal(err)
				}
			}
			poke, stop := startService(t, cfg2, w.live, w.writer(1))
			poke0, stop0 := w.poke, w.close
			w.poke = func() { poke0(); poke() }
			w.close = func() { stop0(); stop() }
		}
	}
	t.Cleanup(w.close)
	// Many-Services mode runs the command's binary (serve histories).
	if s.Config.OneShot && (!s.Services || s.Serve) {
		w.oneShot = w.startOneShot()
	}
	return w
}

func (w *world) newPod(n int) *pod {
	// The static server is haproxy.cfg's: HAPROXY_SEND_PROXY_V2 is none
	// of its business.
	proxy := w.setup.DefaultServer || w.setup.Config.SendProxy && n != staticPod
	return &pod{n: n, addr: net.JoinHostPort(w.addrOf(n), strconv.Itoa(w.port)), rec: w.rec, proxy: proxy}
}

// addrOf is pod n's address: its own podAddr, or the one of the gone pod
// whose address it took (AddReused).
func (w *world) addrOf(n int) string {
	w.addrMu.Lock()
	defer w.addrMu.Unlock()
	if m, ok := w.reused[n]; ok {
		return podAddr(m)
	}
	return podAddr(n)
}

// addReused carries out an AddReused: a new pod at the address of a gone
// one (its sandbox torn down, a black hole's included), listening, then
// ready, as Add.
func (w *world) addReused(st Step) error {
	n, old := st.Pods[0], st.Pods[1]
	w.mu.Lock()
	gone := w.pods[old]
	w.mu.Unlock()
	if gone != nil {
		gone.stop()
		gone.closeHole()
	}
	w.addrMu.Lock()
	owner := old
	if m, ok := w.reused[old]; ok {
		owner = m
	}
	if w.reused == nil {
		w.reused = map[int]int{}
	}
	// The refused pod's address is refused by HAProxy whoever holds it:
	// it is neither taken nor given (a plain Add).
	if r := w.setup.Config.Refused; r == 0 || n != r && owner != r {
		w.reused[n] = owner
	}
	w.addrMu.Unlock()
	if err := w.startReady(n); err != nil {
		return err
	}
	w.publish()
	return nil
}

// input is what Kubernetes holds now: the Service and its EndpointSlices, ten
// endpoints a slice, as the EndpointSlice controller splits them.
func (w *world) input() desired.Input {
	w.mu.Lock()
	defer w.mu.Unlock()
	name, name2, port := "tcp", "tcp2", int32(w.k8sPort())
	var ns []int
	for n := range w.k8s {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	bySlice := map[int]*discoveryv1.EndpointSlice{}
	var slices []discoveryv1.EndpointSlice
	var order []int
	for _, n := range ns {
		i := n / 10
		sl := bySlice[i]
		if sl == nil {
			sl = &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: namespace, Name: service + "-" + strconv.Itoa(i), Labels: map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: controllerManaged}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
			}
			if w.setup.ports() {
				sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: &name2, Port: &port})
			}
			bySlice[i] = sl
			order = append(order, i)
		}
		ready, serving, term := true, true, false
		switch w.k8s[n] {
		case notReady, noticed:
			// publishNotReadyAddresses: ready all the same (the
			// EndpointSlice controller's rule), serving the pod's own.
			ready, serving = w.setup.publishNotReady(), false
		case terminating:
			ready, term = w.setup.publishNotReady(), true
		}
		ep := discoveryv1.Endpoint{
			Addresses:  []string{w.addrOf(n)},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &term},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: cmp.Or(w.names[n], podName(n))},
		}
		if w.setup.Zones {
			z := zoneOf(n)
			ep.Zone = &z
		}
		if w.setup.Nodes > 0 {
			node := nodeName(nodeOf(n, w.setup.Nodes, w.setup.Zones))
			ep.NodeName = &node
		}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	for _, i := range order {
		slices = append(slices, *bySlice[i])
	}
	if w.setup.Config.Hostile {
		slices = append(slices, hostileSlices(port)...)
	}
	in := desired.Input{
		Service: w.serviceObject(service, backend),
		Slices:  slices,
	}
	if w.setup.Nodes > 0 {
		in.Nodes = w.nodeObjects()
	}
	return in
}

// setPods starts pods 1..n, ready, and tells the service.
func (w *world) startPods(n int) {
	for i := 1; i <= n; i++ {
		w.apply(Step{Kind: Add, Pods: []int{i}}, -1)
	}
}

// apply carries out one step: the pods' processes first when they start,
// Kubernetes' view, the watch's poke, the processes last when they stop.
func (w *world) apply(st Step, index int) error {
	w.rec.add(obs{kind: obsStep, step: index})
	if w.oneShot != nil && index >= 0 {
		w.oneShot.maybeRun(index)
	}
	if w.mirror != nil && index >= 0 {
		w.maybePost(index)
	}
	changed := false
	switch st.Kind {
	case Recreate:
		return w.recreate(st, index)
	case AddReused:
		return w.addReused(st)
	case Rollout:
		return w.rollout(st)
	case ServiceJoin, ServiceLeave, Duplicate, DuplicateEnd:
		return w.svc.apply(st)
	case Crash:
		return w.crash(st)
	case KubeCut:
		w.kproxy.cut()
		return nil
	case TargetRestart:
		return w.restart(w.targets[st.Target%len(w.targets)])
	case ReloadBroken:
		return w.reloadBroken(w.targets[st.Target%len(w.targets)])
	case SocketDown, SocketUp, APIDown, APIUp:
		return w.down(w.targets[st.Target%len(w.targets)], st.Kind)
	case KubeDown, KubeUp:
		if st.Kind == KubeUp {
			// What changed meanwhile is past what etcd keeps: the
			// service's watches resume into a 410 and list again.
			if err := compactEtcd(context.Background()); err != nil {
				return err
			}
		}
		w.rec.add(obs{kind: obsKube, hung: st.Kind == KubeDown})
		w.kproxy.refuse(st.Kind == KubeDown)
		return nil
	}
	if nodeKind(st.Kind) {
		return w.nodeStep(st)
	}
	for _, n := range st.Pods {
		w.mu.Lock()
		p := w.pods[n]
		if p == nil {
			p = w.newPod(n)
			w.pods[n] = p
		}
		w.mu.Unlock()
		set := func(s podState) {
			w.mu.Lock()
			if s == absent {
				delete(w.k8s, n)
			} else {
				w.k8s[n] = s
			}
			w.mu.Unlock()
			w.rec.add(obs{kind: obsK8s, pod: n, state: w.setup.asJudged(s)})
			changed = true
		}
		switch st.Kind {
		case Add, Revive:
			if err := p.start(); err != nil {
				return err
			}
			set(live)
		case AddDead:
			set(live) // ready, and nothing listens
		case Terminate:
			set(terminating)
		case Gone:
			set(absent)
		case Kill:
			if err := p.die(w.setup.BlackHoles && n%2 == 0); err != nil {
				return err
			}
		case Notice:
			set(noticed)
		case NotReady:
			set(notReady)
		case Ready:
			set(live)
		}
	}
	if changed {
		w.publish()
	}
	if st.Kind == Gone {
		for _, n := range st.Pods {
			w.goneStop(index, n)
		}
	}
	switch st.Kind {
	case Reload:
		tg := w.targets[st.Target%len(w.targets)]
		started := func(sr slotReload) {
			w.rec.add(obs{kind: obsReloadStart, target: tg.i, saved: sr.saved, overflow: sr.overflow})
		}
		if err := tg.reloadByOthers(started); err != nil {
			return fmt.Errorf("reload: %w", err)
		}
		w.rec.add(obs{kind: obsReload, target: tg.i})
	case Hang, Unhang:
		tg := w.targets[st.Target%len(w.targets)]
		w.rec.add(obs{kind: obsHang, target: tg.i, hung: st.Kind == Hang})
		tg.hang(st.Kind == Hang)
	case APIFault:
		if tg := w.targets[st.Target%len(w.targets)]; tg.api != nil {
			tg.api.InjectFault(faultOf(st))
		}
	}
	return nil
}

// publish tells the service what Kubernetes holds now: the histories' own
// loops through their Source and a poke, serve through the API server.
func (w *world) publish() {
	in := w.input()
	w.live.Set(in)
	if w.mirror != nil {
		if err := w.mirror.set(context.Background(), w.kubeState()); err != nil {
			w.t.Errorf("write Kubernetes: %v", err)
		}
	}
	w.poke()
}

// startReady starts pod n's process and makes its endpoint ready.
func (w *world) startReady(n int) error {
	if err := w.startPod(n); err != nil {
		return err
	}
	w.mu.Lock()
	w.k8s[n] = live
	w.mu.Unlock()
	w.rec.add(obs{kind: obsK8s, pod: n, state: live})
	return nil
}

// startPod starts pod n's process, a new one: the one before, if any,
// is gone, a black hole's hold on the address included (seed 430577631: a
// pod killed as a black hole came back with its Node, NodeUp).
func (w *world) startPod(n int) error {
	p := w.newPod(n)
	w.mu.Lock()
	old := w.pods[n]
	w.pods[n] = p
	w.mu.Unlock()
	if old != nil {
		old.stop()
		old.closeHole()
	}
	return p.start()
}

// recreate carries out a Recreate: the new pod listens, then one update
// takes the old pod's endpoint away and gives its name to the new one at its
// own address; the old pod's process stops last.
func (w *world) recreate(st Step, index int) error {
	old, n := st.Pods[0], st.Pods[1]
	if err := w.startPod(n); err != nil {
		return err
	}
	w.mu.Lock()
	delete(w.k8s, old)
	w.k8s[n] = live
	w.names[n] = cmp.Or(w.names[old], podName(old))
	w.mu.Unlock()
	w.rec.add(obs{kind: obsK8s, pod: old, state: absent})
	w.rec.add(obs{kind: obsK8s, pod: n, state: live, moved: true})
	w.publish()
	w.mu.Lock()
	gone := w.pods[old]
	w.mu.Unlock()
	gone.stop()
	return nil
}

// rollout carries out a Rollout: the new pods listen, then one update
// makes them ready and every old one terminating.
func (w *world) rollout(st Step) error {
	half := len(st.Pods) / 2
	old, fresh := st.Pods[:half], st.Pods[half:]
	for _, n := range fresh {
		if err := w.startPod(n); err != nil {
			return err
		}
	}
	w.mu.Lock()
	for _, n := range old {
		w.k8s[n] = terminating
	}
	for _, n := range fresh {
		w.k8s[n] = live
	}
	w.mu.Unlock()
	for _, n := range old {
		w.rec.add(obs{kind: obsK8s, pod: n, state: terminating})
	}
	for _, n := range fresh {
		w.rec.add(obs{kind: obsK8s, pod: n, state: live})
	}
	w.publish()
	return nil
}

// stopAll stops every pod's process.
func (w *world) stopAll() {
	w.mu.Lock()
	for _, t := range w.lingering {
		t.Stop()
	}
	pods := make([]*pod, 0, len(w.pods))
	for _, p := range w.pods {
		pods = append(pods, p)
	}
	w.mu.Unlock()
	for _, p := range pods {
		p.stop()
		p.closeHole()
	}
}
