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

// Level is the level of the one line that says how a reconcile nobody
// waits for ended (a poke: the watch, the resync tick, the follow-up):
// info when it wrote to HAProxy, debug when it wrote nothing, so that a
// server waiting for its sessions or its check, which the follow-up looks
// at every second, does not write a line a second for as long as it waits.
// A failed reconcile is logged at error by the caller, whatever this says.
func Level(status string) slog.Level {
	if status == StatusApplied {
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
