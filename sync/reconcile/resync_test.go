package reconcile

import (
	"context"
	"testing"
	"time"
)

// TestResyncPokesEveryPeriodUntilStopped, on a clock the test moves.
func TestResyncPokesEveryPeriodUntilStopped(t *testing.T) {
	ticks := make(chan chan time.Time)
	after := func(d time.Duration) <-chan time.Time {
		if d != time.Minute {
			t.Errorf("waited %s, want the period", d)
		}
		c := make(chan time.Time, 1)
		ticks <- c
		return c
	}
	pokes := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Resync(ctx, time.Minute, after, func() { pokes <- struct{}{} })
	}()
	for range 3 {
		tick := <-ticks
		if len(pokes) != 0 {
			t.Fatal("a poke before the period ended")
		}
		tick <- time.Now()
		<-pokes
	}
	<-ticks // waiting for the fourth period
	cancel()
	<-done
	if len(pokes) != 0 {
		t.Error("a poke after the stop")
	}
}
