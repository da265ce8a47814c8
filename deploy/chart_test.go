package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
)

// schemaDefinitions reads the definitions of the chart's values.schema.json.
func schemaDefinitions(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("helm/haproxy-k8s-sync/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Definitions map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s.Definitions
}

// schemaAccepts evaluates the subset of JSON Schema the chart's definitions
// use (type, pattern, const, anyOf, not, items, $ref), with Go's regexp as
// helm's validator does. A keyword it does not know fails the test.
func schemaAccepts(t *testing.T, defs map[string]any, schema map[string]any, v any) bool {
	t.Helper()
	for k, want := range schema {
		switch k {
		case "description":
		case "$ref":
			name := strings.TrimPrefix(want.(string), "#/definitions/")
			def, ok := defs[name].(map[string]any)
			if !ok {
				t.Fatalf("values.schema.json has no definition %q", name)
			}
			if !schemaAccepts(t, defs, def, v) {
				return false
			}
		case "type":
			types := []any{want}
			if l, ok := want.([]any); ok {
				types = l
			}
			ok := false
			for _, ty := range types {
				switch v.(type) {
				case string:
					ok = ok || ty == "string"
				case []any:
					ok = ok || ty == "array"
				case float64:
					ok = ok || ty == "integer" || ty == "number"
				}
			}
			if !ok {
				return false
			}
		case "pattern":
			if s, ok := v.(string); ok && !regexp.MustCompile(want.(string)).MatchString(s) {
				return false
			}
		case "const":
			if fmt.Sprint(v) != fmt.Sprint(want) || fmt.Sprintf("%T", v) != fmt.Sprintf("%T", want) {
				return false
			}
		case "anyOf":
			ok := false
			for _, sub := range want.([]any) {
				ok = ok || schemaAccepts(t, defs, sub.(map[string]any), v)
			}
			if !ok {
				return false
			}
		case "not":
			if schemaAccepts(t, defs, want.(map[string]any), v) {
				return false
			}
		case "items":
			if l, ok := v.([]any); ok {
				for _, item := range l {
					if !schemaAccepts(t, defs, want.(map[string]any), item) {
						return false
					}
				}
			}
		default:
			t.Fatalf("schemaAccepts does not know %q", k)
		}
	}
	return true
}

// serviceAccepts loads the service's configuration with variable set to
// value: what the pod would do with the rendered ConfigMap.
func serviceAccepts(t *testing.T, variable, value string) error {
	t.Helper()
	t.Setenv("HAPROXY_DATAPLANE_URL", "http://haproxy:5555")
	t.Setenv(variable, value)
	_, err := config.Load()
	return err
}

// TestChartSchemaAgreesWithTheService: every duration or CIDR value the
// chart's schema lets render, the service accepts at start (a value it
// refuses makes the pod exit 2); the usual spellings pass the schema, and
// the mistakes seen (a number without unit, a word, a /33) do not.
func TestChartSchemaAgreesWithTheService(t *testing.T) {
	defs := schemaDefinitions(t)
	durations := []struct {
		value       string
		zero, check bool // schema verdict for duration (0 allowed) and checkInterval
		positive    bool // and for positiveDuration
	}{
		{"0", true, false, false},
		{"0s", true, false, false},
		{"00s", true, false, false},
		{"0.0s", true, false, false},
		{"0ms0s", true, false, false},
		{"5m", true, true, true},
		{"1.5s", true, true, true},
		{"100ms", true, true, true},
		{"1h30m", true, true, true},
		{"90s", true, true, true},
		{".5s", true, true, true},
		{"5.s", true, true, true},
		{"2h45m30.5s", true, true, true},
		{"1ms", true, true, true},
		{"1000us", true, true, true},
		{"1000µs", true, true, true},
		{"1000000ns", true, true, true},
		{"0.001s", true, true, true},
		{"999us", true, false, true},
		{"999999ns", true, false, true},
		{"0.5ms", true, false, true},
		{"0.0005s", true, false, true},
		{"1ns", true, false, true},
		{"0.1ns", true, false, false},
		{"5", false, false, false},
		{"30", false, false, false},
		{"abc", false, false, false},
		{"", false, false, false},
		{"-1s", false, false, false},
		{"-0s", false, false, false},
		{"+5m", false, false, false},
		{"1d", false, false, false},
		{"5 m", false, false, false},
		{" 5m", false, false, false},
		{"1e3s", false, false, false},
		{"5M", false, false, false},
		{"1m-1s", false, false, false},
	}
	kinds := []struct {
		def       string
		variables []string
		want      func(zero, check, positive bool) bool
	}{
		{"duration", []string{"RESYNC_PERIOD", "HAPROXY_DRAIN_TIMEOUT"}, func(z, _, _ bool) bool { return z }},
		{"positiveDuration", []string{"RECONCILE_TIMEOUT"}, func(_, _, p bool) bool { return p }},
		{"checkInterval", []string{"HAPROXY_CHECK_INTER", "HAPROXY_CHECK_FASTINTER", "HAPROXY_CHECK_DOWNINTER"}, func(_, c, _ bool) bool { return c }},
	}
	for _, k := range kinds {
		for _, d := range durations {
			want := k.want(d.zero, d.check, d.positive)
			got := schemaAccepts(t, defs, map[string]any{"$ref": "#/definitions/" + k.def}, d.value)
			if got != want {
				t.Errorf("%s: schema accepts %q: %v, want %v", k.def, d.value, got, want)
			}
			if !got {
				continue
			}
			for _, v := range k.variables {
				t.Run(v+"="+d.value, func(t *testing.T) {
					if err := serviceAccepts(t, v, d.value); err != nil {
						t.Errorf("the schema lets %q render but the service refuses it: %v", d.value, err)
					}
				})
			}
		}
	}
	if !schemaAccepts(t, defs, map[string]any{"$ref": "#/definitions/duration"}, float64(0)) {
		t.Error("duration: --set resyncPeriod=0 (a number) is refused")
	}
	if schemaAccepts(t, defs, map[string]any{"$ref": "#/definitions/duration"}, float64(5)) {
		t.Error("duration: --set resyncPeriod=5 (a number) passes")
	}

	cidrs := []struct {
		value string
		want  bool
	}{
		{"10.0.0.0/8", true},
		{"0.0.0.0/0", true},
		{"192.168.1.0/24", true},
		{"10.1.2.3/32", true},
		{"255.255.255.255/32", true},
		{"10.0.0.0/33", false},
		{"10.0.0.0", false},
		{"256.0.0.0/8", false},
		{"10.0.0/8", false},
		{"010.0.0.0/8", false},
		{"10.0.0.0/08", false},
		{"10.0.0.0/-1", false},
		{"10.0.0.0/ 8", false},
		{"fd00::/8", true},
		{"::/0", true},
		{"::1/128", true},
		{"2001:db8::/32", true},
		{"2001:DB8::/32", true},
		{"2001:db8:0:0:0:0:0:0/64", true},
		{"1:2:3:4:5:6:7:8/128", true},
		{"1:2:3:4:5:6:7::/128", true},
		{"::2:3:4:5:6:7:8/128", true},
		{"1::8/128", true},
		{"1:2::7:8/128", true},
		{"2001:db8::/129", false},
		{"2001:db8::", false},
		{"fe80::/10%eth0", false},
		{"1:2:3:4:5:6:7:8:9/128", false},
		{"1:2:3:4:5:6:7/128", false},
		{"1:::2/128", false},
		{"1::2::3/128", false},
		{"gggg::/16", false},
		{"12345::/16", false},
		// Lists, as a comma-separated string (HAPROXY_DATAPLANE_URL's form).
		{"", true},
		{"10.0.0.0/8,fd00::/8", true},
		{"10.0.0.0/8, 192.168.0.0/16", true},
		{"10.0.0.0/8,10.0.0.0/33", false},
		{"10.0.0.0/8;192.168.0.0/16", false},
		{"10.0.0.0/8 192.168.0.0/16", false},
	}
	for _, c := range cidrs {
		got := schemaAccepts(t, defs, map[string]any{"$ref": "#/definitions/cidrs"}, c.value)
		if got != c.want {
			t.Errorf("cidrs: schema accepts %q: %v, want %v", c.value, got, c.want)
		}
		if !strings.Contains(c.value, ",") && c.value != "" {
			if inList := schemaAccepts(t, defs, map[string]any{"$ref": "#/definitions/cidrs"}, []any{c.value}); inList != c.want {
				t.Errorf("cidrs: schema accepts [%q]: %v, want %v", c.value, inList, c.want)
			}
		}
		if got {
			t.Run("ALLOWED_SERVER_CIDRS="+c.value, func(t *testing.T) {
				if err := serviceAccepts(t, "ALLOWED_SERVER_CIDRS", c.value); err != nil {
					t.Errorf("the schema lets %q render but the service refuses it: %v", c.value, err)
				}
			})
		}
	}
}

// renderedConfig renders the chart's ConfigMap with args and returns its data.
func renderedConfig(t *testing.T, args ...string) map[string]string {
	t.Helper()
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(helm(t, append(args, "--show-only", "templates/configmap.yaml")...), &cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data
}

// TestChartValidatesDurationsAndCIDRs: helm template refuses the values
// that rendered before and made the pod exit 2, and renders the forms the
// docs and values.yaml describe, which the service then accepts.
func TestChartValidatesDurationsAndCIDRs(t *testing.T) {
	for name, args := range map[string][]string{
		"resyncPeriod=5 (no unit)":        {"--set", "resyncPeriod=5"},
		"reconcileTimeout=30 (no unit)":   {"--set", "reconcileTimeout=30"},
		"reconcileTimeout=0s":             {"--set", "reconcileTimeout=0s"},
		"haproxy.drainTimeout=abc":        {"--set", "haproxy.drainTimeout=abc"},
		"haproxy.drainTimeout=-1s":        {"--set", "haproxy.drainTimeout=-1s"},
		"haproxy.checkInter=0.5ms":        {"--set", "haproxy.checkInter=0.5ms"},
		"haproxy.checkFastInter=100":      {"--set", "haproxy.checkFastInter=100"},
		"a /33 in a list":                 {"--set", "haproxy.allowedServerCIDRs={10.0.0.0/33}"},
		"an IPv6 /129 in a list":          {"--set", "haproxy.allowedServerCIDRs={fd00::/129}"},
		"an address without prefix":       {"--set", "haproxy.allowedServerCIDRs={10.0.0.1}"},
		"a bad CIDR in a string":          {"--set", "haproxy.allowedServerCIDRs=10.0.0.0/8\\,300.0.0.0/8"},
		"a bad CIDR in a --set-json list": {"--set-json", `haproxy.allowedServerCIDRs=["10.0.0.0/8","10.0.0.0/33"]`},
	} {
		t.Run("refuses "+name, func(t *testing.T) {
			out, err := helmRefuses(args...)
			if err == nil || !strings.Contains(string(out), "values don't meet the specifications of the schema") {
				t.Errorf("rendered (%v):\n%.400s", err, out)
			}
		})
	}
	for _, tt := range []struct {
		args []string
		key  string
		want string
	}{
		{[]string{"--set", "resyncPeriod=0"}, "RESYNC_PERIOD", "0"},
		{[]string{"--set", "resyncPeriod=0s"}, "RESYNC_PERIOD", "0s"},
		{[]string{"--set", "resyncPeriod=1h30m"}, "RESYNC_PERIOD", "1h30m"},
		{[]string{"--set", "reconcileTimeout=45s"}, "RECONCILE_TIMEOUT", "45s"},
		{[]string{"--set", "haproxy.drainTimeout=0"}, "HAPROXY_DRAIN_TIMEOUT", "0"},
		{[]string{"--set", "haproxy.drainTimeout=90s"}, "HAPROXY_DRAIN_TIMEOUT", "90s"},
		{[]string{"--set", "haproxy.checkInter=2s"}, "HAPROXY_CHECK_INTER", "2s"},
		{[]string{"--set", "haproxy.allowedServerCIDRs={10.0.0.0/8,fd00::/8}"}, "ALLOWED_SERVER_CIDRS", "10.0.0.0/8,fd00::/8"},
		{[]string{"--set", "haproxy.allowedServerCIDRs=10.0.0.0/8\\,192.168.0.0/16"}, "ALLOWED_SERVER_CIDRS", "10.0.0.0/8,192.168.0.0/16"},
		{[]string{"--set-json", `haproxy.allowedServerCIDRs=["10.0.0.0/8"]`}, "ALLOWED_SERVER_CIDRS", "10.0.0.0/8"},
		{nil, "ALLOWED_SERVER_CIDRS", ""},
	} {
		t.Run("renders "+strings.Join(tt.args, " "), func(t *testing.T) {
			data := renderedConfig(t, tt.args...)
			if data[tt.key] != tt.want {
				t.Errorf("%s: %q, want %q", tt.key, data[tt.key], tt.want)
			}
			for k, v := range data {
				t.Setenv(k, v)
			}
			t.Setenv("INGRESS_NAMESPACE", "ingress-nginx")
			t.Setenv("WEBHOOK_TOKEN", "from-the-secret-0123456789") // as the Secret gives it
			if _, err := config.Load(); err != nil {
				t.Errorf("the service refuses it: %v", err)
			}
		})
	}
}

// object is one document of a rendered or built YAML stream.
type object struct {
	Kind     string            `json:"kind"`
	Metadata metav1.ObjectMeta `json:"metadata"`
	doc      []byte
}

// byKind splits a YAML stream into its objects, by kind (one of each
// expected, but Role and RoleBinding of several: keyed "Kind/name").
func byKind(t *testing.T, stream []byte) map[string]object {
	t.Helper()
	out := map[string]object{}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(stream), -1) {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		if o.Kind == "" {
			continue
		}
		o.doc = []byte(doc)
		key := o.Kind
		if _, dup := out[key]; dup {
			key = o.Kind + "/" + o.Metadata.Name
		}
		out[key] = o
	}
	return out
}

func decode[T any](t *testing.T, o object) T {
	t.Helper()
	var v T
	if err := yaml.Unmarshal(o.doc, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// hasLabels reports the labels of want that got lacks or has otherwise.
func missingLabels(want, got map[string]string) []string {
	var out []string
	for k, v := range want {
		if got[k] != v {
			out = append(out, fmt.Sprintf("%s=%s (has %q)", k, v, got[k]))
		}
	}
	return out
}

// admits reports whether a NetworkPolicy's ingress rules let in a pod with
// podLabels in namespace ns (namespaces are known by their
// kubernetes.io/metadata.name label only).
func admits(t *testing.T, np networkingv1.NetworkPolicy, policyNS, ns string, podLabels map[string]string) bool {
	t.Helper()
	sel := func(ls *metav1.LabelSelector, l map[string]string) bool {
		s, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			t.Fatal(err)
		}
		return s.Matches(labels.Set(l))
	}
	nsLabels := map[string]string{"kubernetes.io/metadata.name": ns}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.From {
			switch {
			case p.IPBlock != nil:
			case p.NamespaceSelector == nil:
				if ns == policyNS && sel(p.PodSelector, podLabels) {
					return true
				}
			case sel(p.NamespaceSelector, nsLabels) && (p.PodSelector == nil || sel(p.PodSelector, podLabels)):
				return true
			}
		}
	}
	return false
}

// TestChartMatchesDeployBase: the chart installs what deploy/ (the example
// overlay with the CronJob) installs, as far as others see it: the same
// labels on every object and pod (the chart adds Helm's), the same
// topology spread, a NetworkPolicy that lets in the same pods, and the
// CronJob's pods kept out of the Deployment's, Service's and
// PodDisruptionBudget's selectors.
func TestChartMatchesDeployBase(t *testing.T) {
	base := byKind(t, []byte(kubectl(t, nil, "kustomize", overlay(t, "resources:\n  - %[1]s/overlays/example\ncomponents:\n  - %[1]s/components/cronjob\n", "."))))
	chart := byKind(t, helm(t, "-n", "ingress-nginx", "--set", "cronJob.enabled=true", "--set", "networkPolicy.enabled=true"))
	for key, b := range base {
		c, ok := chart[key]
		if !ok {
			if strings.Contains(key, "/") || b.Kind == "ClusterRole" || b.Kind == "ClusterRoleBinding" {
				continue // named otherwise in the chart; labels checked on the rest
			}
			t.Errorf("the chart has no %s", key)
			continue
		}
		if m := missingLabels(b.Metadata.Labels, c.Metadata.Labels); m != nil {
			t.Errorf("%s: the chart's lacks labels %v", key, m)
		}
	}

	bd, cd := decode[appsv1.Deployment](t, base["Deployment"]), decode[appsv1.Deployment](t, chart["Deployment"])
	if m := missingLabels(bd.Spec.Template.Labels, cd.Spec.Template.Labels); m != nil {
		t.Errorf("Deployment pods: the chart's lack labels %v", m)
	}
	bt, ct := bd.Spec.Template.Spec.TopologySpreadConstraints, cd.Spec.Template.Spec.TopologySpreadConstraints
	switch {
	case len(bt) != 1 || len(ct) != len(bt):
		t.Errorf("topology spread: deploy/base %+v, chart %+v", bt, ct)
	case !reflect.DeepEqual(ct[0].LabelSelector, cd.Spec.Selector):
		t.Errorf("topology spread: the chart's selects %v, not its Deployment's pods %v", ct[0].LabelSelector, cd.Spec.Selector)
	default:
		bt[0].LabelSelector, ct[0].LabelSelector = nil, nil
		if !reflect.DeepEqual(bt[0], ct[0]) {
			t.Errorf("topology spread: chart %+v, deploy/base %+v", ct[0], bt[0])
		}
	}

	bc, cc := decode[batchv1.CronJob](t, base["CronJob"]), decode[batchv1.CronJob](t, chart["CronJob"])
	bTrigger, cTrigger := bc.Spec.JobTemplate.Spec.Template.Labels, cc.Spec.JobTemplate.Spec.Template.Labels
	if m := missingLabels(bTrigger, cTrigger); m != nil {
		t.Errorf("CronJob pods: the chart's lack labels %v", m)
	}
	for _, sel := range []struct {
		name string
		sel  map[string]string
	}{
		{"Deployment", cd.Spec.Selector.MatchLabels},
		{"Service", decode[corev1.Service](t, chart["Service"]).Spec.Selector},
	} {
		if labels.SelectorFromSet(sel.sel).Matches(labels.Set(cTrigger)) {
			t.Errorf("the chart's %s selects the CronJob's pods %v", sel.name, cTrigger)
		}
	}

	bn, cn := decode[networkingv1.NetworkPolicy](t, base["NetworkPolicy"]), decode[networkingv1.NetworkPolicy](t, chart["NetworkPolicy"])
	for _, p := range []struct {
		who         string
		ns          string
		base, chart map[string]string // the pod's labels in each install
		admitted    bool
	}{
		{"the CronJob's pods", "ingress-nginx", bTrigger, cTrigger, true},
		{"the ingress controller's pods", "ingress-nginx", map[string]string{"app.kubernetes.io/name": "ingress-nginx"}, map[string]string{"app.kubernetes.io/name": "ingress-nginx"}, true},
		{"Prometheus", "monitoring", map[string]string{"app.kubernetes.io/name": "prometheus"}, map[string]string{"app.kubernetes.io/name": "prometheus"}, true},
		{"another pod of the namespace", "ingress-nginx", map[string]string{"app": "other"}, map[string]string{"app": "other"}, false},
		{"the ingress controller's labels elsewhere", "default", map[string]string{"app.kubernetes.io/name": "ingress-nginx"}, map[string]string{"app.kubernetes.io/name": "ingress-nginx"}, false},
	} {
		if got := admits(t, bn, "ingress-nginx", p.ns, p.base); got != p.admitted {
			t.Errorf("deploy/ lets in %s: %v, want %v", p.who, got, p.admitted)
		}
		if got := admits(t, cn, "ingress-nginx", p.ns, p.chart); got != p.admitted {
			t.Errorf("the chart lets in %s: %v, want %v", p.who, got, p.admitted)
		}
	}
	if !reflect.DeepEqual(bn.Spec.Ingress[0].Ports, cn.Spec.Ingress[0].Ports) {
		t.Errorf("ports: chart %v, deploy/ %v", cn.Spec.Ingress[0].Ports, bn.Spec.Ingress[0].Ports)
	}

	// The Service in another namespace than the release: the ingress
	// controller's pods are let in from there.
	other := decode[networkingv1.NetworkPolicy](t, byKind(t, helm(t, "-n", "sync-system", "--set", "ingress.namespace=edge",
		"--set", "networkPolicy.enabled=true"))["NetworkPolicy"])
	ctrl := map[string]string{"app.kubernetes.io/name": "ingress-nginx"}
	if !admits(t, other, "sync-system", "edge", ctrl) || admits(t, other, "sync-system", "sync-system", ctrl) {
		t.Errorf("ingress.namespace=edge: the controller's pods are not let in from edge only:\n%+v", other.Spec.Ingress)
	}
}

// TestChartNamesWhatTheDocsCall: installed as the docs say (release
// haproxy-k8s-sync, or fullnameOverride), the chart names its Service and
// Secret as deploy/ does, so the docs' preStop example
// (http://haproxy-k8s-sync.ingress-nginx.svc, Secret haproxy-k8s-sync)
// reaches it whichever way it was installed; and its notes give the URL.
func TestChartNamesWhatTheDocsCall(t *testing.T) {
	for name, args := range map[string][]string{
		"release haproxy-k8s-sync":          {"template", "haproxy-k8s-sync", "helm/haproxy-k8s-sync", "-n", "ingress-nginx"},
		"release sync and fullnameOverride": {"template", "sync", "helm/haproxy-k8s-sync", "-n", "ingress-nginx", "--set", "fullnameOverride=haproxy-k8s-sync"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command(tool("helm"), append(args, "--set", "haproxy.runtimeURL=tcp://haproxy:9999", "--set", "replicaCount=1")...).Output()
			if err != nil {
				t.Fatal(err)
			}
			objs := byKind(t, out)
			svc := decode[corev1.Service](t, objs["Service"])
			if svc.Name != "haproxy-k8s-sync" || svc.Namespace != "ingress-nginx" || svc.Spec.Ports[0].Port != 80 {
				t.Errorf("Service %s/%s port %d, want ingress-nginx/haproxy-k8s-sync port 80", svc.Namespace, svc.Name, svc.Spec.Ports[0].Port)
			}
			if s := objs["Secret"].Metadata.Name; s != "haproxy-k8s-sync" {
				t.Errorf("Secret %q, want haproxy-k8s-sync", s)
			}
		})
	}
	if out, err := helmRefuses("--set", "fullnameOverride=Not_A_Name"); err == nil {
		t.Errorf("an invalid fullnameOverride renders:\n%.300s", out)
	}

	namespace(t, "ingress-nginx")
	out, err := exec.Command(tool("helm"), "install", "--dry-run=server", "--kubeconfig", api.kubeconfig, "-n", "ingress-nginx",
		"sync", "helm/haproxy-k8s-sync", "--set", "fullnameOverride=haproxy-k8s-sync", "--set", "haproxy.dataplaneURL=http://haproxy:5555").CombinedOutput()
	if err != nil {
		t.Fatalf("helm install --dry-run: %v\n%s", err, out)
	}
	if notes := string(out[strings.Index(string(out), "NOTES:"):]); !strings.Contains(notes, "http://haproxy-k8s-sync.ingress-nginx.svc\n") {
		t.Errorf("the notes do not give the in-cluster URL:\n%s", notes)
	}
}

// TestChartDescriptionSaysWhenItReloads: the chart's description must not
// promise "without reloads": with the Data Plane API, batches of deletions
// (HAPROXY_DELETE_BATCH), large scale-ups and backend settings reload.
func TestChartDescriptionSaysWhenItReloads(t *testing.T) {
	b, err := os.ReadFile("helm/haproxy-k8s-sync/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var chart struct{ Description string }
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	d := chart.Description
	if strings.Contains(d, "without reloads") {
		t.Errorf("the description promises no reloads: %s", d)
	}
	for _, want := range []string{"deletions", "scale-ups", "backend setting", "admin socket"} {
		if !strings.Contains(d, want) {
			t.Errorf("the description does not name %q among what reloads or avoids a reload: %s", want, d)
		}
	}
}

// TestChartTriggerRunsWithoutAuth: trigger exits 2 when it has no token,
// unless WEBHOOK_AUTH=none says the service runs without auth, so with
// webhook.auth=none the CronJob's container says so; with a token it does
// not (the token is sent).
func TestChartTriggerRunsWithoutAuth(t *testing.T) {
	trigger := func(auth string) corev1.Container {
		t.Helper()
		cron := decode[batchv1.CronJob](t, byKind(t, helm(t, "--set", "cronJob.enabled=true", "--set", "webhook.auth="+auth))["CronJob"])
		return cron.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
	}
	env := func(c corev1.Container) map[string]string {
		m := map[string]string{}
		for _, e := range c.Env {
			m[e.Name] = e.Value
		}
		return m
	}
	none := env(trigger("none"))
	if none["WEBHOOK_AUTH"] != "none" {
		t.Errorf("webhook.auth=none: the trigger's env %v lacks WEBHOOK_AUTH=none (trigger exits 2 without a token)", none)
	}
	if _, ok := none["WEBHOOK_TOKEN"]; ok {
		t.Errorf("webhook.auth=none: the trigger is given WEBHOOK_TOKEN: %v", none)
	}
	token := env(trigger("token"))
	if _, ok := token["WEBHOOK_AUTH"]; ok {
		t.Errorf("webhook.auth=token: the trigger is told WEBHOOK_AUTH: %v", token)
	}
	if _, ok := token["WEBHOOK_TOKEN"]; !ok {
		t.Errorf("webhook.auth=token: the trigger lacks WEBHOOK_TOKEN: %v", token)
	}
}

// TestChartRefusesAReadinessGateWithoutSockets: the service refuses
// POD_READINESS_GATE with HAPROXY_DATAPLANE_URL and no HAPROXY_RUNTIME_URL
// at start (only the admin socket shows checks passed), so the chart refuses
// to render it; with the sockets, or the runtime API driver alone, it renders.
func TestChartRefusesAReadinessGateWithoutSockets(t *testing.T) {
	gate := []string{"--set", "haproxy.targetAddress=pod", "--set", "readinessGate.enabled=true"}
	out, err := helmRefuses(append(gate, "--set", "haproxy.dataplaneURL=http://haproxy:5555")...)
	if err == nil || !strings.Contains(string(out), "haproxy.runtimeURL") {
		t.Errorf("a readiness gate with the Data Plane API and no runtimeURL renders (%v):\n%.300s", err, out)
	}
	for name, args := range map[string][]string{
		"Data Plane API with the sockets": {"--set", "haproxy.dataplaneURL=http://haproxy:5555", "--set", "haproxy.runtimeURL=tcp://haproxy:9999"},
		"runtime API alone":               {"--set", "haproxy.dataplaneURL=", "--set", "haproxy.runtimeURL=tcp://haproxy:9999", "--set", "replicaCount=1"},
	} {
		t.Run(name, func(t *testing.T) {
			if c := renderedConfig(t, append(gate, args...)...); c["POD_READINESS_GATE"] != "true" {
				t.Errorf("POD_READINESS_GATE %q, want true", c["POD_READINESS_GATE"])
			}
		})
	}
}

// TestChartRendersOnlyTheURLsGiven: a URL the user did not give is never
// rendered (the runtime API driver alone must not be sent to a placeholder
// Data Plane API), the recommended pair renders both in order, and with
// neither the chart refuses, naming both values.
func TestChartRendersOnlyTheURLsGiven(t *testing.T) {
	for name, tt := range map[string]struct {
		args              []string
		dataplane, socket string
	}{
		"runtime API alone": {[]string{"--set", "haproxy.runtimeURL=unix:///run/haproxy/admin.sock", "--set", "replicaCount=1"}, "", "unix:///run/haproxy/admin.sock"},
		"the recommended pair": {[]string{"--set", `haproxy.dataplaneURL=http://haproxy-a:5555\,http://haproxy-b:5555`, "--set", `haproxy.runtimeURL=tcp://haproxy-a:9999\,tcp://haproxy-b:9999`},
			"http://haproxy-a:5555,http://haproxy-b:5555", "tcp://haproxy-a:9999,tcp://haproxy-b:9999"},
		"Data Plane API alone": {[]string{"--set", "haproxy.dataplaneURL=http://haproxy-a:5555"}, "http://haproxy-a:5555", ""},
	} {
		t.Run(name, func(t *testing.T) {
			c := renderedConfig(t, tt.args...)
			if c["HAPROXY_DATAPLANE_URL"] != tt.dataplane || c["HAPROXY_RUNTIME_URL"] != tt.socket {
				t.Errorf("HAPROXY_DATAPLANE_URL %q, HAPROXY_RUNTIME_URL %q; want %q, %q", c["HAPROXY_DATAPLANE_URL"], c["HAPROXY_RUNTIME_URL"], tt.dataplane, tt.socket)
			}
		})
	}
	out, err := helmRefuses("--set", "haproxy.dataplaneURL=", "--set", "haproxy.runtimeURL=")
	if err == nil || !strings.Contains(string(out), "haproxy.dataplaneURL") || !strings.Contains(string(out), "haproxy.runtimeURL") {
		t.Errorf("the chart renders with no HAProxy URL (%v):\n%.300s", err, out)
	}
}

// TestChartRefusesThePlaceholderImage: the chart's default image is where the
// release workflow publishes it (.github/workflows/release.yml pushes the
// same repository), tagged with the chart's appVersion. A placeholder — a
// host of the reserved example domains, as the docs' examples write — or
// none installs into ImagePullBackOff: the chart refuses to render it, naming
// the value to set (its schema refuses an empty one), and renders the image
// once one is set.
func TestChartRefusesThePlaceholderImage(t *testing.T) {
	v := releaseVersion(t)
	const published = "ghcr.io/haproxy-k8s-sync/haproxy-k8s-sync"
	out, err := exec.Command(tool("helm"), "template", "rel", "helm/haproxy-k8s-sync", "--set", "haproxy.dataplaneURL=http://haproxy-a:5555").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "image: "+published+":"+v+"\n") {
		t.Errorf("the shipped values do not render %s:%s (%v):\n%.500s", published, v, err, out)
	}
	// The workflow pushes to ghcr.io/OWNER/REPO: the repository the chart's
	// home names.
	var chart struct{ Home string }
	readYAML(t, "helm/haproxy-k8s-sync/Chart.yaml", &chart)
	if !strings.Contains(readDoc(t, ".github/workflows/release.yml"), "IMAGE: ghcr.io/${{ github.repository }}\n") ||
		chart.Home != "https://github.com/"+strings.TrimPrefix(published, "ghcr.io/") ||
		!strings.Contains(readDoc(t, "Makefile"), "IMAGE_REPOSITORY ?= "+published+"\n") {
		t.Errorf("the release workflow (IMAGE), the chart's home (%s) or the Makefile (IMAGE_REPOSITORY) do not say %s, the chart's default", chart.Home, published)
	}
	for name, set := range map[string][]string{
		"placeholder":             {"--set", "image.repository=registry.example/haproxy-k8s-sync"},
		"the docs' example":       {"--set", "image.repository=registry.example.com/haproxy-k8s-sync"},
		"example.org with a port": {"--set", "image.repository=example.org:5000/team/haproxy-k8s-sync"},
		"none":                    {"--set", "image.repository=null"},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"template", "rel", "helm/haproxy-k8s-sync", "--set", "haproxy.dataplaneURL=http://haproxy-a:5555"}, set...)
			out, err := exec.Command(tool("helm"), args...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "set image.repository") {
				t.Errorf("rendered (%v):\n%.300s", err, out)
			}
		})
	}
	for _, repo := range []string{"registry.internal/team/haproxy-k8s-sync", "myexample.com/haproxy-k8s-sync"} {
		if out := string(helm(t, "--set", "image.repository="+repo)); !strings.Contains(out, "image: "+repo+":"+v) {
			t.Errorf("the image set, %s, is not rendered:\n%.500s", repo, out)
		}
	}
}
