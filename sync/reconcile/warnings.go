package reconcile

import "log/slog"

// LogWarnings logs each of res's warnings (desired.Warning) at warn level,
// one line each, on log: the caller's logger, which names what triggered
// the reconcile. A configuration that matches nothing otherwise shows only
// as "desired": 0.
func (res Result) LogWarnings(log *slog.Logger) {
	for _, w := range res.Warnings {
		log.Warn("configuration matches nothing in Kubernetes", "warning", w.Reason, "message", w.Message)
	}
}
