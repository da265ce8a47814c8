package reconcile

import (
	"net"
	"strconv"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// PlannedChange is one change of a dry run's plan, the server before and
// after side by side, so that a plan can be read without HAProxy at hand.
type PlannedChange struct {
	Server string      `json:"server"`
	Action plan.Action `json:"action"`
	// From is the server as HAProxy has it (nil for an add), To as the plan
	// leaves it (nil for a delete).
	From *PlannedServer `json:"from,omitempty"`
	To   *PlannedServer `json:"to,omitempty"`
}

// PlannedServer is what a plan says of one server.
type PlannedServer struct {
	// Address is address:port.
	Address string      `json:"address"`
	State   model.State `json:"state"`
	Weight  int         `json:"weight"`
}

// planned lists p's changes with each server's address, state and weight.
func planned(p plan.Plan) []PlannedChange {
	out := make([]PlannedChange, 0, len(p.Changes))
	for _, ch := range p.Changes {
		out = append(out, PlannedChange{Server: ch.Name, Action: ch.Action, From: plannedServer(ch.Old), To: plannedServer(ch.New)})
	}
	return out
}

func plannedServer(s *model.Server) *PlannedServer {
	if s == nil {
		return nil
	}
	return &PlannedServer{Address: net.JoinHostPort(s.Address, strconv.Itoa(s.Port)), State: s.State, Weight: s.Weight}
}
