package reconcile

import (
	"testing"
	"time"
)

// TestRetryScheduleIsTheDocumentedOne: docs/faults.md's schedule (50 ms
// doubling at each failure, 2 s at most, 20 % jitter), which the history
// checker's judge grants a pod whose writes an API refused. A slower
// schedule here would be a delay the judge does not excuse.
func TestRetryScheduleIsTheDocumentedOne(t *testing.T) {
	for round := range 50 {
		b := (&Reconciler{}).backoff()
		for n := 1; n <= 10; n++ {
			d, stop := b.Next()
			if stop {
				t.Fatalf("round %d: the backoff stopped after %d failures; the deadline ends retries, not the schedule", round, n)
			}
			base := min(2*time.Second, 50*time.Millisecond<<(n-1))
			if d < base-base/5 || d > base+base/5 {
				t.Fatalf("round %d: after %d failures the retry waits %v, want %v ± 20 %%", round, n, d, base)
			}
		}
	}
}
