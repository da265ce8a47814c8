// Package model is the vocabulary shared by the desired-state builder, the
// planner and the HAProxy drivers. It has no dependencies on Kubernetes or on
// any HAProxy API, so each side can be tested with plain values.
package model

import (
	"strings"
	"time"
)

// ReasonAnnotation is the Reason of a desired server whose state an
// operator pinned with the Node's annotation (package desired): the planner
// takes it as an order, never to be second-guessed.
const ReasonAnnotation = "annotation"

// State is the administrative state a server should have in HAProxy.
type State string

const (
	// Ready servers take new connections.
	Ready State = "ready"
	// Drain servers finish existing and persistent connections but take no new ones.
	Drain State = "drain"
	// Maint servers take no traffic at all.
	Maint State = "maint"
)

// Rank orders states from most to least able to serve; used to merge duplicates.
func (s State) Rank() int {
	switch s {
	case Ready:
		return 2
	case Drain:
		return 1
	default:
		return 0
	}
}

// Check holds the health-check parameters written on every server. They live on
// each server rather than in default_server because the Data Plane API can add
// servers without a reload only when the backend has no default_server.
//
// HAProxy picks the delay before a server's next check by its state (its
// srv_getinter): Inter while the server is steadily UP, DownInter while it
// is DOWN with health 0 (a gated server starts there, so its first check
// comes DownInter after it is added), FastInter while its health moves
// between the two. Zero FastInter or DownInter means Inter.
type Check struct {
	Inter     time.Duration
	FastInter time.Duration
	DownInter time.Duration
	Rise      int
	Fall      int
	// OnError, when set, makes HAProxy watch the server's real connections
	// ("observe layer4 error-limit 1 on-error OnError"), so that a node that
	// stops answering leaves traffic at its first failed connection instead
	// of at its next steady check. Values: fastinter, fail-check,
	// sudden-death, mark-down.
	OnError string
	// SendProxyV2: the server's connections open with the PROXY v2
	// header, and its checks too unless they go to Port (ProxyOnCheck).
	SendProxyV2 bool
	// Port, when not 0, is the port checks go to instead of the server's:
	// kube-proxy's health port of the Node (a Service's healthCheckNodePort,
	// or its own), which the backend's HTTP check asks for /healthz.
	Port int
}

// ProxyOnCheck says whether the checks open with the PROXY v2 header
// (check-send-proxy): as the server's connections do, unless they go to
// Port, kube-proxy's health port, an HTTP server that answers a PROXY
// header 400 (every Node would be DOWN; history seed 1, node mode, with
// HAPROXY_SEND_PROXY_V2 and the Service's healthCheckNodePort).
func (c Check) ProxyOnCheck() bool { return c.SendProxyV2 && c.Port == 0 }

// Server is one HAProxy server as this service manages it.
type Server struct {
	Name    string
	Address string
	Port    int
	Weight  int
	State   State
	Check   Check
	// Reason says why a desired server has its state (see package desired:
	// endpoints, annotation, taint, cordon), for the transition log; current
	// servers leave it empty.
	Reason string
	// Up says HAProxy sees the server UP (its check passing), as read from a
	// current backend; desired servers leave it false. Only the
	// mass-deletion guard reads it.
	Up bool
	// Changed is when Kubernetes last changed the endpoints a desired server
	// is made of: the newest endpoints.kubernetes.io/last-change-trigger-time
	// of their EndpointSlices, the stamp kube-proxy times its programming
	// from. Zero when none carries it, and for current servers.
	Changed time.Time
	// Pod is the name of the pod a desired server stands for (pod mode),
	// in the Service's namespace; empty otherwise.
	Pod string
	// Runtime is what HAProxy's runtime API says about a current server,
	// when the driver can see it; nil otherwise (and for desired servers).
	Runtime *Runtime
	// Source is the driver's own record of the server as it was read (for the
	// Data Plane API, its model), so that a write changes only the fields this
	// service manages. The planner ignores it; desired servers leave it nil.
	Source any
	// Zone is the zone of a desired server's Node (node mode) or endpoint
	// (pod mode), as Kubernetes gives it; empty when unknown, and for
	// current servers.
	Zone string
	// Backup marks a server HAProxy uses only while no active server of
	// the backend is UP (HAPROXY_LOCAL_ZONE: a server outside the local
	// zone). HAProxy takes "backup" only when a server is added, so a
	// server's role is part of its name (see package desired) and a role
	// change is a new server that replaces the old one (Replaces). A
	// current server has it as read where the driver can read it (the Data
	// Plane API: haproxy.cfg's "backup"); the runtime socket does not show
	// it, and a server read there is false. Drivers never change it on a
	// server that exists.
	Backup bool
	// Replaces names the servers a desired one takes over from: the same
	// server under its other role's name, or under the name it had before
	// roles were turned on or off (a long name is cut shorter with roles).
	// The planner keeps those as they are until this one is in service, so
	// the change never leaves a hole. Empty when no such name can exist.
	Replaces []string
}

// SameTraffic reports whether a and b would route traffic identically. Weight
// only matters for a ready server: drain and maint servers take no new
// connections whatever their weight.
func (a Server) SameTraffic(b Server) bool {
	if a.Address != b.Address || a.Port != b.Port || a.State != b.State || a.Check != b.Check {
		return false
	}
	return a.State != Ready || a.Weight == b.Weight
}

// CheckState is where a waiting server's health check stands, as a poll of its
// target reads it (reconcile.CheckReader).
type CheckState uint8

const (
	CheckPending CheckState = iota // it runs and has not passed yet
	CheckPassed                    // it passed: the server may enter service
	// CheckParked: none runs, the server was put in maintenance at
	// runtime since it was gated: another writer parked it.
	CheckParked
	// CheckLoadedParked: none runs, and haproxy.cfg (or "add server ...
	// disabled") said "disabled": a reload may have loaded it parked (the
	// Data Plane driver writes a waiting server so, and every reload of
	// its own loads it parked), or a writer parked it after: which one,
	// HAProxy does not say (its admin state is the same).
	CheckLoadedParked
)

// Runtime is a current server as HAProxy's runtime API shows it ("show
// servers state", "show stat"). The planner uses it to let a server take
// traffic only once its health check has passed, and to delete a server
// only once it has no sessions.
type Runtime struct {
	// CheckRunning: the health check is enabled and not paused (HAProxy
	// pauses it while a server it put in maintenance, or loaded or added
	// "disabled", is there; a server added at runtime without "disabled"
	// starts in maintenance and runs its check once it is enabled).
	CheckRunning bool
	// ConfigMaint: haproxy.cfg (or "add server ... disabled") said
	// "disabled" (SRV_ADMF_CMAINT): it stays set once the server is made
	// ready at runtime, and a reload loads it parked.
	ConfigMaint bool
	// CheckPassed: the check's health has reached rise and its last
	// result passed, i.e. the server has earned traffic.
	CheckPassed bool
	// CheckStale: a server out of service whose passed result is not the
	// running check's to give: a server leaving maintenance starts at
	// health rise with the result it had before it was parked. It has not
	// earned traffic (CheckPassed is false) and must be gated afresh.
	CheckStale bool
	// CheckFailed: the check runs and its last result failed (a dead or
	// unreachable address): the server is not about to earn traffic.
	CheckFailed bool
	// Loading: haproxy.cfg holds the server and the running HAProxy does
	// not (the Data Plane API wrote it and reloads to load it, or a reload
	// is under way): no check of it has run. It is out of service and must
	// be loaded parked; the runtime view comes once the reload ran.
	Loading bool
	// Addable, with Loading: the socket can add the server as haproxy.cfg
	// holds it (it holds nothing but what this service writes), so its
	// check need not wait for a reload that may never come (the API's
	// reload failed; a renew's add did not pass).
	Addable bool
	// Unpersisted: the running HAProxy holds the server and haproxy.cfg
	// does not (the Data Plane API driver adds a burst through the socket
	// and writes each server once it enters service; or someone added it
	// by hand at runtime). A reload drops it.
	Unpersisted bool
	// Unwritten: the running HAProxy has the server in service and
	// haproxy.cfg does not (it parks or lacks it): put in service through
	// the socket, and the write that was to follow failed. A reload would
	// take it out; the plan writes it again.
	Unwritten bool
	// Behind: the running HAProxy has the server less in traffic than
	// haproxy.cfg does (taken out through the socket, and the write that
	// was to follow failed; loaded parked by a reload after it was written
	// in service; left at weight 0 by a cut move). A reload would put it
	// back: the plan writes haproxy.cfg as wanted, or brings the running
	// HAProxy up to it.
	Behind bool
	// CheckL4: the last check was a bare TCP connect that succeeded
	// (HAProxy's L4OK): nothing was asked of the server, so a health port
	// that answers 503 still passes.
	CheckL4 bool
	// Sessions counts the server's current sessions and queued requests.
	Sessions int
	// Since is the time since the server's last state change (whole
	// seconds in HAProxy); for a parked server, how long it has been parked.
	Since time.Duration
	// ID is the server's id in the running HAProxy (0: unknown).
	ID int
	// Slot: haproxy.cfg declares the server as a slot for this service to
	// fill (a server-template whose placeholder host name ends in
	// ".invalid", which never resolves): filled with "set server ... addr",
	// freed by parking it, never added nor deleted (see package plan,
	// AssignSlots).
	Slot bool
	// Ours: the runtime API driver added the server (it gives every add
	// an id from 2^24, which haproxy.cfg's servers stay below): of the
	// servers haproxy.cfg lacks, the only ones the Data Plane API driver
	// lists (a server-template's slots, and servers someone else added
	// by hand, stay out of its sight).
	Ours bool
}

// Settings are the backend-level options this service manages. A desired
// Settings with an empty Balance manages none: the backend keeps its own.
type Settings struct {
	// Balance is the balance algorithm, e.g. "roundrobin"; empty in a
	// desired backend: leave the backend's settings as configured.
	Balance string
	// TCPCheck enables "option tcp-check" so that checks honour send-proxy-v2.
	TCPCheck bool
	// HTTPCheck, when set, is the path of an HTTP check ("option httpchk
	// GET <path>") instead of tcp-check: the servers are checked through
	// kube-proxy's health port (Check.Port).
	HTTPCheck string
}

// Owns reports whether a server named name belongs to the instance whose
// server names start with prefix (CLUSTER_NAME and "-"). An empty prefix
// owns every server: one instance per backend.
func Owns(prefix, name string) bool {
	return prefix == "" || len(name) > len(prefix) && strings.HasPrefix(name, prefix)
}

// Owned returns b with only the servers prefix owns (Owns); b itself when
// prefix is empty. The servers of other clusters, and static ones, are not
// this instance's to read, change, park, delete or count.
func (b Backend) Owned(prefix string) Backend {
	if prefix == "" {
		return b
	}
	own := make([]Server, 0, len(b.Servers))
	for _, s := range b.Servers {
		if Owns(prefix, s.Name) {
			own = append(own, s)
		}
	}
	b.Servers = own
	idle := make([]Server, 0, len(b.IdleSlots))
	for _, s := range b.IdleSlots {
		if Owns(prefix, s.Name) {
			idle = append(idle, s)
		}
	}
	b.IdleSlots = idle
	return b
}

// Backend is a backend's servers, sorted by name, and its settings.
type Backend struct {
	Name     string
	Settings Settings
	Servers  []Server
	// Revision identifies the configuration a current backend was read from;
	// drivers use it for optimistic concurrency. Desired backends leave it 0.
	Revision int64
	// Excluded names servers a desired backend leaves out on purpose (their
	// Node is excluded from load balancers), with the reason, for the
	// transition log.
	Excluded map[string]string
	// Retry is what a current backend's configuration says about retrying
	// a failed connection, when the driver can read it; nil otherwise (the
	// runtime API shows none of it) and in desired backends.
	Retry *RetryLines
	// IdleSlots are a current backend's slots (Runtime.Slot) that hold no
	// endpoint: at the placeholder address, 0.0.0.0. They are not in
	// Servers, so that nothing plans to delete, park or count them; the
	// plan fills them (AssignSlots). Sorted by id, the order they fill in.
	IdleSlots []Server
}
