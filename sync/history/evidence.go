package history

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// tcplog reads an HAProxy tcplog line's accept date and total time (Tt,
// ms): "[26/Nov/2026:15:21:39.701] fe_be be/p-4 0/-1/3003 ...".
var tcplog = regexp.MustCompile(`\[(\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2}\.\d{3})\] \S+ \S+ -?\d+/-?\d+/\+?(\d+) `)

// haproxySaw returns the lines of HAProxy's log (its abnormal connections:
// haproxytest.LogAbnormal) that ended within the second before at or up to
// 100ms after: the server a failed request went to and how the connection
// ended (its termination state), which the client cannot tell.
func haproxySaw(logs string, at time.Time) []string {
	var out []string
	for line := range strings.Lines(logs) {
		m := tcplog.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		t, err := time.ParseInLocation("02/Jan/2006:15:04:05.000", m[1], time.Local)
		ms, _ := strconv.Atoi(m[2])
		t = t.Add(time.Duration(ms) * time.Millisecond)
		if err != nil || t.Before(at.Add(-time.Second)) || t.After(at.Add(100*time.Millisecond)) {
			continue
		}
		if out = append(out, strings.TrimSpace(line)); len(out) == 5 {
			break
		}
	}
	return out
}

// stateNow is what HAProxy runs now, as "show servers state" has it (one
// line a server, its fields named): the end state of a history that did
// not converge.
func (tg *target) stateNow() []string {
	reply, err := tg.h.Command("show servers state " + backend)
	if err != nil {
		return []string{"show servers state: " + err.Error()}
	}
	var out []string
	for line := range strings.Lines(reply) {
		f := strings.Fields(line)
		if len(f) < 19 || f[1] != backend {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s:%s op=%s admin=%s weight=%s since=%ss check status=%s result=%s health=%s state=%s",
			f[3], f[4], f[18], f[5], f[6], f[7], f[9], f[10], f[11], f[12], f[13]))
	}
	return out
}
