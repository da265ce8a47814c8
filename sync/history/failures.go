package history

import (
	"regexp"
	"strings"
	"time"
)

// Why a reconcile may fail (invariant failures-explained): each excuse is
// bounded to the reconcile's own span.

// failureBound is how far before a reconcile began a reload or a refused
// API write may explain its failure: a retry's backoff and a read.
const failureBound = time.Second

// failureExcuse says why target i's failure f in reconcile o breaks no
// invariant, empty when nothing the history did explains it. Each excuse is
// bounded to the reconcile's own span (less failureBound before it began):
// the target hung (or stopped within HungAfter), its Data Plane API refused
// a write (an injected fault), it reloaded, or every change HAProxy refused
// was the refused pod's server's.
func failureExcuse(tts []*targetTrack, i int, o obs, f targetFailure, refusedName string) string {
	if i < 0 || i >= len(tts) {
		return ""
	}
	tt, from := tts[i], o.began.Add(-failureBound)
	if refusedName != "" && len(f.servers) > 0 && strings.Contains(f.err, refusedKeyword) {
		only := true
		for _, s := range f.servers {
			only = only && serverPodName(s) == refusedName
		}
		if only {
			return "HAProxy refused the refused pod's server"
		}
	}
	switch {
	case !tt.hungSince.IsZero() && tt.hungSince.Before(o.at),
		!tt.unhungAt.IsZero() && tt.unhungAt.After(o.began.Add(-HungAfter)):
		return ExcuseHung
	case !tt.lastFault.IsZero() && tt.lastFault.After(from):
		return "its Data Plane API refused a write"
	case downDuring(tt, from, o.at):
		return ExcuseDown
	case !tt.reloadStart.IsZero():
		return "a reload by others"
	}
	// A reload by others that ended since the reconcile began (less
	// failureBound); the API's own reloads, which a reconcile that writes
	// makes itself, excuse nothing.
	if n := len(tt.reloads); n > 0 && tt.reloads[n-1][1].After(from) {
		return "a reload by others"
	}
	return ""
}

// refusedKeyword is what makes HAProxy refuse the refused pod's server.
const refusedKeyword = "hks-refused-by-history"

// serverPodName is the name of the pod whose server is named name (pod
// mode: [CLUSTER_NAME-]NAME, "_bk" after a backup's), empty if none.
func serverPodName(name string) string {
	m := serverName.FindStringSubmatch(name)
	if m == nil {
		return ""
	}
	return "p-" + m[1]
}

var serverName = regexp.MustCompile(`(?:^|-)p-(\d+)(?:_bk)?$`)

// kubeFailure says whether err, a reconcile o's, is its Kubernetes read
// failing while the API server was unreachable from the service: an
// outage that meets the reconcile's span (less failureBound).
func kubeFailure(outages [][2]time.Time, o obs, err string) bool {
	if !strings.Contains(err, kubeReadError) || !brokenConnection(err) {
		return false // an API server's answer (403, 404) is none of an outage's doing
	}
	for _, k := range outages {
		if !k[0].After(o.at) && !k[1].Before(o.began.Add(-failureBound)) {
			return true
		}
	}
	return false
}

// kubeReadError is how a reconcile says its Kubernetes read failed
// (package reconcile).
const kubeReadError = "read kubernetes: "

// brokenConnection says whether err is a connection that broke or was
// refused, as an unreachable API server's are.
func brokenConnection(err string) bool {
	for _, s := range []string{"EOF", "connection reset", "connection refused", "broken pipe", "i/o timeout", "http2: client connection lost"} {
		if strings.Contains(err, s) {
			return true
		}
	}
	return false
}

// downDuring says whether tt's socket or API refused connections at some
// time in [from, to].
func downDuring(tt *targetTrack, from, to time.Time) bool {
	for _, d := range tt.downs {
		if !d[0].After(to) && (d[1].IsZero() || !d[1].Before(from)) {
			return true
		}
	}
	return false
}
