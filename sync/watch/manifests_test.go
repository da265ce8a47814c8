package watch

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
)

func TestNextVersion(t *testing.T) {
	gone := errors.New("manifests: no such file")
	for _, tt := range []struct {
		name, last, read string
		err              error
		next             string
		changed          bool
	}{
		{"the same", "v1", "v1", nil, "v1", false},
		{"an edit", "v1", "v2", nil, "v2", true},
		{"a failed read keeps the last", "v1", "", gone, "v1", false},
		{"readable at last after a failure at start", "", "v1", nil, "v1", true},
	} {
		next, changed := nextVersion(tt.last, tt.read, tt.err)
		if next != tt.next || changed != tt.changed {
			t.Errorf("%s: %q, %v; want %q, %v", tt.name, next, changed, tt.next, tt.changed)
		}
	}
}

// TestManifestsPokesAtStartAndOnChange: one poke at start, then one per
// change the polls read; a read that fails in between (a file being
// replaced) pokes nothing, nor does the same version read again after it.
func TestManifestsPokesAtStartAndOnChange(t *testing.T) {
	reads := []struct {
		v   string
		err error
	}{{"v1", nil}, {"v1", nil}, {"v2", nil}, {"", errors.New("gone")}, {"v2", nil}, {"v3", nil}}
	var mu sync.Mutex
	var pokes []string
	n := 0
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manifests{
		Version: func() (string, error) {
			mu.Lock()
			defer mu.Unlock()
			r := reads[n]
			n++
			return r.v, r.err
		},
		Poke: func(source, reason string) {
			mu.Lock()
			defer mu.Unlock()
			pokes = append(pokes, source+": "+reason)
		},
		After: func(time.Duration) <-chan time.Time { return tick },
	}
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	for range len(reads) - 1 {
		tick <- time.Time{}
	}
	cancel()
	<-done
	want := []string{"start: start", "manifests: manifests changed", "manifests: manifests changed"}
	if !reflect.DeepEqual(pokes, want) || n != len(reads) {
		t.Errorf("pokes %q after %d reads, want %q after %d", pokes, n, want, len(reads))
	}
}
