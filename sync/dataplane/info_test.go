package dataplane

import (
	"strings"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"
)

func TestProcessOf(t *testing.T) {
	pid, up := int64(4242), int64(90)
	p, err := processOf(models.ProcessInfo{Info: &models.ProcessInfoItem{Pid: &pid, Node: "haproxy-0", Uptime: &up}})
	if err != nil || p.PID != 4242 || p.Node != "haproxy-0" || !p.HasUptime || p.Uptime != 90*time.Second {
		t.Errorf("processOf = %+v, %v", p, err)
	}
	if p, err := processOf(models.ProcessInfo{Info: &models.ProcessInfoItem{Pid: &pid}}); err != nil || p.HasUptime {
		t.Errorf("no uptime: %+v, %v", p, err)
	}
	if _, err := processOf(models.ProcessInfo{Error: "dial unix /run/haproxy.sock: connect: no such file", RuntimeAPI: "/run/haproxy.sock"}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("the API could not ask HAProxy: %v", err)
	}
	if _, err := processOf(models.ProcessInfo{Info: &models.ProcessInfoItem{Node: "n"}}); err == nil {
		t.Error("no pid: no error")
	}
}
