package kube

import (
	"testing"

	"k8s.io/client-go/rest"
)

// TestReviewsHaveTheirOwnLimit: TokenReviews, asked for callers from
// outside, are limited apart from the reads and watches.
func TestReviewsHaveTheirOwnLimit(t *testing.T) {
	c, err := NewClient(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.authn.GetRateLimiter().QPS(); got != reviewQPS {
		t.Errorf("reviews limited to %v/s, want %d", got, reviewQPS)
	}
	if c.authn.GetRateLimiter() == c.core.GetRateLimiter() || c.core.GetRateLimiter().QPS() != 1000 {
		t.Error("reviews share the reads' limiter, or reads are limited below 1,000/s")
	}
}
