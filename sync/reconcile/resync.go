package reconcile

import (
	"context"
	"time"
)

// Resync calls poke every period until ctx is done: the safety net that
// repairs what no event told of (an HAProxy restarted and forgot its
// runtime servers, an event lost while nothing watched). after is the
// clock; nil takes time.After.
func Resync(ctx context.Context, period time.Duration, after func(time.Duration) <-chan time.Time, poke func()) {
	if after == nil {
		after = time.After
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-after(period):
			poke()
		}
	}
}
