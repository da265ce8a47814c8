package history

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config is the service's configuration in one history, drawn from its seed
// (ConfigOf) beside the events: the settings of docs/configuration.md that
// change what the service writes or when. The zero Config is the shipped
// one.
type Config struct {
	// Guard is HAPROXY_DELETE_GUARD_PERCENT; 0 here is the shipped 100,
	// GuardOff is 0 (the guard off).
	Guard int
	// MaxServers is MAX_SERVERS, small enough to bind; 0: the shipped 4000.
	MaxServers int
	// DeleteBatch is HAPROXY_DELETE_BATCH (the Data Plane driver's); 0:
	// the shipped 10.
	DeleteBatch int
	// Gate is POD_READINESS_GATE: the checker reads each pod's verdict.
	Gate bool
	// OnError is HAPROXY_CHECK_ON_ERROR; empty: the shipped sudden-death.
	OnError string
	// Fall is HAPROXY_CHECK_FALL; 0: the shipped 2.
	Fall int
	// Rise, Inter, FastInter, DownInter are HAPROXY_CHECK_RISE, _INTER,
	// _FASTINTER, _DOWNINTER; 0: the shipped ones. The judge's bounds
	// follow them (BoundsOf).
	Rise                        int
	Inter, FastInter, DownInter time.Duration
	// DrainTimeout is HAPROXY_DRAIN_TIMEOUT; 0: the shipped 0 (sessions
	// are waited for). Pod-mode histories hold long-lived sessions and let
	// a gone pod's process linger (SessionsKept, DrainBounded).
	DrainTimeout time.Duration
	// Balance is HAPROXY_BALANCE; empty: the shipped empty (the backend
	// keeps its own). Set, the Data Plane driver writes the backend's
	// balance and option tcp-check once (a reload, ReloadsAsPromised's
	// bounded SettingsWrites) and Converges reads HAProxy's running
	// algorithm; the runtime driver writes no backend setting.
	Balance string
	// FixedPort is HAPROXY_BACKEND_PORT (single-Service histories,
	// Setup.fixedPort): set to the port the pods and Nodes listen on,
	// while Kubernetes says another (the EndpointSlices' port, the
	// Service's targetPort and nodePort), where nothing listens.
	FixedPort bool
	// Ports is HAPROXY_BACKENDS (Setup.ports: pod-mode single-Service
	// histories): the Service has a second port, tcp2, to the same pod
	// port, whose servers go to be2; Converges judges be2 as it judges be.
	Ports bool
	// SendProxy is HAPROXY_SEND_PROXY_V2: the service's servers and their
	// checks send the PROXY v2 header, and every pod but the static one
	// refuses a connection without it (invariant default-server-kept).
	SendProxy bool
	// Writer2 runs a second writer on the same targets, with its own
	// reconcile loop, poked by the same Kubernetes changes: "replica", a
	// second replica of the service (the same configuration); "cluster",
	// a second instance with CLUSTER_NAME west on the same backend, whose
	// servers for the same pods are its own (the first is then east).
	// Two writers adding at once.
	Writer2 string
	// Refused is the pod whose server every HAProxy refuses (its address
	// is rewritten to one HAProxy cannot parse on the admin socket, and the
	// Data Plane API answers 400): one bad item beside the others; 0: none.
	Refused int
	// Weight is HAPROXY_WEIGHT=endpoints (node mode): a Node's weight is
	// its number of ready endpoints, and Converges compares it.
	Weight bool
	// DrainCordoned is CORDONED_NODES=drain (node mode): a cordoned Node's
	// server drains.
	DrainCordoned bool
	// OneShot runs the one-shot reconcile command beside serve every few
	// steps (oneshot.go), as a CronJob would.
	OneShot bool
	// Serve histories only (ServeSetupOf): RESYNC_PERIOD, SERVICE_EVENTS,
	// and HTTP callers (curl's POST, Knative's CloudEvent) every few steps.
	Resync time.Duration
	Events bool
	Posts  bool
	// Hostile: beside the Service's slices, Kubernetes holds slices the
	// service must take nothing from (hostile.go): addresses outside
	// ALLOWED_SERVER_CIDRS or written with leading zeros, the wrong
	// family, a port the Service does not name, a slice another
	// controller manages (ENDPOINTSLICE_MANAGED_BY set): a server for any
	// of them runs for no pod (Converges).
	Hostile bool
	// PublishNotReady: the Service has publishNotReadyAddresses (pod-mode
	// single-Service histories without the readiness gate,
	// Setup.publishNotReady): every endpoint of a pod not terminating is
	// ready, its serving condition the pod's readiness, so the service
	// puts a pod Kubernetes holds not ready in traffic once its check
	// passes, as kube-proxy would; the judge holds it as ready.
	PublishNotReady bool
}

// GuardOff is Config.Guard for HAPROXY_DELETE_GUARD_PERCENT=0.
const GuardOff = -1

// configEnv forces the shipped configuration (make replay CONFIG=shipped):
// a seed found before the configuration was drawn replays as it ran then.
const configEnv = "HKS_HISTORY_CONFIG"

// ConfigOf draws seed's configuration from a stream of its own, so that the
// events and the setup of the seed stay what they were. About one history in
// three runs the shipped values of each setting.
func ConfigOf(seed uint64) Config {
	if os.Getenv(configEnv) == "shipped" {
		return Config{}
	}
	r := rand.New(rand.NewPCG(seed^0xc0f1, seed*31+7))
	one := func(n int) bool { return r.IntN(n) == 0 }
	var c Config
	switch r.IntN(4) {
	case 0:
		c.Guard = GuardOff
	case 1:
		c.Guard = 10 + 10*r.IntN(5) // 10..50: a removal of one server in a few is guarded
	}
	if one(3) {
		c.MaxServers = 6 + r.IntN(5) // 6..10: binds beside 12 or 16 pods
	}
	if one(2) {
		c.DeleteBatch = []int{1, 2, 3}[r.IntN(3)]
	}
	c.Gate = one(2)
	if one(3) {
		c.OnError = []string{"none", "fastinter", "fail-check", "mark-down"}[r.IntN(4)]
	}
	if one(4) {
		c.Fall = 1
	}
	c.SendProxy = one(4)
	switch r.IntN(6) {
	case 0:
		c.Writer2 = "replica"
	case 1:
		c.Writer2 = "cluster"
		c.MaxServers = 0 // MAX_SERVERS is per backend, both writers' servers counted: not judged together
	}
	if one(3) {
		c.Refused = 5 + r.IntN(6) // a pod added during the history
	}
	// Drawn last, so that the draws above stay what they were for the
	// seeds found before (hack/teeth.sh).
	if one(3) {
		c.Rise = []int{1, 2, 3}[r.IntN(3)]
		c.Inter = []time.Duration{time.Second, 1500 * time.Millisecond, 2 * time.Second}[r.IntN(3)]
		c.FastInter = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}[r.IntN(3)]
		c.DownInter = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond}[r.IntN(3)]
	}
	if one(3) {
		c.DrainTimeout = []time.Duration{time.Second, 2 * time.Second}[r.IntN(2)]
	}
	// The dynamic algorithms that spread new clients over every server:
	// "first" sends them all to one (InService judges a ready server's
	// share), a static one (source without hash-type consistent) makes
	// every add a reload (docs/configuration.md).
	if one(3) {
		c.Balance = []string{"roundrobin", "leastconn", "random"}[r.IntN(3)]
	}
	c.FixedPort = one(4)
	// HAPROXY_BACKEND_PORT is a single backend's; the readiness gate's
	// verdict spans both backends while the judge reads be's servers.
	c.Ports = !c.FixedPort && !c.Gate && one(4)
	c.Hostile = one(3)
	c.PublishNotReady = one(4)
	return c
}

// NodeSetupOf is SetupOf in node mode (TARGET_ADDRESS=node, the shipped
// default): 3 to 5 Nodes, HAPROXY_WEIGHT and CORDONED_NODES drawn, a
// MAX_SERVERS that binds counted in Nodes, and in a third the one-shot
// reconcile command run beside serve every few steps. The readiness gate (pod mode's)
// and the refused pod (an address HAProxy refuses: a pod's) are pod mode's.
func NodeSetupOf(seed uint64, driver Driver) Setup {
	s := SetupOf(seed, driver)
	r := rand.New(rand.NewPCG(seed^0x90de, seed*7+1))
	s.Nodes = 3 + r.IntN(3)
	c := &s.Config
	c.Gate, c.Refused = false, 0
	c.Weight = r.IntN(2) == 0
	c.DrainCordoned = r.IntN(2) == 0
	if c.MaxServers > 0 {
		c.MaxServers = 2 + r.IntN(s.Nodes-1) // 2..Nodes: binds when every Node hosts pods
	}
	c.OneShot = r.IntN(3) == 0
	s.HealthPort = r.IntN(3) == 0
	// Drawn last: the draws before it, and so older seeds, are unchanged
	// but for which health port half of theirs checks.
	s.KubeProxy = s.HealthPort && r.IntN(2) == 0
	return s
}

// ServeSetupOf is a serve history's setup (Setup.Serve): the binary's own
// serve against a real kube-apiserver, in node mode (the shipped default)
// two times in three, else pod mode, the rest drawn as there; and what
// only serve has: a resync period, Events, HTTP callers. The readiness
// gate's verdicts are read from the histories' own loops (in pod mode,
// TestReadinessGateHoldsTheRollout has serve's writer): off here.
func ServeSetupOf(seed uint64, driver Driver) Setup {
	r := rand.New(rand.NewPCG(seed^0x5e7e, seed*13+5))
	var s Setup
	if r.IntN(3) > 0 {
		s = NodeSetupOf(seed, driver)
	} else {
		s = SetupOf(seed, driver)
	}
	serveDraws(&s, r)
	// A third HAProxy in a third of the pairs: three targets' writes,
	// one of them hanging, reloading or restarting while two serve.
	if s.Targets == 2 && r.IntN(3) == 0 {
		s.Targets = 3
	}
	return s
}

// serveDraws draws, from r, what only serve has.
func serveDraws(s *Setup, r *rand.Rand) {
	s.Serve = true
	c := &s.Config
	c.Gate = false
	c.Resync = []time.Duration{0, 0, 3 * time.Second, 7 * time.Second}[r.IntN(4)]
	c.Events = r.IntN(2) == 0
	c.Posts = r.IntN(2) == 0
	s.BlackHoles = r.IntN(2) == 0
}

// ServeServicesSetupOf is a many-Services history run by serve itself
// (Setup.Services and Setup.Serve): serve's watch.Many, lanes and fleet
// against the kube-apiserver into which the history writes web, web2 and
// web3; pod mode (web2's pods run on no Node), one target, as
// ServicesSetupOf.
func ServeServicesSetupOf(seed uint64, driver Driver) Setup {
	s := SetupOf(seed, driver)
	s.Targets, s.Services = 1, true
	r := rand.New(rand.NewPCG(seed^0x5e75, seed*11+3))
	serveDraws(&s, r)
	// The one-shot reconcile command in many-Services mode (fleet.Settle:
	// what a CronJob runs) beside serve in a third; drawn last.
	s.Config.OneShot = r.IntN(3) == 0
	return s
}

// env is the configuration as the service's variables.
func (c Config) env() map[string]string {
	e := map[string]string{
		"HAPROXY_DELETE_GUARD_PERCENT": "100", "MAX_SERVERS": "4000", "HAPROXY_DELETE_BATCH": "10",
		"POD_READINESS_GATE": "false", "HAPROXY_CHECK_ON_ERROR": "sudden-death", "HAPROXY_CHECK_FALL": "2",
		"HAPROXY_CHECK_RISE": "2", "HAPROXY_CHECK_INTER": "1.5s", "HAPROXY_CHECK_FASTINTER": "100ms", "HAPROXY_CHECK_DOWNINTER": "200ms",
		"HAPROXY_SEND_PROXY_V2": "false", "HAPROXY_WEIGHT": "equal", "CORDONED_NODES": "ignore",
		"RESYNC_PERIOD": "0s", "SERVICE_EVENTS": "false", "HAPROXY_DRAIN_TIMEOUT": "0s", "HAPROXY_BALANCE": "",
		"ENDPOINTSLICE_MANAGED_BY": "",
	}
	if c.Hostile {
		e["ENDPOINTSLICE_MANAGED_BY"] = controllerManaged
	}
	if c.Balance != "" {
		e["HAPROXY_BALANCE"] = c.Balance
	}
	if c.Weight {
		e["HAPROXY_WEIGHT"] = "endpoints"
	}
	if c.DrainCordoned {
		e["CORDONED_NODES"] = "drain"
	}
	if c.SendProxy {
		e["HAPROXY_SEND_PROXY_V2"] = "true"
	}
	switch {
	case c.Guard == GuardOff:
		e["HAPROXY_DELETE_GUARD_PERCENT"] = "0"
	case c.Guard > 0:
		e["HAPROXY_DELETE_GUARD_PERCENT"] = strconv.Itoa(c.Guard)
	}
	if c.MaxServers > 0 {
		e["MAX_SERVERS"] = strconv.Itoa(c.MaxServers)
	}
	if c.DeleteBatch > 0 {
		e["HAPROXY_DELETE_BATCH"] = strconv.Itoa(c.DeleteBatch)
	}
	if c.Gate {
		e["POD_READINESS_GATE"] = "true"
	}
	if c.OnError != "" {
		e["HAPROXY_CHECK_ON_ERROR"] = c.OnError
	}
	if c.Fall > 0 {
		e["HAPROXY_CHECK_FALL"] = strconv.Itoa(c.Fall)
	}
	if c.DrainTimeout > 0 {
		e["HAPROXY_DRAIN_TIMEOUT"] = c.DrainTimeout.String()
	}
	if c.Rise > 0 {
		e["HAPROXY_CHECK_RISE"] = strconv.Itoa(c.Rise)
	}
	for k, d := range map[string]time.Duration{"HAPROXY_CHECK_INTER": c.Inter, "HAPROXY_CHECK_FASTINTER": c.FastInter, "HAPROXY_CHECK_DOWNINTER": c.DownInter} {
		if d > 0 {
			e[k] = d.String()
		}
	}
	if c.Resync > 0 {
		e["RESYNC_PERIOD"] = c.Resync.String()
	}
	if c.Events {
		e["SERVICE_EVENTS"] = "true"
	}
	return e
}

func (c Config) String() string {
	var out []string
	for k, v := range c.env() {
		if shipped := (Config{}).env()[k]; v != shipped {
			out = append(out, k+"="+v)
		}
	}
	if c.Writer2 != "" {
		out = append(out, "writer2="+c.Writer2)
	}
	if c.Refused > 0 {
		out = append(out, fmt.Sprintf("refused=%s", podName(c.Refused)))
	}
	if c.OneShot {
		out = append(out, "oneshot")
	}
	if c.Ports {
		out = append(out, "HAPROXY_BACKENDS=tcp=be,tcp2=be2")
	}
	if c.FixedPort {
		out = append(out, "HAPROXY_BACKEND_PORT=fixed")
	}
	if c.Posts {
		out = append(out, "posts")
	}
	if c.Hostile {
		out = append(out, "hostile")
	}
	if c.PublishNotReady {
		out = append(out, "publishNotReadyAddresses")
	}
	if len(out) == 0 {
		return "shipped"
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}
