package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/pair"
)

// ProcessInfo reads which HAProxy worker the API talks to (GET
// /services/haproxy/runtime/info: its pid, node name and uptime), for
// package pair to compare with the runtime socket's view.
func (c *Client) ProcessInfo(ctx context.Context) (pair.Process, error) {
	var pi models.ProcessInfo
	if _, err := c.do(ctx, http.MethodGet, "/runtime/info", nil, nil, &pi); err != nil {
		return pair.Process{}, err
	}
	return processOf(pi)
}

// processOf reads the spec's process_info; its error field is the API's
// own failure to ask HAProxy.
func processOf(pi models.ProcessInfo) (pair.Process, error) {
	if pi.Error != "" {
		return pair.Process{}, fmt.Errorf("GET /runtime/info: the API could not ask HAProxy: %s", pi.Error)
	}
	if pi.Info == nil || pi.Info.Pid == nil {
		return pair.Process{}, errors.New("GET /runtime/info: no pid in the answer")
	}
	p := pair.Process{PID: *pi.Info.Pid, Node: pi.Info.Node}
	if pi.Info.Uptime != nil {
		p.Uptime, p.HasUptime = time.Duration(*pi.Info.Uptime)*time.Second, true
	}
	return p, nil
}
