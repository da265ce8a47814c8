package runtimeapi

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/pair"
)

// Process identifies the HAProxy worker that answers the socket: its process
// id and start time from "show info" (Pid, and Start_time_sec where the
// version gives it). A reload starts a new worker, so the identity changes
// with every reload, whoever asked for it, on every version from 2.6 on; a
// restart changes it too.
func (c *Client) Process(ctx context.Context) (string, error) {
	reply, err := c.sock.Command(ctx, "show info")
	if err != nil {
		return "", err
	}
	id, ok := processOf(reply)
	if !ok {
		return "", &CommandError{Command: "show info", Reply: "no Pid line"}
	}
	return id, nil
}

// processOf reads a worker's identity from a "show info" reply: its Pid,
// with its Start_time_sec when there is one (a pid can be reused).
func processOf(reply string) (string, bool) {
	var pid, start string
	for _, line := range strings.Split(reply, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "Pid":
			pid = strings.TrimSpace(v)
		case "Start_time_sec":
			start = strings.TrimSpace(v)
		}
	}
	if pid == "" {
		return "", false
	}
	if start != "" {
		return pid + "@" + start, true
	}
	return pid, true
}

// ProcessInfo reads, from "show info", what package pair compares with the
// Data Plane API's view of its HAProxy: the worker's Pid, node and
// Uptime_sec.
func (c *Client) ProcessInfo(ctx context.Context) (pair.Process, error) {
	reply, err := c.sock.Command(ctx, "show info")
	if err != nil {
		return pair.Process{}, err
	}
	p := ParseProcessInfo(reply)
	if p.PID == 0 {
		return pair.Process{}, &CommandError{Command: "show info", Reply: "no Pid line"}
	}
	return p, nil
}

// ParseProcessInfo reads a "show info" reply's Pid, node and Uptime_sec;
// what is missing stays zero (HasUptime false).
func ParseProcessInfo(reply string) pair.Process {
	var p pair.Process
	for _, line := range strings.Split(reply, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Pid":
			p.PID, _ = strconv.ParseInt(v, 10, 64)
		case "node": // HAProxy prints this one in lower case
			p.Node = v
		case "Uptime_sec":
			if s, err := strconv.ParseInt(v, 10, 64); err == nil {
				p.Uptime, p.HasUptime = time.Duration(s)*time.Second, true
			}
		}
	}
	return p
}
