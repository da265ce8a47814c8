package dataplane

import (
	"reflect"
	"testing"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

func TestRetryLinesInheritNearestFirst(t *testing.T) {
	on, off := "enabled", "disabled"
	i64 := func(v int64) *int64 { return &v }
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		name     string
		sections []retrySection // backend first, then its defaults chain
		want     model.RetryLines
	}{
		{"nothing set anywhere", []retrySection{{}, {}}, model.RetryLines{}},
		{"all in the backend", []retrySection{{Mode: "http", Redispatch: &models.Redispatch{Enabled: &on, Interval: i64(1)}, Retries: i64(3), RetryOn: "conn-failure empty-response"}},
			model.RetryLines{Mode: "http", Redispatch: 1, Retries: n(3), RetryOn: "conn-failure empty-response"}},
		{"all from defaults", []retrySection{{}, {Mode: "tcp", Redispatch: &models.Redispatch{Enabled: &on, Interval: i64(1)}, Retries: i64(3)}},
			model.RetryLines{Mode: "tcp", Redispatch: 1, Retries: n(3)}},
		{"bare option redispatch is HAProxy's -1", []retrySection{{Redispatch: &models.Redispatch{Enabled: &on}}}, model.RetryLines{Redispatch: -1}},
		{"no option redispatch in the backend wins over defaults", []retrySection{{Redispatch: &models.Redispatch{Enabled: &off}}, {Redispatch: &models.Redispatch{Enabled: &on, Interval: i64(1)}}},
			model.RetryLines{}},
		{"backend retries over defaults'", []retrySection{{Retries: i64(1)}, {Retries: i64(3)}}, model.RetryLines{Retries: n(1)}},
		{"option allbackups from defaults", []retrySection{{}, {AllBackups: on}}, model.RetryLines{AllBackups: true}},
		{"no option allbackups in the backend wins", []retrySection{{AllBackups: off}, {AllBackups: on}}, model.RetryLines{}},
		{"mode and retry-on from the second defaults", []retrySection{{}, {Retries: i64(3)}, {Mode: "http", RetryOn: "all-retryable-errors"}},
			model.RetryLines{Mode: "http", Retries: n(3), RetryOn: "all-retryable-errors"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.sections[0]
			for _, from := range tc.sections[1:] {
				s = s.inherit(from)
			}
			if got := s.retryLines(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("retryLines() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRetrySectionComplete(t *testing.T) {
	on := "enabled"
	three := int64(3)
	r := &models.Redispatch{Enabled: &on}
	for _, tc := range []struct {
		s    retrySection
		want bool
	}{
		{retrySection{}, false},
		{retrySection{Mode: "tcp", Redispatch: r, Retries: &three}, true},
		{retrySection{Mode: "http", Redispatch: r, Retries: &three}, false},
		{retrySection{Mode: "http", Redispatch: r, Retries: &three, RetryOn: "conn-failure"}, true},
		{retrySection{Redispatch: r, Retries: &three}, false}, // mode may come from defaults
	} {
		if got := tc.s.complete(); got != tc.want {
			t.Errorf("%+v.complete() = %v, want %v", tc.s, got, tc.want)
		}
	}
}
