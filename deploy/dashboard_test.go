package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

const dashboardFile = "helm/haproxy-k8s-sync/files/dashboard.json"

// scrapeLabels are the labels Prometheus gives every series it scrapes
// (the Prometheus Operator's ServiceMonitor and PodMonitor add namespace
// and pod): a query may select on them whatever the metric.
var scrapeLabels = setOf("job", "instance", "namespace", "pod", "service", "container", "endpoint")

// metricFamily is one family the service exports: its type and labels.
type metricFamily struct {
	typ    dto.MetricType
	labels map[string]bool
}

// describing records the name of every collector registered, so that a
// family the test forgot to give a sample is named rather than missed.
type describing struct {
	prometheus.Registerer
	names []string
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d.names = append(d.names, m[1])
		}
	}
	return d.Registerer.Register(c)
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

// fakeRunner answers one result, as the reconciler would.
type fakeRunner reconcile.Result

func (f fakeRunner) Reconcile(context.Context, bool) (reconcile.Result, error) {
	return reconcile.Result(f), nil
}

// fakeDriver reads an empty backend and applies one runtime write the API
// reloaded for.
type fakeDriver struct{}

func (fakeDriver) Name() string        { return "http://haproxy-a:5555" }
func (fakeDriver) Policy() plan.Policy { return plan.Policy{} }
func (fakeDriver) Read(context.Context, string) (model.Backend, error) {
	return model.Backend{}, nil
}
func (fakeDriver) Apply(context.Context, plan.Plan) (plan.Applied, error) {
	return plan.Applied{Writes: 1, ByKind: map[plan.WriteKind]int{plan.RuntimeWrite: 1}, UnexpectedReloads: 1}, nil
}

type fakeSource struct{}

func (fakeSource) Read(context.Context) (desired.Input, error) { return desired.Input{}, nil }

// exportedFamilies registers the service's metrics as serve does (its own,
// Go's and the process'), gives every one of its vectors a sample through
// the calls the service makes, and returns what the registry gathers, by
// name. A family of the service that gathers nothing fails the test: add
// the call that sets it here.
func exportedFamilies(t *testing.T) map[string]metricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec := &describing{Registerer: reg}
	rec.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(rec, "test", "unknown")

	ctx := context.Background()
	m.Cluster("blue", "zone-a")
	m.WatchEvent("EndpointSlice", "MODIFIED", true)
	m.WatchRestart("EndpointSlice")
	m.Poke("reload", true)
	m.Transition(reconcile.Transition{Target: "a", Backend: "be", Server: "s", From: "absent", To: reconcile.Gated, Reason: "awaiting-check"})
	m.Programmed(reconcile.Programmed{Target: "a", Stage: reconcile.StageApplied, Latency: time.Second})
	m.Programmed(reconcile.Programmed{Target: "a", Stage: reconcile.StageInService, Latency: time.Second})
	m.Programmed(reconcile.Programmed{Target: "a", Stage: reconcile.StageApplied, Unmeasured: reconcile.Unstamped})
	m.ServiceEvent("create")
	m.PodGate("get")
	m.AuthFailure("missing")
	m.Mismatched("a", false)
	m.Alarm("unreachable", "a", true)
	m.Ignored()
	m.Selected(2, 1)
	if _, err := m.WrapSource(fakeSource{}).Read(ctx); err != nil {
		t.Fatal(err)
	}
	d := m.WrapDriver(fakeDriver{})
	if _, err := d.Read(ctx, "be"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Apply(ctx, plan.Plan{}); err != nil {
		t.Fatal(err)
	}
	res := reconcile.Result{Status: reconcile.StatusApplied, SkippedByReason: map[string]int{"invalid-address": 1},
		Targets: []reconcile.TargetResult{{Target: "a", Backend: "be", Attempts: 2, Reload: true,
			Servers: map[string]int{"ready": 1}, Guarded: []string{"s"}, Slots: map[string]int{"filled": 1},
			HealthPortTCP: []string{"s"}, LinesRead: true, Zones: map[string]reconcile.ZoneCount{"zone-a": {Servers: 1, Ready: 1}}}}}
	if _, err := m.WrapReconciler(fakeRunner(res)).Reconcile(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := m.WrapReconciler(fakeRunner(reconcile.Result{Status: reconcile.StatusPlanned})).Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]metricFamily{}
	for _, mf := range mfs {
		f := metricFamily{typ: mf.GetType(), labels: map[string]bool{}}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				f.labels[l.GetName()] = true
			}
		}
		out[mf.GetName()] = f
	}
	for _, n := range rec.names {
		if _, ok := out[n]; !ok && strings.HasPrefix(n, "haproxy_k8s_sync_") {
			t.Errorf("%s is registered but exportedFamilies gives it no sample", n)
		}
	}
	return out
}

// dashboardQuery is one PromQL query of the dashboard and where it is.
type dashboardQuery struct {
	where, expr, legend string
}

// dashboardQueries reads the dashboard's panels (rows' nested ones too)
// and returns every target's query, and the dashboard's variables.
func dashboardQueries(t *testing.T, raw []byte) (queries []dashboardQuery, variables []map[string]any) {
	t.Helper()
	type panel struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
			RefID        string `json:"refId"`
		} `json:"targets"`
		Datasource map[string]string `json:"datasource"`
		Panels     []json.RawMessage `json:"panels"`
	}
	var d struct {
		UID        string            `json:"uid"`
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []map[string]any `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" {
		t.Error("the dashboard has no uid: Grafana would make a new one at each load")
	}
	ids := map[int]bool{}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, r := range ps {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: %v", dashboardFile, err)
			}
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("panel %q: id %d is not unique", p.Title, p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Title == "" || len(p.Targets) == 0 {
				t.Errorf("panel %d: no title or no query", p.ID)
			}
			if p.Datasource["uid"] != "${datasource}" {
				t.Errorf("panel %q: data source %v, want the ${datasource} variable", p.Title, p.Datasource)
			}
			for _, tg := range p.Targets {
				queries = append(queries, dashboardQuery{where: p.Title + "/" + tg.RefID, expr: tg.Expr, legend: tg.LegendFormat})
			}
		}
	}
	walk(d.Panels)
	return queries, d.Templating.List
}

// grafanaIntervals are Grafana's interval variables, which stand for a
// duration in a range.
var grafanaIntervals = strings.NewReplacer("$__rate_interval", "5m", "${__rate_interval}", "5m", "$__interval", "1m", "$__range", "1h")

var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// checkQuery says what is wrong with one query against the families the
// service exports: not PromQL, a metric the service does not export, a
// label its selector, grouping or legend names that its metrics lack.
func checkQuery(families map[string]metricFamily, expr, legend string) []string {
	refs, err := readPromQL(grafanaIntervals.Replace(expr))
	if err != nil {
		return []string{"not PromQL: " + err.Error()}
	}
	if len(refs.Selectors) == 0 {
		return []string{"reads no metric"}
	}
	var problems []string
	has := map[string]bool{"__name__": true}
	for l := range scrapeLabels {
		has[l] = true
	}
	for _, s := range refs.Selectors {
		f, ok := families[s.Metric]
		bucket := false
		if !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, cut := strings.CutSuffix(s.Metric, suffix); cut && families[base].typ == dto.MetricType_HISTOGRAM && families[base].labels != nil {
					f, ok, bucket = families[base], true, suffix == "_bucket"
				}
			}
		}
		if !ok {
			problems = append(problems, s.Metric+" is not exported")
			continue
		}
		for l := range f.labels {
			has[l] = true
		}
		if bucket {
			has["le"] = true
		}
		for _, l := range s.Labels {
			if !f.labels[l] && !scrapeLabels[l] && !(bucket && l == "le") {
				problems = append(problems, fmt.Sprintf("%s has no label %s", s.Metric, l))
			}
		}
	}
	for _, l := range refs.Grouping {
		if !has[l] {
			problems = append(problems, "grouped by "+l+", which none of its metrics has")
		}
	}
	for _, m := range legendLabel.FindAllStringSubmatch(legend, -1) {
		if !has[m[1]] {
			problems = append(problems, "legend names "+m[1]+", which none of its metrics has")
		}
	}
	return problems
}

// TestReadPromQL: what the dashboard check reads of a query, and the
// mistakes it refuses. Prometheus v0.316.0's parser reads the first nine
// alike and refuses the others but three, which a panel's query must not
// be anyway: a range vector alone (a panel plots instant vectors), the @
// modifier (not read here), a selector without a metric name.
func TestReadPromQL(t *testing.T) {
	for _, c := range []struct {
		expr     string
		want     string // selectors then grouping, or the error's start
		failPart string
	}{
		{`up`, `[{up []}] []`, ""},
		{`sum by (target, le) (rate(x_bucket{namespace=~"$ns",target=~"a|b"}[5m]))`, `[{x_bucket [namespace target]}] [target le]`, ""},
		{`histogram_quantile(0.99, sum(rate(x_bucket[5m])) by (le))`, `[{x_bucket []}] [le]`, ""},
		{`count(max by (kind) (a{k="v"}) == 1) or vector(0)`, `[{a [k]}] [kind]`, ""},
		{`time() - max(b)`, `[{b []}] []`, ""},
		{`a / on (target) group_left b`, `[{a []} {b []}] [target]`, ""},
		{`{__name__="c", x!="y"}`, `[{c [x]}] []`, ""},
		{`max_over_time(rate(d[5m])[1h:1m])`, `[{d []}] []`, ""},
		{`e offset 5m`, `[{e []}] []`, ""},
		{`rate(x)`, "", "rate without a range"},
		{`sum(x[5m])`, "", "range vector [5m] where an instant vector goes"},
		{`x[5m]`, "", "range vector"},
		{`rate(x[5 m])`, "", "bad range"},
		{`sum(rate(x[5m])`, "", "unbalanced ("},
		{`sum(x))`, "", "unbalanced )"},
		{`x{a="b"`, "", "x: unbalanced {"},
		{`x{a=b}`, "", "x: matcher is not"},
		{`x{a=="b"}`, "", "x: matcher operator"},
		{`x{a="b" c="d"}`, "", "x: matchers not separated"},
		{`summ(x)`, "", "unknown function summ"},
		{`sum by target (x)`, "", "by without its label list"},
		{`x{a="b}`, "", "unterminated string"},
		{`x @ 100`, "", "unexpected"},
		{`{x="y"}`, "", "a selector without a metric name"},
	} {
		t.Run(c.expr, func(t *testing.T) {
			refs, err := readPromQL(c.expr)
			switch {
			case c.failPart != "" && (err == nil || !strings.HasPrefix(err.Error(), c.failPart)):
				t.Errorf("error %v, want %q", err, c.failPart)
			case c.failPart == "" && err != nil:
				t.Errorf("error %v", err)
			case c.failPart == "" && fmt.Sprint(refs.Selectors, " ", refs.Grouping) != c.want:
				t.Errorf("read %v %v, want %s", refs.Selectors, refs.Grouping, c.want)
			}
		})
	}
}

// TestCheckQuery: a query is held to the families the service exports.
func TestCheckQuery(t *testing.T) {
	families := map[string]metricFamily{
		"h": {dto.MetricType_HISTOGRAM, setOf("target")},
		"g": {dto.MetricType_GAUGE, setOf("target", "state")},
		"c": {dto.MetricType_COUNTER, setOf("result")},
	}
	for _, c := range []struct {
		expr, legend, want string
	}{
		{`histogram_quantile(0.9, sum by (target, le) (rate(h_bucket{namespace=~"$namespace",target=~"$target"}[$__rate_interval])))`, "{{target}}", "[]"},
		{`sum by (state) (g{pod!=""})`, "{{state}}", "[]"},
		{`h_count`, "", "[]"},
		{`g_bucket`, "", "[g_bucket is not exported]"},
		{`rate(missing[5m])`, "", "[missing is not exported]"},
		{`g{why="x"}`, "", "[g has no label why]"},
		{`h_sum{le="1"}`, "", "[h_sum has no label le]"},
		{`sum by (why) (g)`, "", "[grouped by why, which none of its metrics has]"},
		{`sum by (state) (g)`, "{{ reason }}", "[legend names reason, which none of its metrics has]"},
		{`vector(1)`, "", "[reads no metric]"},
		{`rate(c)`, "", "[not PromQL: rate without a range]"},
	} {
		if got := fmt.Sprint(checkQuery(families, c.expr, c.legend)); got != c.want {
			t.Errorf("checkQuery(%s, %q) = %s, want %s", c.expr, c.legend, got, c.want)
		}
	}
}

// TestDashboardQueriesUseExportedMetrics: every query of the chart's
// Grafana dashboard is PromQL, reads metrics the service exports (gathered
// from its registry) with labels they carry, and the dashboard shows what
// issue 56 asked of it; its variables' queries read exported metrics too.
func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	families := exportedFamilies(t)
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	queries, variables := dashboardQueries(t, raw)
	used := map[string]bool{}
	for _, q := range queries {
		for _, p := range checkQuery(families, q.expr, q.legend) {
			t.Errorf("%s: %s\n\t%s", q.where, p, q.expr)
		}
		if refs, err := readPromQL(grafanaIntervals.Replace(q.expr)); err == nil {
			for _, s := range refs.Selectors {
				used[s.Metric] = true
			}
		}
	}
	for _, want := range []string{
		"haproxy_k8s_sync_network_in_service_duration_seconds_bucket", // entry latency
		"haproxy_k8s_sync_servers",                                    // servers by state
		"haproxy_k8s_sync_haproxy_calls_total",                        // failures per target
		"haproxy_k8s_sync_haproxy_reloads_total",                      // reloads
		"haproxy_k8s_sync_deletion_guard_holds_total",                 // the guard
		"haproxy_k8s_sync_servers_held",                               // guarded, capped
		"haproxy_k8s_sync_alarms",                                     // refused backends, what stays wrong
	} {
		if !used[want] {
			t.Errorf("no panel reads %s", want)
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	for _, v := range variables {
		if v["type"] != "query" {
			continue
		}
		q, _ := v["definition"].(string)
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %v: query %q is not label_values(selector, label)", v["name"], q)
			continue
		}
		for _, p := range checkQuery(families, m[1], "{{"+m[2]+"}}") {
			t.Errorf("variable %v: %s", v["name"], p)
		}
	}
	if len(queries) < 10 {
		t.Errorf("read %d queries from %s: is the dashboard read right?", len(queries), dashboardFile)
	}
}

// TestChartRendersTheDashboard: dashboard.enabled renders a ConfigMap that
// Grafana's sidecar picks up by its label, holding the dashboard file as
// it is; without it, none.
func TestChartRendersTheDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	out := helm(t, "--set", "dashboard.enabled=true", "--set", "dashboard.namespace=monitoring",
		"--set", "dashboard.annotations.grafana_folder=HAProxy")
	var cms []map[string]string
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var o struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name        string            `json:"name"`
				Namespace   string            `json:"namespace"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		if o.Kind != "ConfigMap" || o.Metadata.Labels["grafana_dashboard"] == "" {
			continue
		}
		if o.Metadata.Name != "rel-haproxy-k8s-sync-dashboard" || o.Metadata.Namespace != "monitoring" ||
			o.Metadata.Labels["grafana_dashboard"] != "1" || o.Metadata.Annotations["grafana_folder"] != "HAProxy" {
			t.Errorf("dashboard ConfigMap %+v", o.Metadata)
		}
		var got, want any
		if err := json.Unmarshal([]byte(o.Data["haproxy-k8s-sync.json"]), &got); err != nil {
			t.Fatalf("the ConfigMap's dashboard: %v", err)
		}
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		if !jsonEqual(got, want) {
			t.Error("the ConfigMap's dashboard differs from " + dashboardFile)
		}
		cms = append(cms, o.Data)
	}
	if len(cms) != 1 {
		t.Errorf("%d dashboard ConfigMaps rendered, want 1", len(cms))
	}
	if def := string(helm(t)); strings.Contains(def, "grafana_dashboard") {
		t.Error("the default render has the dashboard")
	}
	if out, err := helmRefuses("--set", "dashboard.enabled=true", "--set", "dashboard.labels.grafana_dashboard=1"); err == nil {
		t.Errorf("a label value that is not a string rendered:\n%.300s", out)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return slices.Equal(x, y)
}

// TestAlertsUseExportedMetrics: every alert of the chart's PrometheusRule
// reads metrics the service exports, with labels they carry, and the
// many-Services mode has its own (refused Services), beside the instance's
// NoSuccess and Failing, which both modes keep.
func TestAlertsUseExportedMetrics(t *testing.T) {
	families := exportedFamilies(t)
	out := helm(t, "--set", "prometheusRule.enabled=true")
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		if strings.Contains(doc, "kind: PrometheusRule") {
			if err := yaml.Unmarshal([]byte(doc), &rule); err != nil {
				t.Fatal(err)
			}
		}
	}
	alerts := map[string]bool{}
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			for _, p := range checkQuery(families, r.Expr, "") {
				t.Errorf("%s: %s\n\t%s", r.Alert, p, r.Expr)
			}
		}
	}
	for _, want := range []string{"HAProxyK8sSyncNoSuccess", "HAProxyK8sSyncFailing", "HAProxyK8sSyncServicesRefused"} {
		if !alerts[want] {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}
}
