package history

import (
	"testing"
	"time"
)

// TestKubeFailureIsBounded: the Kubernetes-unreachable excuse of a failed
// reconcile holds only for a Kubernetes read's error, in a reconcile whose
// span (less failureBound) meets an outage.
func TestKubeFailureIsBounded(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	outages := [][2]time.Time{{at(10), at(14)}}
	read := "read kubernetes: get service hist/web: connection reset by peer"
	for _, c := range []struct {
		name        string
		began, end  float64
		err         string
		wantExcused bool
	}{
		{"read failing in the outage", 11, 11.5, read, true},
		{"began before, ended in it", 9, 10.2, read, true},
		{"began within failureBound of its end", 14.8, 15, read, true},
		{"began well after it", 15.5, 16, read, false},
		{"ended before it", 8, 9.5, read, false},
		{"another error in the outage", 11, 11.5, "add server be/n-1: refused", false},
		{"the API server's answer in the outage", 11, 11.5, "read kubernetes: get service hist/web: services \"web\" is forbidden", false},
	} {
		o := obs{began: at(c.began), at: at(c.end)}
		if got := kubeFailure(outages, o, c.err); got != c.wantExcused {
			t.Errorf("%s: excused %v, want %v", c.name, got, c.wantExcused)
		}
	}
	if kubeFailure(nil, obs{began: at(11), at: at(12)}, read) {
		t.Error("excused with no outage")
	}
}

// TestKubeOutagesAndRecovery: outages run from KubeDown to KubeUp (or the
// last observation), and the watch's recovery after one is as long as the
// outage, 30 s at most, and 0.5 s.
func TestKubeOutagesAndRecovery(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	all := []obs{
		{at: t0, kind: obsStep},
		{at: t0.Add(time.Second), kind: obsKube, hung: true},
		{at: t0.Add(4 * time.Second), kind: obsKube, hung: false},
		{at: t0.Add(5 * time.Second), kind: obsKube, hung: true},
		{at: t0.Add(70 * time.Second), kind: obsStep},
	}
	got := kubeOutages(all)
	if len(got) != 2 || !got[0][0].Equal(t0.Add(time.Second)) || !got[0][1].Equal(t0.Add(4*time.Second)) || !got[1][1].Equal(t0.Add(70*time.Second)) {
		t.Fatalf("outages %v", got)
	}
	if r := kubeRecovery(got[0]); r != 3500*time.Millisecond {
		t.Errorf("recovery after 3 s: %v, want 3.5 s", r)
	}
	if r := kubeRecovery(got[1]); r != 30500*time.Millisecond {
		t.Errorf("recovery after 65 s: %v, want 30.5 s", r)
	}
}
