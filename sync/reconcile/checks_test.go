package reconcile

import (
	"slices"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

func TestTCPCheckedHealthPorts(t *testing.T) {
	l4 := &model.Runtime{CheckRunning: true, CheckPassed: true, CheckL4: true}
	l7 := &model.Runtime{CheckRunning: true, CheckPassed: true}
	health := model.Check{Port: 31000}
	tests := []struct {
		name    string
		servers []model.Server
		want    []string
	}{
		{name: "no check port: a TCP check of the NodePort is the plain case",
			servers: []model.Server{{Name: "a", Runtime: l4}}},
		{name: "health port checked over HTTP", servers: []model.Server{{Name: "a", Check: health, Runtime: l7}}},
		{name: "health port checked by a TCP connect", servers: []model.Server{
			{Name: "a", Check: health, Runtime: l4}, {Name: "b", Check: health, Runtime: l7}, {Name: "c", Check: health, Runtime: l4}},
			want: []string{"a", "c"}},
		{name: "no runtime view (Data Plane API)", servers: []model.Server{{Name: "a", Check: health}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tcpCheckedHealthPorts(model.Backend{Name: "be", Servers: tt.servers}); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
