package reconcile

import (
	"fmt"
	"strings"
)

// String is the target's result in one line, for LOG_FORMAT=text, whose
// handler prints other values with %+v: a Go struct, {Target:… Add:[…] …}.
// JSON logs and answers use the fields, not this. Only what is set is said:
// "http://haproxy:5555 be_http: add=node-a,node-b waiting=node-a attempts=1".
func (t TargetResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s:", t.Target, t.Backend)
	for _, l := range []struct {
		name string
		list []string
	}{
		{"add", t.Add}, {"update", t.Update}, {"drain", t.Drain}, {"maint", t.Maint}, {"delete", t.Delete},
		{"waiting", t.Waiting}, {"loading", t.Loading}, {"draining", t.Draining}, {"handingOver", t.HandingOver},
		{"guarded", t.Guarded}, {"capped", t.Capped}, {"overflow", t.Overflow}, {"healthPortTCP", t.HealthPortTCP}, {"missingBackendLines", t.MissingBackendLines},
	} {
		if len(l.list) > 0 {
			fmt.Fprintf(&b, " %s=%s", l.name, strings.Join(l.list, ","))
		}
	}
	if t.NoSlots {
		b.WriteString(" noSlots")
	}
	if t.Reload {
		b.WriteString(" reload")
	}
	if t.UnexpectedReloads > 0 {
		fmt.Fprintf(&b, " unexpectedReloads=%d", t.UnexpectedReloads)
	}
	fmt.Fprintf(&b, " attempts=%d", t.Attempts)
	for _, f := range t.Failed {
		fmt.Fprintf(&b, " failed=%s (%s)", f.Server, f.Error)
	}
	if t.Error != "" {
		fmt.Fprintf(&b, " error=%s (%s)", t.Error, t.ErrorClass)
	}
	return b.String()
}
