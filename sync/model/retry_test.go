package model

import (
	"slices"
	"testing"
)

func TestRetryLinesMissing(t *testing.T) {
	n := func(v int) *int { return &v }
	all := []string{LineRedispatch, LineRetries, LineRetryOn}
	for _, tc := range []struct {
		name string
		in   RetryLines
		want []string
	}{
		{"plain tcp backend: retries default to 3", RetryLines{}, []string{LineRedispatch}},
		{"plain http backend", RetryLines{Mode: "http"}, []string{LineRedispatch, LineRetryOn}},
		{"recommended tcp", RetryLines{Mode: "tcp", Redispatch: 1, Retries: n(3)}, nil},
		{"recommended http", RetryLines{Mode: "http", Redispatch: 1, Retries: n(3), RetryOn: "conn-failure empty-response"}, nil},
		{"http, keywords in another order with more", RetryLines{Mode: "http", Redispatch: 1, RetryOn: "empty-response 503 conn-failure"}, nil},
		{"http, all-retryable-errors covers both", RetryLines{Mode: "http", Redispatch: 1, RetryOn: "all-retryable-errors"}, nil},
		{"http, retry-on conn-failure only", RetryLines{Mode: "http", Redispatch: 1, RetryOn: "conn-failure"}, []string{LineRetryOn}},
		{"http, retry-on none", RetryLines{Mode: "http", Redispatch: 1, Retries: n(3), RetryOn: "none"}, []string{LineRetryOn}},
		{"tcp ignores retry-on", RetryLines{Mode: "tcp", Redispatch: 1, RetryOn: "none"}, nil},
		{"bare option redispatch: last retry only", RetryLines{Redispatch: -1}, []string{LineRedispatch}},
		{"redispatch every 2nd retry", RetryLines{Redispatch: 2}, []string{LineRedispatch}},
		{"more retries is fine", RetryLines{Redispatch: 1, Retries: n(5)}, nil},
		{"fewer retries", RetryLines{Redispatch: 1, Retries: n(1)}, []string{LineRetries}},
		{"retries 0: no retry at all", RetryLines{Mode: "http", Retries: n(0)}, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.in.Missing(); !slices.Equal(got, tc.want) {
				t.Errorf("Missing() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestAllBackupsMissingWithBackups: "option allbackups" is asked for only
// where the backend has backup servers (HAPROXY_LOCAL_ZONE).
func TestAllBackupsMissingWithBackups(t *testing.T) {
	good := RetryLines{Mode: "tcp", Redispatch: 1}
	if got := good.MissingWith(false); len(got) != 0 {
		t.Errorf("no backups: %v", got)
	}
	if got := good.MissingWith(true); !slices.Equal(got, []string{LineAllBackups}) {
		t.Errorf("backups, no allbackups: %v", got)
	}
	good.AllBackups = true
	if got := good.MissingWith(true); len(got) != 0 {
		t.Errorf("backups with allbackups: %v", got)
	}
}
