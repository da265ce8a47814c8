package runtimeapi

import (
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// FuzzParseServersState: any reply must parse or fail without a panic, and
// every server returned belongs to the backend with a known state.
func FuzzParseServersState(f *testing.F) {
	f.Add(header + "3 be 1 s1 127.0.0.1 2 0 1 1 2 6 3 4 6 0 0 0 - 8080 - 0 0 - - 0\n")
	f.Add(header + "3 be 2 n1 127.0.0.3 0 8 5 3 1 8 2 0 6 0 0 0 - 81 - 0 0 - - 0\n\n")
	f.Add(header + "3 be 5 v6 ::1 0 33 1 1 1 6 3 4 6 0 0 0 - 84 - 0 0 - - 0\n4 other 1 x 127.0.0.9 2 0 1 1 2 6 3 4 6 0 0 0 - 80 - 0 0 - - 0\n")
	f.Add("Can't find backend.\n")
	f.Add("Unknown command, but maybe one of the following ones is a better match:\n")
	f.Add("1\n")
	f.Fuzz(func(t *testing.T, reply string) {
		servers, err := ParseServersState(reply, "be", 2, 2)
		if err != nil {
			return
		}
		for _, s := range servers {
			if s.State != model.Ready && s.State != model.Drain && s.State != model.Maint {
				t.Fatalf("state %q", s.State)
			}
			if strings.ContainsAny(s.Name, " \n") || s.Name == "" {
				t.Fatalf("name %q", s.Name)
			}
		}
	})
}
