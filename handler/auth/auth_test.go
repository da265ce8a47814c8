package auth

import (
	"context"
	"errors"
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
		if got := status(tok.Authenticate(context.Background(), header(h))); got != want {
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
		if got := status(k.Authenticate(ctx, header(h))); got != want {
			t.Errorf("%q: %d, want %d", h, got, want)
		}
	}
	n := calls.Load()
	if n != 3 {
		t.Errorf("%d reviews, want 3 (none for a missing token)", n)
	}
	t.Run("answers are reused for a while", func(t *testing.T) {
		_ = k.Authenticate(ctx, header("Bearer cron-token"))
		_ = k.Authenticate(ctx, header("Bearer bad-token"))
		if calls.Load() != n {
			t.Errorf("reviewed again within the cache time")
		}
		now = now.Add(cacheBad + time.Second)
		_ = k.Authenticate(ctx, header("Bearer bad-token"))
		_ = k.Authenticate(ctx, header("Bearer cron-token"))
		if calls.Load() != n+1 {
			t.Errorf("%d reviews, want only the refused token reviewed again", calls.Load()-n)
		}
	})
	t.Run("an API server that cannot be asked: 503, not cached", func(t *testing.T) {
		fail.Store(true)
		defer fail.Store(false)
		before := calls.Load()
		for range 2 {
			if got := status(k.Authenticate(ctx, header("Bearer new-token"))); got != http.StatusServiceUnavailable {
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

func TestKubernetesBoundsConcurrentReviews(t *testing.T) {
	release := make(chan struct{})
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		<-release
		return true, a.(k8stesting.CreateAction).GetObject(), nil
	})
	k, _ := NewKubernetes(kubetest.Clientset{Interface: c}, "aud", nil)
	var wg sync.WaitGroup
	for i := range maxReviews {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = k.Authenticate(context.Background(), header("Bearer t"+string(rune('a'+i))))
		}()
	}
	for len(k.slots) < maxReviews {
		time.Sleep(time.Millisecond)
	}
	if got := status(k.Authenticate(context.Background(), header("Bearer one-more"))); got != http.StatusTooManyRequests {
		t.Errorf("%d, want 429", got)
	}
	close(release)
	wg.Wait()
}
