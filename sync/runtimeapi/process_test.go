package runtimeapi

import (
	"testing"
	"time"
)

func TestProcessOf(t *testing.T) {
	for _, tc := range []struct {
		name, reply, want string
		ok                bool
	}{
		{"2.6 (no start time)", "Name: HAProxy\nVersion: 2.6.12-1+deb12u4\nPid: 4242\nUptime_sec: 12\n", "4242", true},
		{"3.x with the start time", "Name: HAProxy\nVersion: 3.0.11\nPid: 77\nStart_time_sec: 1764160000\n", "77@1764160000", true},
		{"no Pid line", "Name: HAProxy\nVersion: 3.0.11\n", "", false},
		{"an error sentence", "Unknown command.\n", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := processOf(tc.reply)
			if got != tc.want || ok != tc.ok {
				t.Errorf("processOf = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestParseProcessInfo(t *testing.T) {
	p := ParseProcessInfo("Name: HAProxy\nVersion: 2.6.12\nPid: 4242\nUptime: 0d 0h00m12s\nUptime_sec: 12\nnode: haproxy-0\n")
	if p.PID != 4242 || p.Node != "haproxy-0" || !p.HasUptime || p.Uptime != 12*time.Second {
		t.Errorf("ParseProcessInfo = %+v", p)
	}
	if p := ParseProcessInfo("Unknown command.\n"); p.PID != 0 || p.HasUptime {
		t.Errorf("an error sentence: %+v", p)
	}
}
