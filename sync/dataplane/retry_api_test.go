package dataplane_test

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// TestReadRetryLinesThroughDefaults: Read reports the recommended lines as
// HAProxy runs them, the backend's own first, then its defaults section's
// (and the one that is from), and asks for a defaults section only while a
// line is still unset.
func TestReadRetryLinesThroughDefaults(t *testing.T) {
	on, rr := "enabled", "roundrobin"
	one, three := int64(1), int64(3)
	recommended := &models.Redispatch{Enabled: &on, Interval: &one}
	for _, tc := range []struct {
		name         string
		backend      models.BackendBase
		defaults     []models.DefaultsBase
		want         []string // Missing()
		defaultsGETs int
	}{
		{name: "plain http backend", backend: models.BackendBase{Mode: "http", From: "d1"},
			defaults: []models.DefaultsBase{{Name: "d1"}}, want: []string{model.LineRedispatch, model.LineRetryOn}, defaultsGETs: 1},
		{name: "plain tcp backend", backend: models.BackendBase{Mode: "tcp", From: "d1"},
			defaults: []models.DefaultsBase{{Name: "d1"}}, want: []string{model.LineRedispatch}, defaultsGETs: 1},
		{name: "tcp backend with its own lines asks nothing more", backend: models.BackendBase{Mode: "tcp", From: "d1", Redispatch: recommended, Retries: &three},
			defaults: []models.DefaultsBase{{Name: "d1", Retries: &one}}, want: nil, defaultsGETs: 0},
		{name: "http backend, lines in its defaults", backend: models.BackendBase{Mode: "http", From: "d1"},
			defaults: []models.DefaultsBase{{Name: "d1", Redispatch: recommended, Retries: &three, RetryOn: "conn-failure empty-response"}}, want: nil, defaultsGETs: 1},
		{name: "defaults from defaults", backend: models.BackendBase{Mode: "http", From: "d1"},
			defaults: []models.DefaultsBase{{Name: "d1", From: "d0", RetryOn: "all-retryable-errors"}, {Name: "d0", Redispatch: recommended, Retries: &one}},
			want:     []string{model.LineRetries}, defaultsGETs: 2},
		{name: "no defaults section", backend: models.BackendBase{Mode: "http"}, want: []string{model.LineRedispatch, model.LineRetryOn}, defaultsGETs: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := dataplanetest.New(t, dataplanetest.Options{})
			for _, d := range tc.defaults {
				api.AddDefaults(models.Defaults{DefaultsBase: d})
			}
			be := tc.backend
			be.Name, be.Balance, be.AdvCheck = "be", &models.Balance{Algorithm: &rr}, "tcp-check"
			api.AddBackend(models.Backend{BackendBase: be})
			u, _ := url.Parse(api.URL)
			hc, err := dataplane.NewHTTPClient("", 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got, err := dataplane.New(u, dataplane.Auth{}, hc).Read(context.Background(), "be")
			if err != nil {
				t.Fatal(err)
			}
			if got.Retry == nil {
				t.Fatal("Read: Retry = nil, want the lines read")
			}
			if m := got.Retry.Missing(); !slices.Equal(m, tc.want) {
				t.Errorf("missing = %q, want %q (read %+v)", m, tc.want, *got.Retry)
			}
			gets := 0
			for _, r := range api.Requests() {
				if r.Method == "GET" && strings.Contains(r.Path, "/configuration/defaults/") {
					gets++
				}
			}
			if gets != tc.defaultsGETs {
				t.Errorf("defaults sections read %d times, want %d: %+v", gets, tc.defaultsGETs, api.Requests())
			}
		})
	}
}
