package desired

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

func inZone(n corev1.Node, zone string) corev1.Node {
	n.Labels = map[string]string{corev1.LabelTopologyZone: zone}
	return n
}

type named struct {
	name, replaces, zone string
	backup               bool
}

func names(t *testing.T, in Input, opts Options) []named {
	t.Helper()
	backends, _, err := Compute(in, opts)
	if err != nil {
		t.Fatal(err)
	}
	var out []named
	for _, s := range backends[0].Servers {
		if len(s.Name) > MaxNameLength {
			t.Errorf("%s: %d characters, over %d", s.Name, len(s.Name), MaxNameLength)
		}
		out = append(out, named{s.Name, strings.Join(s.Replaces, ","), s.Zone, s.Backup})
	}
	return out
}

func TestClusterPrefixAndZones(t *testing.T) {
	http := map[string]int32{"http": 8080}
	single := []PortBackend{{Backend: "be"}}
	nodes := []corev1.Node{inZone(node("node-a", "10.0.1.1"), "z1"), inZone(node("node-b", "10.0.1.2"), "z2"), node("node-c", "10.0.1.3")}
	nodeIn := Input{Service: service(svcPort("http", 80, 30080)), Nodes: nodes, Slices: []discoveryv1.EndpointSlice{
		slice("web-1", svcName, v4, http, ep{addr: "10.0.0.1", node: "node-a"}, ep{addr: "10.0.0.2", node: "node-b"}, ep{addr: "10.0.0.3", node: "node-c"}),
	}}
	long := strings.Repeat("p", 70)
	podSlice := slice("web-1", svcName, v4, http, ep{addr: "10.0.0.1", pod: "web-a"}, ep{addr: "10.0.0.2", pod: "web-b"}, ep{addr: "10.0.0.3", pod: long})
	for i, z := range []string{"z1", "z2", "z1"} {
		podSlice.Endpoints[i].Zone = &z
	}
	podIn := Input{Service: service(svcPort("http", 80, 0)), Slices: []discoveryv1.EndpointSlice{podSlice}}

	tests := []struct {
		name string
		in   Input
		opts Options
		want []named
	}{
		{name: "no cluster, no zone: today's names",
			in: nodeIn, opts: Options{Mode: NodeMode, Backends: single},
			// (each would replace its backup-named self, should zones have been on)
			want: []named{{name: "node-a", replaces: "node-a_bk", zone: "z1"}, {name: "node-b", replaces: "node-b_bk", zone: "z2"}, {name: "node-c", replaces: "node-c_bk"}}},
		{name: "the cluster name prefixes every server",
			in: nodeIn, opts: Options{Mode: NodeMode, Backends: single, NamePrefix: "eu1-"},
			want: []named{{name: "eu1-node-a", replaces: "eu1-node-a_bk", zone: "z1"}, {name: "eu1-node-b", replaces: "eu1-node-b_bk", zone: "z2"}, {name: "eu1-node-c", replaces: "eu1-node-c_bk"}}},
		{name: "node mode: other zones and unknown ones are backup, each named for its role",
			in: nodeIn, opts: Options{Mode: NodeMode, Backends: single, NamePrefix: "eu1-", LocalZone: "z1"},
			want: []named{
				{name: "eu1-node-a", replaces: "eu1-node-a_bk", zone: "z1"},
				{name: "eu1-node-b_bk", replaces: "eu1-node-b", zone: "z2", backup: true},
				{name: "eu1-node-c_bk", replaces: "eu1-node-c", backup: true}}},
		{name: "pod mode: the endpoint's zone; a long pod name is cut within 63 characters with its suffix",
			in: podIn, opts: Options{Mode: PodMode, Backends: single, NamePrefix: "eu1-", LocalZone: "z2"},
			want: []named{
				// and the name it had before zones were on, cut 3 characters longer
				{name: "eu1-" + withHash(long, long, MaxNameLength-4-3) + "_bk", replaces: "eu1-" + withHash(long, long, MaxNameLength-4-3) + ",eu1-" + withHash(long, long, MaxNameLength-4), zone: "z1", backup: true},
				{name: "eu1-web-a_bk", replaces: "eu1-web-a", zone: "z1", backup: true},
				{name: "eu1-web-b", replaces: "eu1-web-b_bk", zone: "z2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := names(t, tt.in, tt.opts)
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("server %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestValidClusterName(t *testing.T) {
	for name, ok := range map[string]bool{
		"eu1": true, "prod.eu_west_1": true, "prod.eu-west": false, strings.Repeat("a", MaxClusterName): true,
		strings.Repeat("a", MaxClusterName+1): false, "blue green": false, "-x": false, "x-": false, "a/b": false, "é": false,
	} {
		if got := ValidClusterName(name) == ""; got != ok {
			t.Errorf("ValidClusterName(%q) ok = %v, want %v (%s)", name, got, ok, ValidClusterName(name))
		}
	}
}

// TestNodeServerNames: what GET /drained looks for is the name Compute
// gives a Node's server, in either role.
func TestNodeServerNames(t *testing.T) {
	long := strings.Repeat("n", 80)
	for _, tt := range []struct {
		opts Options
		node string
		want []string
	}{
		{Options{}, "node-a", []string{"node-a"}},
		{Options{}, long, []string{ServerName(long)}},
		{Options{NamePrefix: "blue-"}, "node-a", []string{"blue-node-a"}},
		{Options{NamePrefix: "blue-", LocalZone: "z1"}, "node-a", []string{"blue-node-a", "blue-node-a_bk"}},
	} {
		if got := NodeServerNames(tt.opts, tt.node); !slices.Equal(got, tt.want) {
			t.Errorf("%+v %s: %v, want %v", tt.opts, tt.node, got, tt.want)
		}
	}
}
