package haproxytest

import (
	"sync"
	"sync/atomic"
	"time"
)

// Load is clients asking through a frontend in a loop (Ask), each as soon
// as its last request ended: what a reload under load is measured with.
type Load struct {
	sent, failed atomic.Int64
	stop         chan struct{}
	wg           sync.WaitGroup
}

// StartLoad starts n clients asking through addr until Stop.
func StartLoad(addr string, n int) *Load {
	l := &Load{stop: make(chan struct{})}
	for range n {
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				l.sent.Add(1)
				if _, err := Ask(addr); err != nil {
					l.failed.Add(1)
				}
			}
		})
	}
	return l
}

// Sent and Failed count the requests so far.
func (l *Load) Sent() int64   { return l.sent.Load() }
func (l *Load) Failed() int64 { return l.failed.Load() }

// WaitSent waits until n more requests were sent.
func (l *Load) WaitSent(n int64) {
	for target := l.sent.Load() + n; l.sent.Load() < target; {
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop stops the clients and waits for them; it may be called again.
func (l *Load) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}
