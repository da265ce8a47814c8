package history

import (
	"strings"
	"testing"
)

// TestServicesViews: the pure parts of the many-Services invariants: what a
// settled be2 is for each of web2's phases, how two views of a backend
// differ (a left backend's deletions are left-parked's, not the stability
// check's), and which pod an address is.
func TestServicesViews(t *testing.T) {
	in := func(n int) string { return podAddr(n) + ":80 in" }
	out := func(n int) string { return podAddr(n) + ":80 out" }
	settled := []struct {
		name  string
		ph    phase
		view  map[string]string
		wants bool
	}{
		{"never named: empty", never, map[string]string{}, true},
		{"never named: a server", never, map[string]string{"a": in(5000)}, false},
		{"joined: every pod in", joined, map[string]string{"a": in(5000), "b": in(5001), "c": in(5002)}, true},
		{"joined: one gated", joined, map[string]string{"a": in(5000), "b": out(5001), "c": in(5002)}, false},
		{"joined: one missing", joined, map[string]string{"a": in(5000), "b": in(5001)}, false},
		{"left: all parked", left, map[string]string{"a": out(5000), "b": out(5001)}, true},
		{"left: gone by a reload", left, map[string]string{}, true},
		{"left: one in traffic", left, map[string]string{"a": out(5000), "b": in(5001)}, false},
	}
	for _, c := range settled {
		if got := settledFor(c.ph, c.view); got != c.wants {
			t.Errorf("settledFor %s = %v, want %v", c.name, got, c.wants)
		}
	}
	diffs := []struct {
		name       string
		a, b       map[string]string
		ignoreGone bool
		want       string
	}{
		{"same", map[string]string{"a": in(1)}, map[string]string{"a": in(1)}, false, ""},
		{"parked", map[string]string{"a": in(1)}, map[string]string{"a": out(1)}, false, "a 127.0.1.2:80 in -> 127.0.1.2:80 out"},
		{"moved", map[string]string{"a": in(1)}, map[string]string{"a": in(2)}, false, "a 127.0.1.2:80 in -> 127.0.1.3:80 in"},
		{"removed", map[string]string{"a": in(1), "b": in(2)}, map[string]string{"b": in(2)}, false, "a (127.0.1.2:80 in) removed"},
		{"removed, left-parked's", map[string]string{"a": in(1), "b": in(2)}, map[string]string{"b": in(2)}, true, ""},
		{"added", map[string]string{}, map[string]string{"c": in(3)}, true, "c (127.0.1.4:80 in) added"},
	}
	for _, c := range diffs {
		if got, want := diffView(c.a, c.b, c.ignoreGone), atPodAddrs(c.want); got != want {
			t.Errorf("diffView %s = %q, want %q", c.name, got, want)
		}
	}
	for _, n := range []int{0, 1, 249, 250, 5000, 5100} {
		if got, ok := podOfAddr(podAddr(n)); !ok || got != n {
			t.Errorf("podOfAddr(%s) = %d, %v; want %d", podAddr(n), got, ok, n)
		}
	}
	for _, addr := range []string{"10.0.0.1", "127.0.0.1", "::1", "nonsense"} {
		if n, ok := podOfAddr(addr); ok {
			t.Errorf("podOfAddr(%s) = %d, want none", addr, n)
		}
	}
}

// atPodAddrs writes the loopback addresses of pods 1 to 3 in want as the
// pods' addresses are (in the private network: 10.244.1.x).
func atPodAddrs(want string) string {
	return strings.NewReplacer("127.0.1.2", podAddr(1), "127.0.1.3", podAddr(2), "127.0.1.4", podAddr(3)).Replace(want)
}
