package history

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// traceEnv names a file where a replay writes each target's "show servers
// state" every 100 ms, and with the Data Plane API the server lines it
// holds for haproxy.cfg, a line for each that changed: what
// HAProxy held between the service's log lines, for a finding that the
// observations alone do not explain. Off unless set: it costs commands.
const traceEnv = "HKS_HISTORY_TRACE"

// traceNote writes a line to the trace (a step as it starts), when one is
// kept.
func traceNote(format string, args ...any) {
	path := os.Getenv(traceEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func traceServers(t testing.TB, targets []*target) {
	path := os.Getenv(traceEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	t.Cleanup(func() { close(done); <-stopped; f.Close() })
	go func() {
		defer close(stopped)
		last := make([]map[string]string, len(targets))
		for i := range last {
			last[i] = map[string]string{}
		}
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for i, tg := range targets {
				reply, err := tg.h.Command("show servers state " + backend)
				now := time.Now().Format("15:04:05.000")
				if err != nil {
					fmt.Fprintf(f, "%s t%d error %v\n", now, i, err)
					continue
				}
				seen := map[string]bool{}
				for _, line := range strings.Split(reply, "\n") {
					fields := strings.Fields(line)
					if len(fields) < 5 || strings.HasPrefix(line, "#") {
						continue
					}
					name := fields[3]
					seen[name] = true
					if len(fields) > 9 {
						fields[9] = "-" // seconds since its last change
					}
					if key := strings.Join(fields, " "); last[i][name] != key {
						last[i][name] = key
						fmt.Fprintf(f, "%s t%d %s\n", now, i, line)
					}
				}
				for name := range last[i] {
					if !seen[name] && !strings.HasPrefix(name, "cfg ") {
						fmt.Fprintf(f, "%s t%d %s gone\n", now, i, name)
						delete(last[i], name)
					}
				}
				if tg.api == nil {
					continue
				}
				// What the API holds for haproxy.cfg, each line that changed.
				for _, line := range tg.api.ServerLines(backend) {
					if fields := strings.Fields(line); len(fields) > 1 {
						if key := "cfg " + fields[1]; last[i][key] != line {
							fmt.Fprintf(f, "%s t%d cfg %s\n", now, i, line)
							last[i][key] = line
						}
					}
				}
			}
		}
	}()
}
