package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/alarm"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// alarmPeriod is how often serve probes its targets and certificate files
// (package alarm), whether or not a reconcile runs: an HAProxy that stops
// answering is warned about within it, well inside its first minute.
const alarmPeriod = 20 * time.Second

// alarms is serve's book of problems, its gauge alarms{kind,subject}.
func alarms(log *slog.Logger, m *metrics.Metrics) *alarm.Book {
	return &alarm.Book{Log: log, OnChange: func(k alarm.Kind, subject string, open bool) { m.Alarm(string(k), subject, open) }}
}

// probe reads every backend of every target once (bounded by the reconcile
// timeout, and by the period), and loads the runtime socket's certificate
// pair, as a connection would.
func probe(ctx context.Context, book *alarm.Book, cfg config.Config, rec *reconcile.Reconciler) {
	backends := make([]string, 0, len(rec.Options.Backends))
	for _, pb := range rec.Options.Backends {
		backends = append(backends, pb.Backend)
	}
	book.Probe(ctx, rec.Targets, backends, min(cfg.ReconcileTimeout, alarmPeriod))
	if cfg.RuntimeTLS != nil {
		_, err := cfg.RuntimeTLS.ClientConfig("")
		detail := ""
		if err != nil {
			detail = err.Error()
		}
		book.Observe(alarm.TLSPair, cfg.RuntimeTLS.Files().Cert, err != nil, detail)
	}
}
