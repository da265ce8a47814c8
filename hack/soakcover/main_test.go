package main

import (
	"strings"
	"testing"
)

// TestSummarize: a block reached by any run counts once; shares are per
// package and over all.
func TestSummarize(t *testing.T) {
	profile := `mode: set
x/sync/plan/plan.go:1.1,2.2 3 1
x/sync/plan/plan.go:3.1,4.2 1 0
x/sync/plan/plan.go:3.1,4.2 1 1
x/sync/lb/lb.go:1.1,2.2 4 0
`
	got := summarize(strings.NewReader(profile))
	if want := "coverage: 50.0% of the deciding packages' statements (lb 0%, plan 100%)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
