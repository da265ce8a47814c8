package reconcile

import (
	"testing"
	"time"
)

// TestSayAgain: a warning the reconciles repeat while its cause lasts is
// said when new, when what it says changes, and once every LastingEvery.
func TestSayAgain(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	prev := said{what: "map[invalid-address:1]", at: t0}
	for _, c := range []struct {
		name string
		seen bool
		what string
		now  time.Time
		want bool
	}{
		{"new", false, "map[invalid-address:1]", t0, true},
		{"the next second", true, "map[invalid-address:1]", t0.Add(time.Second), false},
		{"just before it is due", true, "map[invalid-address:1]", t0.Add(LastingEvery - time.Second), false},
		{"due again", true, "map[invalid-address:1]", t0.Add(LastingEvery), true},
		{"changed", true, "map[invalid-address:2]", t0.Add(time.Second), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := sayAgain(prev, c.seen, c.what, c.now, LastingEvery); got != c.want {
				t.Errorf("sayAgain = %v, want %v", got, c.want)
			}
		})
	}
}
