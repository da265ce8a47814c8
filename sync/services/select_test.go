package services

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const class = "haproxy-k8s-sync.io/haproxy"

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func annotated(ns, name, value string, ports ...corev1.ServicePort) corev1.Service {
	return corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{Annotation: value}},
		Spec:       corev1.ServiceSpec{Ports: ports},
	}
}

func lb(ns, name string, cls *string, age int, ports ...corev1.ServicePort) corev1.Service {
	return corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Minute))},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: cls, Ports: ports},
	}
}

func port(name string, n int32) corev1.ServicePort { return corev1.ServicePort{Name: name, Port: n} }

func udp(name string, n int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: n, Protocol: corev1.ProtocolUDP}
}

func ptr(s string) *string { return &s }

func TestSelect(t *testing.T) {
	both := Selection{Annotation: true, Class: true, ClassName: class, AllowedBackends: []string{"be_*"}}
	tests := []struct {
		name    string
		sel     Selection
		svcs    []corev1.Service
		chosen  []Selected
		refused []Refused // Reason compared by substring
	}{
		{"annotation, PORT=BACKEND by name and number", both,
			[]corev1.Service{annotated("a", "web", "https=be_https, 80=be_http", port("http", 80), port("https", 443))},
			[]Selected{{Namespace: "a", Name: "web", Ports: []Port{{"http", 80, "be_http"}, {"https", 443, "be_https"}}}}, nil},
		{"annotation, one backend for a single-port Service", both,
			[]corev1.Service{annotated("a", "web", "be_web", port("", 8080))},
			[]Selected{{Namespace: "a", Name: "web", Ports: []Port{{"", 8080, "be_web"}}}}, nil},
		{"annotation, one backend for a multi-port Service is ambiguous", both,
			[]corev1.Service{annotated("a", "web", "be_web", port("http", 80), port("https", 443))},
			nil, []Refused{{Service: "a/web", Reason: "names one backend but the Service has 2 ports"}}},
		{"annotation, a port the Service lacks", both,
			[]corev1.Service{annotated("a", "web", "grpc=be_grpc", port("http", 80))},
			nil, []Refused{{Service: "a/web", Reason: `has no port "grpc"`}}},
		{"annotation, a backend ANNOTATION_BACKENDS does not allow", both,
			[]corev1.Service{annotated("a", "web", "stats", port("", 80))},
			nil, []Refused{{Service: "a/web", Reason: "not allowed by ANNOTATION_BACKENDS"}}},
		{"annotation, a class Service's backend name", both,
			[]corev1.Service{annotated("a", "web", "be_k8s_b_db_5432", port("", 80))},
			nil, []Refused{{Service: "a/web", Reason: "class Service's name"}}},
		{"a backend named by two Services, none holding it: same age, the key decides", both,
			[]corev1.Service{annotated("a", "one", "be_x", port("", 80)), annotated("b", "two", "http=be_x", port("http", 80)), annotated("c", "three", "be_y", port("", 80))},
			[]Selected{{Namespace: "a", Name: "one", Ports: []Port{{"", 80, "be_x"}}}, {Namespace: "c", Name: "three", Ports: []Port{{"", 80, "be_y"}}}},
			[]Refused{{Service: "b/two", Holder: "a/one", Reason: "backend be_x is held by a/one"}}},
		{"class: matching, other and nil loadBalancerClass", both,
			[]corev1.Service{lb("a", "mine", ptr(class), 0, port("http", 80)), lb("a", "metallb", ptr("metallb.io/x"), 0, port("http", 81)), lb("a", "cloud", nil, 0, port("http", 82))},
			[]Selected{{Namespace: "a", Name: "mine", Class: true, Ports: []Port{{"http", 80, "be_k8s_a_mine_80"}}}}, nil},
		{"class with CLUSTER_NAME", Selection{Class: true, ClassName: class, Cluster: "eu1"},
			[]corev1.Service{lb("a", "mine", ptr(class), 0, port("", 443))},
			[]Selected{{Namespace: "a", Name: "mine", Class: true, Ports: []Port{{"", 443, "be_k8s_eu1_a_mine_443"}}}}, nil},
		{"class selection ignores type ClusterIP", both,
			func() []corev1.Service {
				s := lb("a", "internal", ptr(class), 0, port("http", 80))
				s.Spec.Type = corev1.ServiceTypeClusterIP
				return []corev1.Service{s}
			}(), nil, nil},
		{"class off: a class Service is not selected", Selection{Annotation: true, AllowedBackends: []string{"*"}},
			[]corev1.Service{lb("a", "mine", ptr(class), 0, port("http", 80))}, nil, nil},
		{"class: a UDP port is refused, the TCP port served", both,
			[]corev1.Service{lb("a", "dns", ptr(class), 0, udp("dns", 53), port("dns-tcp", 53))},
			[]Selected{{Namespace: "a", Name: "dns", Class: true, Ports: []Port{{"dns-tcp", 53, "be_k8s_a_dns_53"}}}},
			[]Refused{{Service: "a/dns", Reason: "port 53/UDP: HAProxy fronts TCP only"}}},
		{"class: only UDP ports: refused", both,
			[]corev1.Service{lb("a", "dns", ptr(class), 0, udp("dns", 53))},
			nil, []Refused{{Service: "a/dns", Reason: "port 53/UDP"}}},
		{"class: two Services on one port, the later is refused naming the holder", both,
			[]corev1.Service{lb("b", "late", ptr(class), 5, port("http", 80)), lb("a", "early", ptr(class), 1, port("http", 80), port("https", 443)), lb("c", "other", ptr(class), 9, port("x", 8443))},
			[]Selected{
				{Namespace: "a", Name: "early", Class: true, Ports: []Port{{"http", 80, "be_k8s_a_early_80"}, {"https", 443, "be_k8s_a_early_443"}}},
				{Namespace: "c", Name: "other", Class: true, Ports: []Port{{"x", 8443, "be_k8s_c_other_8443"}}}},
			[]Refused{{Service: "b/late", Holder: "a/early", Reason: "port 80 of the load balancer address is held by a/early"}}},
		{"class: same age, the key decides", both,
			[]corev1.Service{lb("b", "x", ptr(class), 0, port("http", 80)), lb("a", "x", ptr(class), 0, port("http", 80))},
			[]Selected{{Namespace: "a", Name: "x", Class: true, Ports: []Port{{"http", 80, "be_k8s_a_x_80"}}}},
			[]Refused{{Service: "b/x", Holder: "a/x", Reason: "held by a/x"}}},
		{"a namespace outside WATCH_NAMESPACES is not looked at", Selection{Annotation: true, AllowedBackends: []string{"*"}, Namespaces: []string{"apps"}},
			[]corev1.Service{annotated("other", "web", "be_web", port("", 80)), annotated("apps", "web", "be_apps", port("", 80))},
			[]Selected{{Namespace: "apps", Name: "web", Ports: []Port{{"", 80, "be_apps"}}}}, nil},
		{"annotated and of the class: the class wins", both,
			func() []corev1.Service {
				s := lb("a", "both", ptr(class), 0, port("http", 80))
				s.Annotations = map[string]string{Annotation: "be_shared"}
				return []corev1.Service{s}
			}(),
			[]Selected{{Namespace: "a", Name: "both", Class: true, Ports: []Port{{"http", 80, "be_k8s_a_both_80"}}}}, nil},
		{"garbage: empty", both, []corev1.Service{annotated("a", "web", "  ", port("", 80))}, nil,
			[]Refused{{Service: "a/web", Reason: "is empty"}}},
		{"garbage: =", both, []corev1.Service{annotated("a", "web", "=", port("", 80))}, nil,
			[]Refused{{Service: "a/web", Reason: "is not PORT=BACKEND"}}},
		{"garbage: a port twice", both, []corev1.Service{annotated("a", "web", "http=be_a,80=be_b", port("http", 80))}, nil,
			[]Refused{{Service: "a/web", Reason: "port 80 is named twice"}}},
		{"garbage: a backend twice", both, []corev1.Service{annotated("a", "web", "http=be_a,https=be_a", port("http", 80), port("https", 443))}, nil,
			[]Refused{{Service: "a/web", Reason: "backend be_a is named twice"}}},
		{"garbage: a list without =", both, []corev1.Service{annotated("a", "web", "be_a,be_b", port("", 80))}, nil,
			[]Refused{{Service: "a/web", Reason: "is not a backend name"}}},
		{"garbage: too long", both, []corev1.Service{annotated("a", "web", "be_"+strings.Repeat("x", 2000), port("", 80))}, nil,
			[]Refused{{Service: "a/web", Reason: "longer than 1024"}}},
		{"annotation off: an annotated Service is not selected", Selection{Class: true, ClassName: class},
			[]corev1.Service{annotated("a", "web", "be_web", port("", 80))}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chosen, refused := Select(tt.svcs, tt.sel, nil)
			if !reflect.DeepEqual(chosen, tt.chosen) {
				t.Errorf("chosen:\n got %+v\nwant %+v", chosen, tt.chosen)
			}
			if len(refused) != len(tt.refused) {
				t.Fatalf("refused: got %+v, want %+v", refused, tt.refused)
			}
			for i, r := range refused {
				w := tt.refused[i]
				if r.Service != w.Service || r.Holder != w.Holder || !strings.Contains(r.Reason, w.Reason) {
					t.Errorf("refused[%d] = %+v, want %+v", i, r, w)
				}
			}
		})
	}
}

// Select is pure and its answer does not depend on the list's order.
func TestSelectOrderDoesNotMatter(t *testing.T) {
	sel := Selection{Annotation: true, Class: true, ClassName: class, AllowedBackends: []string{"be_*"}}
	svcs := []corev1.Service{
		lb("b", "late", ptr(class), 5, port("http", 80)), lb("a", "early", ptr(class), 1, port("http", 80)),
		annotated("a", "one", "be_x", port("", 80)), annotated("b", "two", "be_x", port("", 80)), annotated("c", "z", "be_z", port("", 80)),
	}
	c1, r1 := Select(svcs, sel, nil)
	rev := make([]corev1.Service, len(svcs))
	for i := range svcs {
		rev[len(svcs)-1-i] = svcs[i]
	}
	c2, r2 := Select(rev, sel, nil)
	if !reflect.DeepEqual(c1, c2) || !reflect.DeepEqual(r1, r2) {
		t.Fatalf("order changed the answer:\n%+v %+v\n%+v %+v", c1, r1, c2, r2)
	}
}

func aged(s corev1.Service, age int) corev1.Service {
	s.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(age) * time.Minute))
	return s
}

func served(s corev1.Service) corev1.Service {
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	return s
}

// TestSelectHolderKeeps (issue 54 rows 5 and 2): what a Service serves stays
// with it; a later claimant is refused naming it, even when older; age
// breaks ties only between claimants that hold nothing yet.
func TestSelectHolderKeeps(t *testing.T) {
	both := Selection{Annotation: true, Class: true, ClassName: class, AllowedBackends: []string{"be_*"}}
	web := func(age int) corev1.Service { return aged(annotated("apps", "web", "be_a", port("", 80)), age) }
	thief := func(age int) corev1.Service { return aged(annotated("other", "thief", "be_a", port("", 80)), age) }
	webSel := Selected{Namespace: "apps", Name: "web", Ports: []Port{{"", 80, "be_a"}}}
	thiefSel := Selected{Namespace: "other", Name: "thief", Ports: []Port{{"", 80, "be_a"}}}
	live := func(age int) corev1.Service { return lb("apps", "live", ptr(class), age, port("http", 80)) }
	old := func(age int) corev1.Service { return lb("apps", "old", ptr(class), age, port("http", 80)) }
	liveSel := Selected{Namespace: "apps", Name: "live", Class: true, Ports: []Port{{"http", 80, "be_k8s_apps_live_80"}}}
	oldSel := Selected{Namespace: "apps", Name: "old", Class: true, Ports: []Port{{"http", 80, "be_k8s_apps_old_80"}}}
	tests := []struct {
		name    string
		svcs    []corev1.Service
		held    map[string]string
		chosen  []Selected
		refused []Refused
	}{
		{name: "the holder keeps its backend against an older claimant",
			svcs: []corev1.Service{web(5), thief(1)}, held: map[string]string{"backend be_a": "apps/web"},
			chosen: []Selected{webSel}, refused: []Refused{{Service: "other/thief", Holder: "apps/web", Reason: "backend be_a is held by apps/web"}}},
		{name: "the holder keeps its backend against a newer claimant",
			svcs: []corev1.Service{web(1), thief(5)}, held: map[string]string{"backend be_a": "apps/web"},
			chosen: []Selected{webSel}, refused: []Refused{{Service: "other/thief", Holder: "apps/web", Reason: "held by apps/web"}}},
		{name: "nothing held: the oldest claimant",
			svcs:   []corev1.Service{web(5), thief(1)},
			chosen: []Selected{thiefSel}, refused: []Refused{{Service: "apps/web", Holder: "other/thief", Reason: "held by other/thief"}}},
		{name: "the holder stopped naming it: free for the claimant",
			svcs: []corev1.Service{aged(annotated("apps", "web", "be_b", port("", 80)), 1), thief(5)}, held: map[string]string{"backend be_a": "apps/web"},
			chosen: []Selected{{Namespace: "apps", Name: "web", Ports: []Port{{"", 80, "be_b"}}}, thiefSel}},
		{name: "held by a Service that is gone: the oldest claimant",
			svcs: []corev1.Service{web(5), thief(1)}, held: map[string]string{"backend be_a": "apps/deleted"},
			chosen: []Selected{thiefSel}, refused: []Refused{{Service: "apps/web", Holder: "other/thief", Reason: "held by other/thief"}}},
		{name: "a holder claiming another's backend too is refused, and the other keeps it",
			svcs:   []corev1.Service{aged(annotated("apps", "web", "http=be_a,https=be_b", port("http", 80), port("https", 443)), 1), aged(annotated("apps", "b", "be_b", port("", 80)), 5)},
			held:   map[string]string{"backend be_a": "apps/web", "backend be_b": "apps/b"},
			chosen: []Selected{{Namespace: "apps", Name: "b", Ports: []Port{{"", 80, "be_b"}}}}, refused: []Refused{{Service: "apps/web", Holder: "apps/b", Reason: "backend be_b is held by apps/b"}}},
		{name: "class: an older Service edited into the class does not take a served port (held)",
			svcs: []corev1.Service{live(5), old(1)}, held: map[string]string{"port 80": "apps/live"},
			chosen: []Selected{liveSel}, refused: []Refused{{Service: "apps/old", Holder: "apps/live", Reason: "port 80 of the load balancer address is held by apps/live"}}},
		{name: "class: a written status holds against an older claimant (a replica that just started)",
			svcs:   []corev1.Service{served(live(5)), old(1)},
			chosen: []Selected{liveSel}, refused: []Refused{{Service: "apps/old", Holder: "apps/live", Reason: "held by apps/live"}}},
		{name: "class: the held port beats a status that does not say which ports",
			svcs: []corev1.Service{served(live(5)), served(old(1))}, held: map[string]string{"port 80": "apps/live"},
			chosen: []Selected{liveSel}, refused: []Refused{{Service: "apps/old", Holder: "apps/live", Reason: "held by apps/live"}}},
		{name: "class: nothing held, the oldest",
			svcs:   []corev1.Service{live(5), old(1)},
			chosen: []Selected{oldSel}, refused: []Refused{{Service: "apps/live", Holder: "apps/old", Reason: "held by apps/old"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chosen, refused := Select(tt.svcs, both, tt.held)
			if !reflect.DeepEqual(chosen, tt.chosen) {
				t.Errorf("chosen:\n got %+v\nwant %+v", chosen, tt.chosen)
			}
			if len(refused) != len(tt.refused) {
				t.Fatalf("refused: got %+v, want %+v", refused, tt.refused)
			}
			for i, r := range refused {
				w := tt.refused[i]
				if r.Service != w.Service || r.Holder != w.Holder || !strings.Contains(r.Reason, w.Reason) {
					t.Errorf("refused[%d] = %+v, want %+v", i, r, w)
				}
			}
			// What the holders keep goes on: a second selection given
			// these holdings answers the same.
			again, _ := Select(tt.svcs, both, Holdings(chosen))
			if !reflect.DeepEqual(again, chosen) {
				t.Errorf("the next selection moved a resource: %+v, then %+v", chosen, again)
			}
		})
	}
}

func TestAward(t *testing.T) {
	c := func(svc string, age int, h Hold) Claim {
		return Claim{Resource: "backend be_a", Service: svc, Created: t0.Add(time.Duration(age) * time.Minute), Hold: h}
	}
	tests := []struct {
		name   string
		claims []Claim
		want   string
	}{
		{"alone", []Claim{c("a/x", 3, HoldsNothing)}, "a/x"},
		{"the oldest of those holding nothing", []Claim{c("a/new", 3, HoldsNothing), c("a/old", 1, HoldsNothing)}, "a/old"},
		{"same age: the key", []Claim{c("b/x", 1, HoldsNothing), c("a/x", 1, HoldsNothing)}, "a/x"},
		{"the holder over an older claimant", []Claim{c("a/old", 1, HoldsNothing), c("a/holder", 9, HoldsResource)}, "a/holder"},
		{"a written status over an older claimant", []Claim{c("a/old", 1, HoldsNothing), c("a/served", 9, HoldsStatus)}, "a/served"},
		{"the resource held over a status", []Claim{c("a/served", 1, HoldsStatus), c("a/holder", 9, HoldsResource)}, "a/holder"},
		{"two statuses: the oldest", []Claim{c("a/new", 9, HoldsStatus), c("a/old", 1, HoldsStatus), c("a/none", 0, HoldsNothing)}, "a/old"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, claims := range [][]Claim{tt.claims, reversed(tt.claims)} {
				if got := Award(claims)["backend be_a"]; got != tt.want {
					t.Fatalf("Award(%+v) gives it to %s, want %s", claims, got, tt.want)
				}
			}
		})
	}
}

func reversed(in []Claim) []Claim {
	out := make([]Claim, len(in))
	for i := range in {
		out[len(in)-1-i] = in[i]
	}
	return out
}

// TestClassesOf: the class of each LoadBalancer Service that asks for one;
// no other Service is listed (what package lb reads marks without a class
// by).
func TestClassesOf(t *testing.T) {
	a, empty := "example.org/a", ""
	svc := func(name string, typ corev1.ServiceType, class *string) corev1.Service {
		return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.ServiceSpec{Type: typ, LoadBalancerClass: class}}
	}
	got := ClassesOf([]corev1.Service{
		svc("lb", corev1.ServiceTypeLoadBalancer, &a),
		svc("lb-default", corev1.ServiceTypeLoadBalancer, nil),
		svc("lb-empty", corev1.ServiceTypeLoadBalancer, &empty),
		svc("cluster-ip", corev1.ServiceTypeClusterIP, &a),
	})
	if len(got) != 1 || got["ns/lb"] != a {
		t.Fatalf("ClassesOf = %v, want ns/lb's alone", got)
	}
}
