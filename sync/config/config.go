// Package config reads the service's configuration from the environment and
// validates it, so that a wrong variable fails at start with its name.
package config

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/cut"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/tlsfiles"
)

// Config is the whole configuration. Each field's desc tag is its meaning:
// `haproxy-k8s-sync help` prints them, so the help cannot drift from the code.
type Config struct {
	Namespace    string `envconfig:"INGRESS_NAMESPACE" default:"ingress-nginx" desc:"namespace of the Service to follow"`
	Service      string `envconfig:"INGRESS_SERVICE_NAME" default:"ingress-nginx" desc:"the Service to follow"`
	BackendName  string `envconfig:"HAPROXY_BACKEND_NAME" desc:"backend to keep in sync for a single-port Service (empty: the Service name)"`
	BackendsSpec string `envconfig:"HAPROXY_BACKENDS" desc:"several ports: PORT=BACKEND,... (PORT a Service port name or number); overrides HAPROXY_BACKEND_NAME"`
	BackendPort  int    `envconfig:"HAPROXY_BACKEND_PORT" default:"0" desc:"fixed server port (single backend only); 0: nodePort in node mode, else the endpoint port"`
	Target       string `envconfig:"TARGET_ADDRESS" default:"node" desc:"node: a server per Node hosting endpoints (its InternalIP); pod: a server per endpoint"`

	DataplaneURLs     string `envconfig:"HAPROXY_DATAPLANE_URL" desc:"Data Plane API v3 base URL(s), comma-separated: one per HAProxy instance"`
	DataplaneUsername string `envconfig:"HAPROXY_DATAPLANE_USERNAME" desc:"Data Plane API Basic auth user"`
	DataplanePassword string `envconfig:"HAPROXY_DATAPLANE_PASSWORD" desc:"Data Plane API Basic auth password"`
	DataplaneToken    string `envconfig:"HAPROXY_DATAPLANE_TOKEN" desc:"Bearer token instead of Basic (an auth proxy in front of the API)"`
	DataplaneCAFile   string `envconfig:"HAPROXY_DATAPLANE_CA_FILE" desc:"CA bundle for https Data Plane URLs"`
	RuntimeURL        string `envconfig:"HAPROXY_RUNTIME_URL" desc:"HAProxy admin socket(s), unix:///path, tls://host:port (TLS with a client certificate) or tcp://host:port (in clear): alone, the runtime driver; with Data Plane URLs, one per instance, same order"`

	RuntimeTLSCA         string `envconfig:"HAPROXY_RUNTIME_TLS_CA" desc:"tls:// runtime URLs: CA bundle (PEM file) the admin socket's certificate must chain to; read again when it changes"`
	RuntimeTLSCert       string `envconfig:"HAPROXY_RUNTIME_TLS_CERT" desc:"tls:// runtime URLs: client certificate (PEM file) presented to the admin socket; read again when it changes (cert-manager renewals)"`
	RuntimeTLSKey        string `envconfig:"HAPROXY_RUNTIME_TLS_KEY" desc:"tls:// runtime URLs: the client certificate's private key (PEM file)"`
	RuntimeTLSServerName string `envconfig:"HAPROXY_RUNTIME_TLS_SERVER_NAME" desc:"tls:// runtime URLs: name the admin socket's certificate must carry; empty: each URL's host"`

	SendProxyV2    bool          `envconfig:"HAPROXY_SEND_PROXY_V2" default:"false" desc:"servers and their checks send PROXY protocol v2"`
	Balance        string        `envconfig:"HAPROXY_BALANCE" desc:"empty: keep the backend's balance and checks; set (e.g. roundrobin): the backend gets it and tcp-check"`
	CheckInter     time.Duration `envconfig:"HAPROXY_CHECK_INTER" default:"1.5s" desc:"health check interval while a server is steadily UP: a node that stops answering is DOWN within this plus fastinter"`
	CheckFast      time.Duration `envconfig:"HAPROXY_CHECK_FASTINTER" default:"100ms" desc:"check interval while a server's health changes (between its first pass and rise, its first failure and fall)"`
	CheckDown      time.Duration `envconfig:"HAPROXY_CHECK_DOWNINTER" default:"200ms" desc:"check interval while a server is DOWN: a new server's first check comes this long after it is added"`
	CheckRise      int           `envconfig:"HAPROXY_CHECK_RISE" default:"2" desc:"passing checks before a server is UP"`
	CheckFall      int           `envconfig:"HAPROXY_CHECK_FALL" default:"2" desc:"failing checks before a server is DOWN"`
	HealthNodePort string        `envconfig:"HAPROXY_CHECK_HEALTH_NODE_PORT" default:"auto" desc:"node mode: check Nodes of a Service with externalTrafficPolicy Local on its healthCheckNodePort (GET /healthz): on (haproxy.cfg's backend says option httpchk GET /healthz), off, or auto (on when the service writes the backend's check: HAPROXY_BALANCE set, Data Plane API)"`
	KubeProxyPort  int           `envconfig:"HAPROXY_CHECK_KUBE_PROXY_PORT" default:"0" desc:"node mode: check Nodes on kube-proxy's health port (e.g. 10256, GET /healthz: 503 for a Node being deleted) unless the Service's healthCheckNodePort is used; needs an HTTP check (HAPROXY_CHECK_HEALTH_NODE_PORT); 0: off"`
	CheckOnError   string        `envconfig:"HAPROXY_CHECK_ON_ERROR" default:"sudden-death" desc:"what a failed client connection to a server does to its check (observe layer4): fastinter, fail-check, sudden-death (one more failed check marks it DOWN), mark-down, or none"`
	Weight         string        `envconfig:"HAPROXY_WEIGHT" default:"equal" desc:"equal, or endpoints: in node mode a node's weight is its number of ready endpoints"`
	DeleteBatch    int           `envconfig:"HAPROXY_DELETE_BATCH" default:"10" desc:"Data Plane API: unwanted servers stay parked until this many, then go in one reload"`
	DeleteGuard    int           `envconfig:"HAPROXY_DELETE_GUARD_PERCENT" default:"100" desc:"mass-deletion guard: removing this share or more only parks servers until a later reconcile confirms it and their replacements are UP; 0: off"`
	DrainTimeout   time.Duration `envconfig:"HAPROXY_DRAIN_TIMEOUT" default:"0s" desc:"how long a removed server's sessions may keep it (parked, no new traffic) before they are shut and it is deleted; 0 waits for them to end"`
	MaxServers     int           `envconfig:"MAX_SERVERS" default:"4000" desc:"servers per backend at most; further adds are left out"`

	AllowedCIDRs string `envconfig:"ALLOWED_SERVER_CIDRS" desc:"when set, server addresses must be inside these CIDRs; empty: any unicast address but loopback and link-local"`
	ManagedBy    string `envconfig:"ENDPOINTSLICE_MANAGED_BY" desc:"when set, only EndpointSlices with this endpointslice.kubernetes.io/managed-by label count"`
	Cordoned     string `envconfig:"CORDONED_NODES" default:"ignore" desc:"node mode: servers of cordoned Nodes keep their state (ignore) or drain"`
	ClusterName  string `envconfig:"CLUSTER_NAME" desc:"when set, servers are named CLUSTER_NAME-<name> and only servers with that prefix are this instance's (several clusters sharing one backend); empty: every server of the backend is"`
	LocalZone    string `envconfig:"HAPROXY_LOCAL_ZONE" desc:"the zone the HAProxy runs in: servers on Nodes (pod mode: endpoints) of other zones are backup servers, used while the local zone has no server UP; the backend needs option allbackups"`

	WebhookToken     string        `envconfig:"WEBHOOK_TOKEN" desc:"static bearer token (16+ characters) required on every route but probes and metrics"`
	WebhookTokenFile string        `envconfig:"WEBHOOK_TOKEN_FILE" desc:"file holding the webhook token instead (e.g. a mounted Secret or projected token)"`
	WebhookAuth      string        `envconfig:"WEBHOOK_AUTH" desc:"token (the default with a token), kubernetes (TokenReview for WEBHOOK_AUDIENCE) or none; serve refuses to start with none chosen"`
	WebhookAudience  string        `envconfig:"WEBHOOK_AUDIENCE" default:"haproxy-k8s-sync" desc:"audience callers' tokens must be issued for (kubernetes auth)"`
	WebhookAllowed   string        `envconfig:"WEBHOOK_ALLOWED_SERVICEACCOUNTS" desc:"kubernetes auth: only these callers, namespace/name,...; empty: any caller with a token for WEBHOOK_AUDIENCE, which must then not be the default"`
	Watch            bool          `envconfig:"WATCH" default:"true" desc:"serve watches the Service, its EndpointSlices (and Nodes) and reconciles on changes; false where Knative delivers events"`
	ReadinessGate    bool          `envconfig:"POD_READINESS_GATE" default:"false" desc:"pod mode: answer the pod readiness gate haproxy-k8s-sync.io/in-service (True once a pod's server is in service on every target); needs get on pods and patch on pods/status"`
	ServiceEvents    bool          `envconfig:"SERVICE_EVENTS" default:"false" desc:"serve records what each reconcile changed or why it failed as Events on the Service (in many-Services mode: on each Service followed; needs create and patch on events)"`
	ResyncPeriod     time.Duration `envconfig:"RESYNC_PERIOD" default:"0" desc:"serve also reconciles on this period; 0: off"`
	ReconcileTimeout time.Duration `envconfig:"RECONCILE_TIMEOUT" default:"30s" desc:"deadline of one reconcile, retries included"`
	Port             int           `envconfig:"PORT" default:"8080" desc:"listen port"`
	LogLevel         string        `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
	LogFormat        string        `envconfig:"LOG_FORMAT" default:"json" desc:"json or text"`
	Kubeconfig       string        `envconfig:"KUBECONFIG" desc:"kubeconfig file(s), a list like kubectl's; empty: ~/.kube/config if present, else in-cluster"`
	KubeContext      string        `envconfig:"KUBE_CONTEXT" desc:"kubeconfig context to use; empty: the current one"`

	// Many-Services mode (many.go); the single-Service mode is the default.
	Selection          string `envconfig:"SERVICE_SELECTION" default:"name" desc:"which Services to follow: name (INGRESS_NAMESPACE/INGRESS_SERVICE_NAME alone), annotation (Services annotated haproxy-k8s-sync.io/backends), class (type LoadBalancer Services of LOAD_BALANCER_CLASS), or annotation,class"`
	WatchNamespaces    string `envconfig:"WATCH_NAMESPACES" desc:"annotation and class selection: the namespaces whose Services may select themselves, comma-separated; empty: all"`
	LoadBalancerClass  string `envconfig:"LOAD_BALANCER_CLASS" default:"haproxy-k8s-sync.io/haproxy" desc:"class selection: the spec.loadBalancerClass this instance implements"`
	AnnotationBackends string `envconfig:"ANNOTATION_BACKENDS" desc:"annotation selection (required): the backends an annotated Service may name, comma-separated names or patterns like be_* (path.Match)"`
	VIP                string `envconfig:"HAPROXY_VIP" desc:"class selection (required): the address class Services' frontends bind, written to their status; comma-separated, one per target in target order, when an HA pair's addresses differ"`
	VIPHostname        string `envconfig:"HAPROXY_VIP_HOSTNAME" desc:"class selection: a hostname written to class Services' status (status.loadBalancer.ingress[].hostname) instead of HAPROXY_VIP"`

	// Derived by Load.
	Backends []desired.PortBackend `ignored:"true"`
	// Allowed are ALLOWED_SERVER_CIDRS' prefixes.
	Allowed []netip.Prefix `ignored:"true"`
	// AllowedServiceAccounts are WEBHOOK_ALLOWED_SERVICEACCOUNTS' entries.
	AllowedServiceAccounts []string   `ignored:"true"`
	Dataplanes             []*url.URL `ignored:"true"`
	RuntimeURLs            []string   `ignored:"true"`
	// RuntimeTLS reads the files of tls:// runtime URLs; nil without one.
	RuntimeTLS *tlsfiles.Loader `ignored:"true"`
	// Many-Services mode, derived from its variables (many.go).
	ByAnnotation, ByClass bool         `ignored:"true"`
	Namespaces            []string     `ignored:"true"`
	AllowedBackends       []string     `ignored:"true"`
	VIPs                  []netip.Addr `ignored:"true"`
	// Warnings are what Load found suspect but not wrong (an unknown
	// variable with the service's prefixes, an admin socket in clear
	// across the network): the caller logs each once.
	Warnings []string `ignored:"true"`

	// needTarget: Load requires an HAProxy URL; LoadForPlan does not.
	needTarget bool
}

// balances are HAProxy's balance algorithms (those without arguments, plus the
// hash ones whose argument the Data Plane API takes separately).
var balances = map[string]bool{
	"roundrobin": true, "static-rr": true, "leastconn": true, "first": true, "source": true,
	"uri": true, "url_param": true, "hdr": true, "random": true, "rdp-cookie": true, "hash": true,
}

// onErrors are HAProxy's on-error actions, and none.
var onErrors = map[string]bool{"fastinter": true, "fail-check": true, "sudden-death": true, "mark-down": true, "none": true}

// Load reads the configuration from the process environment and validates
// it. Every error is one line that starts with the variable at fault; what
// is suspect but not wrong is in Warnings, even with an error (a misspelt
// variable may be why a required one is missing).
func Load() (Config, error) { return load(true) }

// LoadForPlan is Load for a dry run that reads manifests: it needs no
// HAProxy, so neither HAPROXY_DATAPLANE_URL nor HAPROXY_RUNTIME_URL must be
// set (with neither, the plan is made against empty backends).
func LoadForPlan() (Config, error) { return load(false) }

func load(needTarget bool) (Config, error) {
	var c Config
	c.Warnings = unknownVariables(os.Environ())
	if err := envconfig.Process("", &c); err != nil {
		var pe *envconfig.ParseError
		if errors.As(err, &pe) {
			return c, parseError(pe)
		}
		return c, err
	}
	c.needTarget = needTarget
	return c, c.validate()
}

// parseError says in an operator's words what a variable's value should
// look like, with an example, instead of naming a Go type.
func parseError(pe *envconfig.ParseError) error {
	v := short(pe.Value)
	switch pe.TypeName {
	case "time.Duration":
		return fmt.Errorf("%s: %q is not a duration; write e.g. 5m or 30s (a number and a unit: ms, s, m, h)", pe.KeyName, v)
	case "int":
		return fmt.Errorf("%s: %q is not a whole number; write e.g. 3", pe.KeyName, v)
	case "bool":
		return fmt.Errorf("%s: %q is not true or false", pe.KeyName, v)
	}
	return fmt.Errorf("%s: %q is not a valid %s", pe.KeyName, v, pe.TypeName)
}

func (c *Config) validate() error {
	bad := func(name, format string, args ...any) error {
		return fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
	}
	if c.Namespace == "" {
		return bad("INGRESS_NAMESPACE", "must not be empty")
	}
	if c.Service == "" {
		return bad("INGRESS_SERVICE_NAME", "must not be empty")
	}
	if c.BackendName == "" {
		c.BackendName = c.Service
	}
	if c.Target != string(desired.NodeMode) && c.Target != string(desired.PodMode) {
		return bad("TARGET_ADDRESS", "%q is not node or pod", short(c.Target))
	}
	if c.BackendPort < 0 || c.BackendPort > 65535 {
		return bad("HAPROXY_BACKEND_PORT", "%d is not a port (0 to 65535)", c.BackendPort)
	}
	backends, err := parseBackends(c.BackendsSpec)
	if err != nil {
		return bad("HAPROXY_BACKENDS", "%v", err)
	}
	if len(backends) > 0 && c.BackendPort != 0 {
		return bad("HAPROXY_BACKEND_PORT", "cannot be used with HAPROXY_BACKENDS (single backend only)")
	}
	if len(backends) == 0 {
		backends = []desired.PortBackend{{Backend: c.BackendName}}
	}
	c.Backends = backends

	if err := c.validateURLs(); err != nil {
		return err
	}
	if c.DataplaneToken != "" && c.DataplaneUsername != "" {
		return bad("HAPROXY_DATAPLANE_TOKEN", "cannot be used with HAPROXY_DATAPLANE_USERNAME")
	}
	if c.DataplaneCAFile != "" {
		if _, err := os.Stat(c.DataplaneCAFile); err != nil {
			return bad("HAPROXY_DATAPLANE_CA_FILE", "%v", err)
		}
	}
	if c.Balance != "" && !balances[c.Balance] {
		return bad("HAPROXY_BALANCE", "%q is not a balance algorithm", short(c.Balance))
	}
	if c.CheckInter < time.Millisecond {
		return bad("HAPROXY_CHECK_INTER", "%s is below 1ms", c.CheckInter)
	}
	if c.CheckFast < time.Millisecond {
		return bad("HAPROXY_CHECK_FASTINTER", "%s is below 1ms", c.CheckFast)
	}
	if c.CheckDown < time.Millisecond {
		return bad("HAPROXY_CHECK_DOWNINTER", "%s is below 1ms", c.CheckDown)
	}
	if !onErrors[c.CheckOnError] {
		return bad("HAPROXY_CHECK_ON_ERROR", "%q is not fastinter, fail-check, sudden-death, mark-down or none", short(c.CheckOnError))
	}
	if c.CheckRise < 1 {
		return bad("HAPROXY_CHECK_RISE", "%d is below 1", c.CheckRise)
	}
	if c.CheckFall < 1 {
		return bad("HAPROXY_CHECK_FALL", "%d is below 1", c.CheckFall)
	}
	if c.DeleteBatch < 1 {
		return bad("HAPROXY_DELETE_BATCH", "%d is below 1", c.DeleteBatch)
	}
	if c.DeleteGuard < 0 || c.DeleteGuard > 100 {
		return bad("HAPROXY_DELETE_GUARD_PERCENT", "%d is not a percentage (0 to 100)", c.DeleteGuard)
	}
	if c.DrainTimeout < 0 {
		return bad("HAPROXY_DRAIN_TIMEOUT", "%s is negative", c.DrainTimeout)
	}
	if c.MaxServers < 1 || c.MaxServers > 100000 {
		return bad("MAX_SERVERS", "%d is not between 1 and 100000", c.MaxServers)
	}
	c.Allowed = nil
	for _, raw := range splitList(c.AllowedCIDRs) {
		p, err := netip.ParsePrefix(raw)
		if err != nil {
			return bad("ALLOWED_SERVER_CIDRS", "%q is not a CIDR like 10.0.0.0/8", short(raw))
		}
		// 10.0.0.1/8 is most likely a typo for a host (/32) or for the
		// network: say which network it would mean rather than guess.
		if p != p.Masked() {
			return bad("ALLOWED_SERVER_CIDRS", "%q has host bits set; write the network %s (or %s for the one address)",
				short(raw), p.Masked(), netip.PrefixFrom(p.Addr(), p.Addr().BitLen()))
		}
		c.Allowed = append(c.Allowed, p)
	}
	if c.Cordoned != "ignore" && c.Cordoned != "drain" {
		return bad("CORDONED_NODES", "%q is not ignore or drain", short(c.Cordoned))
	}
	if why := desired.ValidClusterName(c.ClusterName); why != "" {
		return bad("CLUSTER_NAME", "%q %s", short(c.ClusterName), why)
	}
	if why := validZone(c.LocalZone); why != "" {
		return bad("HAPROXY_LOCAL_ZONE", "%q %s", short(c.LocalZone), why)
	}
	if c.KubeProxyPort < 0 || c.KubeProxyPort > 65535 {
		return bad("HAPROXY_CHECK_KUBE_PROXY_PORT", "%d is not a port (0: off)", c.KubeProxyPort)
	}
	if c.KubeProxyPort != 0 && c.Target != "node" {
		return bad("HAPROXY_CHECK_KUBE_PROXY_PORT", "needs TARGET_ADDRESS=node (pods are checked on their own port)")
	}
	switch c.HealthNodePort {
	case "auto", "on", "off":
	default:
		return bad("HAPROXY_CHECK_HEALTH_NODE_PORT", "%q is not auto, on or off", short(c.HealthNodePort))
	}
	if c.KubeProxyPort != 0 && !c.httpChecks() {
		return bad("HAPROXY_CHECK_KUBE_PROXY_PORT", "needs an HTTP check: set HAPROXY_CHECK_HEALTH_NODE_PORT=on with option httpchk GET /healthz in haproxy.cfg, or HAPROXY_BALANCE with a Data Plane API")
	}
	if c.ReadinessGate && c.Target != "pod" {
		return bad("POD_READINESS_GATE", "needs TARGET_ADDRESS=pod (a Node's server stands for many pods)")
	}
	if c.ReadinessGate && len(c.Dataplanes) > 0 && len(c.RuntimeURLs) == 0 {
		// The Data Plane API does not show check results: no pod's gate
		// could ever turn True, and every gated rollout would stall.
		return bad("POD_READINESS_GATE", "needs HAPROXY_RUNTIME_URL with HAPROXY_DATAPLANE_URL (one admin socket per instance): only the runtime socket shows which servers passed their check")
	}
	if c.Weight != "equal" && c.Weight != "endpoints" {
		return bad("HAPROXY_WEIGHT", "%q is not equal or endpoints", short(c.Weight))
	}
	if err := c.validateWebhookAuth(); err != nil {
		return err
	}
	if err := c.validateMany(); err != nil {
		return err
	}
	if c.ResyncPeriod < 0 {
		return bad("RESYNC_PERIOD", "must not be negative")
	}
	if c.ReconcileTimeout <= 0 {
		return bad("RECONCILE_TIMEOUT", "must be positive")
	}
	if c.Port < 1 || c.Port > 65535 {
		return bad("PORT", "%d is not a port", c.Port)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return bad("LOG_FORMAT", "%q is not json or text", short(c.LogFormat))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return bad("LOG_LEVEL", "%q is not debug, info, warn or error", short(c.LogLevel))
	}
	return nil
}

// validZone says what is wrong with a zone name, or "": a Kubernetes label
// value (topology.kubernetes.io/zone), at most 63 characters.
func validZone(z string) string {
	if len(z) > 63 {
		return "is longer than 63 characters (a label value)"
	}
	for i := 0; i < len(z); i++ {
		ch := z[i]
		alnum := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9'
		if !alnum && ch != '-' && ch != '_' && ch != '.' {
			return fmt.Sprintf("has %q; a zone label value has letters, digits, '-', '_' and '.'", string(z[i]))
		}
	}
	return ""
}

// ServerPrefix is the name prefix of this instance's servers: CLUSTER_NAME
// and "-", or empty (every server of the backends is its own).
func (c Config) ServerPrefix() string {
	if c.ClusterName == "" {
		return ""
	}
	return c.ClusterName + "-"
}

// Owns says, for the start-up log, which servers this instance considers
// its own, e.g. "servers named eu1-* (cluster eu1)".
func (c Config) Owns() string {
	if c.ClusterName == "" {
		return "every server of its backends"
	}
	return fmt.Sprintf("servers named %s* (cluster %s); others are left alone", c.ServerPrefix(), c.ClusterName)
}

// DefaultWebhookAudience is WEBHOOK_AUDIENCE's default.
const DefaultWebhookAudience = "haproxy-k8s-sync"

// Webhook auth modes (WEBHOOK_AUTH).
const (
	AuthToken      = "token"
	AuthKubernetes = "kubernetes"
	AuthNone       = "none"
)

// validateWebhookAuth reads the token file and settles the auth mode: empty
// stays empty when nothing is chosen (serve then refuses to start, see
// RequireWebhookAuth; one-shot commands need none).
func (c *Config) validateWebhookAuth() error {
	if err := c.readWebhookToken(); err != nil {
		return err
	}
	switch c.WebhookAuth {
	case "":
		if c.WebhookToken != "" {
			c.WebhookAuth = AuthToken
		}
	case AuthToken:
		if c.WebhookToken == "" {
			return errors.New("WEBHOOK_AUTH: token needs WEBHOOK_TOKEN or WEBHOOK_TOKEN_FILE")
		}
	case AuthKubernetes, AuthNone:
		if c.WebhookToken != "" {
			return fmt.Errorf("%s: cannot be used with WEBHOOK_AUTH=%s", c.tokenVar(), c.WebhookAuth)
		}
	default:
		return fmt.Errorf("WEBHOOK_AUTH: %q is not token, kubernetes or none", short(c.WebhookAuth))
	}
	c.AllowedServiceAccounts = nil
	for _, sa := range splitList(c.WebhookAllowed) {
		ns, n, ok := strings.Cut(sa, "/")
		if !ok || ns == "" || n == "" || strings.Contains(n, "/") {
			return fmt.Errorf("WEBHOOK_ALLOWED_SERVICEACCOUNTS: %q is not namespace/name", short(sa))
		}
		c.AllowedServiceAccounts = append(c.AllowedServiceAccounts, sa)
	}
	if len(c.AllowedServiceAccounts) > 0 && c.WebhookAuth != AuthKubernetes {
		return errors.New("WEBHOOK_ALLOWED_SERVICEACCOUNTS: needs WEBHOOK_AUTH=kubernetes")
	}
	if c.WebhookAuth == AuthKubernetes && c.WebhookAudience == "" {
		return errors.New("WEBHOOK_AUDIENCE: must not be empty with WEBHOOK_AUTH=kubernetes")
	}
	// Whoever may create a pod can have a ServiceAccount token issued for
	// any audience: the well-known default, with nobody listed, would let
	// all of them in.
	if c.WebhookAuth == AuthKubernetes && len(c.AllowedServiceAccounts) == 0 && c.WebhookAudience == DefaultWebhookAudience {
		return fmt.Errorf("WEBHOOK_ALLOWED_SERVICEACCOUNTS: empty with WEBHOOK_AUTH=kubernetes and the default WEBHOOK_AUDIENCE %q accepts a token from anyone who may create a pod; list the callers (namespace/name,...) or choose an audience of your own", DefaultWebhookAudience)
	}
	return nil
}

// readWebhookToken reads WEBHOOK_TOKEN_FILE into WebhookToken, trims it and
// checks its length.
func (c *Config) readWebhookToken() error {
	if c.WebhookTokenFile != "" {
		if c.WebhookToken != "" {
			return errors.New("WEBHOOK_TOKEN_FILE: cannot be used with WEBHOOK_TOKEN")
		}
		b, err := os.ReadFile(c.WebhookTokenFile)
		if err != nil {
			return fmt.Errorf("WEBHOOK_TOKEN_FILE: %v", err)
		}
		c.WebhookToken = string(b)
	}
	c.WebhookToken = strings.TrimSpace(c.WebhookToken)
	if c.WebhookToken != "" && len(c.WebhookToken) < minTokenLength {
		return fmt.Errorf("%s: the token has %d characters; use at least %d", c.tokenVar(), len(c.WebhookToken), minTokenLength)
	}
	if w := placeholderWord(c.WebhookToken); w != "" {
		return fmt.Errorf("%s: the token is a placeholder (it says %q); set a random one, e.g. from openssl rand -hex 24", c.tokenVar(), w)
	}
	return nil
}

// placeholderWord returns the word that marks token as an example's
// placeholder (deploy/secret.example.yaml's, or one like it), or "". A
// random token never holds these words; a copied example always does, and
// would otherwise pass the length check and open every route to whoever
// read the example.
func placeholderWord(token string) string {
	t := strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(token))
	for _, w := range []string{"changeme", "replace", "placeholder"} {
		if strings.Contains(t, w) {
			return w
		}
	}
	return ""
}

// tokenVar names the variable the token came from.
func (c *Config) tokenVar() string {
	if c.WebhookTokenFile != "" {
		return "WEBHOOK_TOKEN_FILE"
	}
	return "WEBHOOK_TOKEN"
}

// WebhookTokenFromEnv reads the webhook token from WEBHOOK_TOKEN or
// WEBHOOK_TOKEN_FILE as Load does, for commands that need nothing else
// (trigger). Empty means none; the file is read at each call, so a rotated
// projected token is honoured.
func WebhookTokenFromEnv() (string, error) {
	c := Config{WebhookToken: os.Getenv("WEBHOOK_TOKEN"), WebhookTokenFile: os.Getenv("WEBHOOK_TOKEN_FILE")}
	err := c.readWebhookToken()
	return c.WebhookToken, err
}

// minTokenLength is the shortest webhook token accepted.
const minTokenLength = 16

// RequireWebhookAuth fails when no webhook auth mode was chosen: serve must
// not start open by accident.
func (c Config) RequireWebhookAuth() error {
	if c.WebhookAuth == "" {
		return errors.New("WEBHOOK_TOKEN or WEBHOOK_AUTH: choose how callers authenticate: WEBHOOK_TOKEN (or WEBHOOK_TOKEN_FILE), WEBHOOK_AUTH=kubernetes, or WEBHOOK_AUTH=none")
	}
	return nil
}

// short bounds a value quoted in an error.
func short(s string) string { return cut.To(s, 200) }

// Options returns the desired-state options this configuration asks for.
func (c Config) Options() desired.Options {
	return desired.Options{
		Mode:              desired.Mode(c.Target),
		Backends:          c.Backends,
		FixedPort:         c.BackendPort,
		WeightByEndpoints: c.Weight == "endpoints",
		// With HAPROXY_BALANCE unset the backend's settings are left as
		// configured (no backend write, no reload); set, the backend gets
		// that balance and option tcp-check (checks honour send-proxy-v2).
		Settings:            model.Settings{Balance: c.Balance, TCPCheck: c.Balance != ""},
		Check:               c.Check(),
		Addresses:           desired.AddressPolicy{Allowed: c.Allowed},
		ManagedBy:           c.ManagedBy,
		DrainCordoned:       c.Cordoned == "drain",
		ReadinessGate:       c.ReadinessGate,
		HTTPHealthChecks:    c.httpChecks(),
		HealthCheckNodePort: c.HealthNodePort != "off",
		KubeProxyHealthPort: c.KubeProxyPort,
		NamePrefix:          c.ServerPrefix(),
		LocalZone:           c.LocalZone,
	}
}

// httpChecks reports whether the backends' checks are HTTP GET /healthz,
// which kube-proxy's health ports need (a TCP connect to them passes while
// kube-proxy runs): said so (on), or written by the service (auto, with
// HAPROXY_BALANCE and a Data Plane API; the runtime API cannot).
func (c Config) httpChecks() bool {
	return c.HealthNodePort == "on" || c.HealthNodePort == "auto" && c.Balance != "" && c.DataplaneURLs != ""
}

// ShippedCheck is the health check every server gets on the shipped
// defaults (each variable's default tag), for tests and benchmarks that must
// measure what users get.
func ShippedCheck() model.Check {
	var c Config
	t := reflect.TypeOf(c)
	v := reflect.ValueOf(&c).Elem()
	for i := range t.NumField() {
		def, ok := t.Field(i).Tag.Lookup("default")
		if !ok {
			continue
		}
		switch f := v.Field(i); f.Interface().(type) {
		case time.Duration:
			d, _ := time.ParseDuration(def)
			f.SetInt(int64(d))
		case int:
			n, _ := strconv.Atoi(def)
			f.SetInt(int64(n))
		case string:
			f.SetString(def)
		case bool:
			f.SetBool(def == "true")
		}
	}
	return c.Check()
}

// Check returns the health check every server gets.
func (c Config) Check() model.Check {
	ck := model.Check{
		Inter: c.CheckInter, FastInter: c.CheckFast, DownInter: c.CheckDown,
		Rise: c.CheckRise, Fall: c.CheckFall, OnError: c.CheckOnError, SendProxyV2: c.SendProxyV2,
	}
	if ck.OnError == "none" {
		ck.OnError = ""
	}
	return ck
}

// String describes what every command reads and writes, without secrets,
// for the start-up log: e.g. "service=ingress-nginx/ingress-nginx
// backends=http=be_http,https=be_https target=node dataplanes=2 runtime=0".
// What only serve does (watch, resync, auth) its caller says.
func (c Config) String() string {
	out := fmt.Sprintf("service=%s/%s backends=%s target=%s dataplanes=%d runtime=%d",
		c.Namespace, c.Service, BackendsString(c.Backends), c.Target, len(c.Dataplanes), len(c.RuntimeURLs))
	if c.ManyServices() { // Services name their own backends
		out = fmt.Sprintf("%s target=%s dataplanes=%d runtime=%d", c.ManyString(), c.Target, len(c.Dataplanes), len(c.RuntimeURLs))
	}
	if c.ClusterName != "" {
		out += " cluster=" + c.ClusterName
	}
	if c.LocalZone != "" {
		out += " localZone=" + c.LocalZone
	}
	return out
}

// BackendsString writes backends as HAPROXY_BACKENDS does (http=be_http,...),
// or the one backend's name when it follows the Service's only port.
func BackendsString(backends []desired.PortBackend) string {
	parts := make([]string, len(backends))
	for i, b := range backends {
		parts[i] = b.Backend
		if b.Port != "" {
			parts[i] = b.Port + "=" + b.Backend
		}
	}
	return strings.Join(parts, ",")
}

// Usage writes every variable with its default and meaning.
func Usage(w io.Writer) error {
	return envconfig.Usagef("", &Config{}, w, "{{range .}}  {{usage_key .}}\t{{usage_default .}}\t{{usage_description .}}\n{{end}}")
}
