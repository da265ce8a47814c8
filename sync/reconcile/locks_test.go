package reconcile

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAQueuedLockGivesUpWhenItsHolderIsLeftBehind: a reconcile queued on a
// target's lock waits while the holder works, takes the lock when it is
// released, and gives up (LeftBehindError, Busy) as soon as the holder is
// left behind (hold), instead of waiting behind a hung target until its
// deadline; its caller's cancel ends the wait too.
func TestAQueuedLockGivesUpWhenItsHolderIsLeftBehind(t *testing.T) {
	var l Locks
	ctx := context.Background()
	unlock, err := l.lockUnlessLeft(ctx, "a")
	if err != nil {
		t.Fatalf("free lock: %v", err)
	}

	// Released while queued: taken.
	got := make(chan error, 1)
	go func() {
		u, err := l.lockUnlessLeft(ctx, "a")
		if err == nil {
			u()
		}
		got <- err
	}()
	time.Sleep(250 * time.Millisecond) // a few of its 100 ms waits
	select {
	case err := <-got:
		t.Fatalf("queued behind a working holder, it returned %v", err)
	default:
	}
	unlock()
	if err := <-got; err != nil {
		t.Fatalf("after the release: %v, want the lock", err)
	}

	// Left behind while queued: given up, Busy.
	unlock, _ = l.lockUnlessLeft(ctx, "a")
	go func() {
		_, err := l.lockUnlessLeft(ctx, "a")
		got <- err
	}()
	l.hold("a")
	var lb *LeftBehindError
	select {
	case err := <-got:
		if !errors.As(err, &lb) || !lb.Busy {
			t.Fatalf("holder left behind: %v, want a LeftBehindError with Busy", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("holder left behind: still queued behind it")
	}
	// Another target is not held back by it.
	if u, err := l.lockUnlessLeft(ctx, "b"); err != nil {
		t.Fatalf("other target: %v", err)
	} else {
		u()
	}
	l.release("a")
	unlock()

	// The caller's cancel ends the wait, with the context's error.
	unlock, _ = l.lockUnlessLeft(ctx, "a")
	defer unlock()
	cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	if _, err := l.lockUnlessLeft(cctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled while queued: %v, want the deadline", err)
	}
}
