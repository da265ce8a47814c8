package reconcile

import (
	"cmp"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// ZoneCount is how many of a zone's desired servers there are, and how many
// of them Kubernetes says are ready.
type ZoneCount struct {
	Servers int `json:"servers"`
	Ready   int `json:"ready"`
	// Backup says the zone's servers are backup ones (not the local zone).
	Backup bool `json:"backup"`
}

// UnknownZone names the zone of servers whose zone Kubernetes does not give.
const UnknownZone = "unknown"

// zoneCounts counts want's servers by zone when a local zone is set (nil
// otherwise), for the result and the metrics: an operator sees at once
// whether the local zone has servers to take its traffic.
func zoneCounts(want model.Backend, local string) map[string]ZoneCount {
	if local == "" {
		return nil
	}
	out := map[string]ZoneCount{local: {}}
	for _, s := range want.Servers {
		z := cmp.Or(s.Zone, UnknownZone)
		c := out[z]
		c.Servers++
		if s.State == model.Ready {
			c.Ready++
		}
		out[z] = c
	}
	for z, c := range out {
		c.Backup = z != local
		out[z] = c
	}
	return out
}
