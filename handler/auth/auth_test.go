package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube/kubetest"
)

func header(v string) http.Header {
	h := http.Header{}
	if v != "" {
		h.Set("Authorization", v)
	}
	return h
}

func status(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	if err != nil {
		return -1
	}
	return http.StatusOK
}

func TestToken(t *testing.T) {
	if _, err := NewToken("  short-token  "); err == nil {
		t.Error("a 11-character token was accepted")
	}
	tok, err := NewToken(" 0123456789abcdef\n")
	if err != nil {
		t.Fatal(err)
	}
	for h, want := range map[string]int{
		"Bearer 0123456789abcdef":  http.StatusOK,
		"bearer 0123456789abcdef":  http.StatusOK,
		"Bearer 0123456789abcdeX":  http.StatusUnauthorized,
		"Bearer 0123456789abcdef0": http.StatusUnauthorized,
		"Basic 0123456789abcdef":   http.StatusUnauthorized,
		"Bearer ":                  http.StatusUnauthorized,
		"":                         http.StatusUnauthorized,
	} {
		if got := status(tok.Authenticate(context.Background(), header(h), "10.0.0.1")); got != want {
			t.Errorf("%q: %d, want %d", h, got, want)
		}
	}
}

// reviewer answers TokenReviews as an API server would for a few known tokens.
func reviewer(t *testing.T, calls *atomic.Int32, fail *atomic.Bool) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		if fail.Load() {
			return true, nil, errors.New("connection refused")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		users := map[string]string{"cron-token": "system:serviceaccount:ingress-nginx:cron", "other-token": "system:serviceaccount:ingress-nginx:other"}
		if u, ok := users[tr.Spec.Token]; ok && len(tr.Spec.Audiences) == 1 && tr.Spec.Audiences[0] == "haproxy-k8s-sync" {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: u}, Audiences: tr.Spec.Audiences}
		}
		return true, tr, nil
	})
	return c
}

func TestKubernetes(t *testing.T) {
	var calls atomic.Int32
	var fail atomic.Bool
	k, err := NewKubernetes(kubetest.Clientset{Interface: reviewer(t, &calls, &fail)}, "haproxy-k8s-sync", []string{"ingress-nginx/cron"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1e9, 0)
	k.now = func() time.Time { return now }
	ctx := context.Background()
	for h, want := range map[string]int{
		"Bearer cron-token":  http.StatusOK,
		"Bearer other-token": http.StatusForbidden,
		"Bearer bad-token":   http.StatusUnauthorized,
		"":                   http.StatusUnauthorized,
	} {
		if got := status(k.Authenticate(ctx, header(h), "10.0.0.1")); got != want {
			t.Errorf("%q: %d, want %d", h, got, want)
		}
	}
	n := calls.Load()
	if n != 3 {
		t.Errorf("%d reviews, want 3 (none for a missing token)", n)
	}
	t.Run("answers are reused for a while", func(t *testing.T) {
		_ = k.Authenticate(ctx, header("Bearer cron-token"), "10.0.0.1")
		_ = k.Authenticate(ctx, header("Bearer bad-token"), "10.0.0.1")
		if calls.Load() != n {
			t.Errorf("reviewed again within the cache time")
		}
		now = now.Add(cacheBad + time.Second)
		_ = k.Authenticate(ctx, header("Bearer bad-token"), "10.0.0.1")
		_ = k.Authenticate(ctx, header("Bearer cron-token"), "10.0.0.1")
		if calls.Load() != n+1 {
			t.Errorf("%d reviews, want only the refused token reviewed again", calls.Load()-n)
		}
	})
	t.Run("an API server that cannot be asked: 503, not cached", func(t *testing.T) {
		fail.Store(true)
		defer fail.Store(false)
		before := calls.Load()
		for range 2 {
			if got := status(k.Authenticate(ctx, header("Bearer new-token"), "10.0.0.1")); got != http.StatusServiceUnavailable {
				t.Errorf("%d, want 503", got)
			}
		}
		if calls.Load() != before+2 {
			t.Error("a failed review was cached")
		}
	})
	if _, err := NewKubernetes(nil, "aud", []string{"no-slash"}); err == nil {
		t.Error("a bad ServiceAccount was accepted")
	}
}

// blockingReviewer answers "cron-token" as valid at once and holds every
// other review until release is closed. Not client-go's fake: it answers
// one reaction at a time.
func blockingReviewer(release chan struct{}) TokenReviewer {
	return reviewFunc(func(_ context.Context, tr *authnv1.TokenReview) (*authnv1.TokenReview, error) {
		if tr.Spec.Token != "cron-token" {
			<-release
			return tr, nil
		}
		tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:ns:cron"}, Audiences: tr.Spec.Audiences}
		return tr, nil
	})
}

func TestKubernetesBoundsConcurrentReviews(t *testing.T) {
	release := make(chan struct{})
	k, _ := NewKubernetes(blockingReviewer(release), "aud", nil)
	var wg sync.WaitGroup
	for i := range maxReviews {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = k.Authenticate(context.Background(), header(fmt.Sprintf("Bearer t%d", i)), fmt.Sprintf("10.2.0.%d", i))
		}()
	}
	for len(k.slots) < maxReviews {
		time.Sleep(time.Millisecond)
	}
	if got := status(k.Authenticate(context.Background(), header("Bearer one-more"), "10.3.0.1")); got != http.StatusTooManyRequests {
		t.Errorf("%d, want 429", got)
	}
	close(release)
	wg.Wait()
}

// TestJunkNeverPushesOutAValidToken: made-up tokens from many addresses,
// far more than the cache holds, neither clear nor evict a valid answer:
// the real caller is not reviewed again within its cache time. Before, the
// 1,024th entry cleared the whole cache.
func TestJunkNeverPushesOutAValidToken(t *testing.T) {
	var calls atomic.Int32
	var fail atomic.Bool
	k, _ := NewKubernetes(kubetest.Clientset{Interface: reviewer(t, &calls, &fail)}, "haproxy-k8s-sync", nil)
	now := time.Unix(1e9, 0)
	k.now = func() time.Time { return now }
	ctx := context.Background()
	if got := status(k.Authenticate(ctx, header("Bearer cron-token"), "10.0.0.1")); got != http.StatusOK {
		t.Fatalf("%d", got)
	}
	for i := range 3 * (validSize + refusedSize) {
		src := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		if got := status(k.Authenticate(ctx, header(fmt.Sprintf("Bearer junk-%d", i)), src)); got != http.StatusUnauthorized {
			t.Fatalf("junk %d: %d", i, got)
		}
	}
	before := calls.Load()
	if got := status(k.Authenticate(ctx, header("Bearer cron-token"), "10.0.0.1")); got != http.StatusOK {
		t.Errorf("the real caller after the flood: %d", got)
	}
	if calls.Load() != before {
		t.Error("the flood pushed the valid answer out: reviewed again")
	}
	if k.refused.len() > refusedSize || k.sources.len() > sourceSize {
		t.Errorf("caches grew past their bounds: %d refused, %d sources", k.refused.len(), k.sources.len())
	}
}

// TestReviewsAreRateLimitedPerSource: one source cannot spend the API
// server's TokenReviews faster than its share; another source still can.
func TestReviewsAreRateLimitedPerSource(t *testing.T) {
	var calls atomic.Int32
	var fail atomic.Bool
	k, _ := NewKubernetes(kubetest.Clientset{Interface: reviewer(t, &calls, &fail)}, "haproxy-k8s-sync", nil)
	now := time.Unix(1e9, 0)
	k.now = func() time.Time { return now }
	ctx := context.Background()
	limited := 0
	for i := range 100 {
		if status(k.Authenticate(ctx, header(fmt.Sprintf("Bearer junk-%d", i)), "10.9.9.9")) == http.StatusTooManyRequests {
			limited++
		}
	}
	if calls.Load() != sourceBurst || limited != 100-sourceBurst {
		t.Errorf("%d reviews, %d refused at once; want %d and %d", calls.Load(), limited, sourceBurst, 100-sourceBurst)
	}
	if got := status(k.Authenticate(ctx, header("Bearer cron-token"), "10.0.0.1")); got != http.StatusOK {
		t.Errorf("another source: %d", got)
	}
	now = now.Add(time.Second) // the source earns reviews back at its rate
	if got := status(k.Authenticate(ctx, header("Bearer junk-x"), "10.9.9.9")); got != http.StatusUnauthorized {
		t.Errorf("after a second: %d, want a review (401)", got)
	}
}

// TestAKnownCallerKeepsItsSlot: while made-up tokens hold every review in
// flight, a caller whose token passed before is reviewed again when its
// answer expires (before, it got 429).
func TestAKnownCallerKeepsItsSlot(t *testing.T) {
	release := make(chan struct{})
	k, _ := NewKubernetes(blockingReviewer(release), "aud", nil)
	now := time.Unix(1e9, 0)
	var mu sync.Mutex
	k.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	ctx := context.Background()
	if got := status(k.Authenticate(ctx, header("Bearer cron-token"), "10.0.0.1")); got != http.StatusOK {
		t.Fatalf("%d", got)
	}
	var wg sync.WaitGroup
	for i := range maxReviews {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = k.Authenticate(ctx, header(fmt.Sprintf("Bearer junk-%d", i)), fmt.Sprintf("10.2.0.%d", i))
		}()
	}
	for len(k.slots) < maxReviews {
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	now = now.Add(cacheOK + time.Second)
	mu.Unlock()
	if got := status(k.Authenticate(ctx, header("Bearer cron-token"), "10.0.0.1")); got != http.StatusOK {
		t.Errorf("known caller while junk holds every review: %d", got)
	}
	close(release)
	wg.Wait()
}

func TestLRU(t *testing.T) {
	l := newLRU[string, int](2)
	l.put("a", 1)
	l.put("b", 2)
	l.get("a") // a is used: b is the least recently used
	l.put("c", 3)
	if _, ok := l.get("b"); ok {
		t.Error("b kept, though least recently used")
	}
	if v, ok := l.get("a"); !ok || v != 1 {
		t.Error("a evicted")
	}
	l.put("a", 5)
	if v, _ := l.get("a"); v != 5 || l.len() != 2 {
		t.Errorf("a = %d, len %d", v, l.len())
	}
	l.remove("a")
	if _, ok := l.get("a"); ok || l.len() != 1 {
		t.Error("a not removed")
	}
}

// reviewFunc is a TokenReviewer.
type reviewFunc func(context.Context, *authnv1.TokenReview) (*authnv1.TokenReview, error)

func (f reviewFunc) CreateTokenReview(ctx context.Context, tr *authnv1.TokenReview) (*authnv1.TokenReview, error) {
	return f(ctx, tr)
}
