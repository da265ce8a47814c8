package dataplanetest

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

func processInfo(t *testing.T, s *Server) models.ProcessInfo {
	t.Helper()
	var pi models.ProcessInfo
	if err := json.Unmarshal(do(t, s, call{"GET", "/runtime/info", "", 200}), &pi); err != nil {
		t.Fatal(err)
	}
	return pi
}

// TestProcessInfo: GET /runtime/info answers, within the spec, the worker
// of the HAProxy RuntimeSocket reaches, and follows SetRuntimeSocket; with
// none, the synthetic process; with a socket nothing answers, the error
// field as the real API.
func TestProcessInfo(t *testing.T) {
	s := New(t, Options{})
	if pi := processInfo(t, s); pi.Info == nil || pi.Info.Pid == nil || *pi.Info.Pid != SyntheticPID || pi.Info.Node != SyntheticNode {
		t.Fatalf("synthetic: %+v", pi)
	}
	a, b := haproxytest.Start(t), haproxytest.Start(t)
	s.SetRuntimeSocket(a.AdminSocket)
	for _, h := range []*haproxytest.HAProxy{a, b} {
		s.SetRuntimeSocket(h.AdminSocket)
		out, err := h.Command("show info")
		if err != nil {
			t.Fatal(err)
		}
		pi := processInfo(t, s)
		host, _ := os.Hostname()
		if pi.Info == nil || pi.Info.Pid == nil || !strings.Contains(out, "\nPid: "+strconv.FormatInt(*pi.Info.Pid, 10)+"\n") ||
			pi.Info.Node != host || pi.Info.Uptime == nil || pi.RuntimeAPI != h.AdminSocket {
			t.Errorf("%s: %+v (%+v), show info:\n%s", h.AdminSocket, pi, pi.Info, out)
		}
	}
	s.SetRuntimeSocket(a.Dir + "/none.sock")
	if pi := processInfo(t, s); pi.Error == "" || pi.Info != nil {
		t.Errorf("nothing at the socket: %+v", pi)
	}
}
