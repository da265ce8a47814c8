package history

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestClassEvaluate: what classEvaluate reports and excuses, on
// observations written by hand. Port 0 is claimed by c-0 and c-2, port 1
// by c-1; the settled moment at 1 s found c-0 holding port 0 and c-1
// port 1.
func TestClassEvaluate(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	b := Bounds{Entry: 2 * time.Second, Move: 2 * time.Second, Abrupt: 700 * time.Millisecond, Reload: 2 * time.Second, Converge: 10 * time.Second}
	start := []classObs{
		{at: at(0), kind: cStep, step: -1, claims: []int{0, 1, 0}},
		{at: at(1000), kind: cSettled, holders: []int{0, 1, -1}},
	}
	answered := func(ms, port, svc int) classObs { return classObs{at: at(ms), kind: cRequest, port: port, svc: svc} }
	failed := func(ms, sent, port int) classObs {
		return classObs{at: at(ms), began: at(sent), kind: cRequest, port: port, svc: -1, err: "read tcp 127.0.0.1:1->127.0.0.91:2: i/o timeout"}
	}
	step := func(ms, i int, claims ...int) classObs {
		return classObs{at: at(ms), kind: cStep, step: i, claims: claims}
	}
	for _, c := range []struct {
		name   string
		obs    []classObs
		want   []Invariant
		excuse string
	}{
		{name: "each port answered by its holder", obs: []classObs{answered(2000, 0, 0), answered(2000, 1, 1)}},
		{name: "a claimant answers on the holder's port", obs: []classObs{answered(2000, 0, 2)}, want: []Invariant{HolderKeeps}},
		{name: "a Service that never claimed the port answers", obs: []classObs{answered(2000, 1, 0)}, want: []Invariant{OthersUntouchedAcross}},
		{
			name: "the holder moved away: the claimant may take the port",
			obs:  []classObs{step(2000, 0, 2, 1, 0), answered(3000, 0, 2)},
		},
		{
			name: "the old holder still answers within the converge bound of moving away",
			obs:  []classObs{step(2000, 0, 2, 1, 0), answered(5000, 0, 0)},
		},
		{
			name: "the old holder answers past the converge bound",
			obs:  []classObs{step(2000, 0, 2, 1, 0), answered(12500, 0, 0)},
			want: []Invariant{OthersUntouchedAcross},
		},
		{
			name: "the holder left and came back: no longer the settled holder",
			obs:  []classObs{step(2000, 0, -1, 1, 0), step(2500, 1, 0, 1, 0), answered(3000, 0, 2)},
		},
		{name: "a failure while the holder holds", obs: []classObs{failed(3000, 2900, 0)}, want: []Invariant{NoFailedRequest}},
		{name: "the other install's Service answered by its pod", obs: []classObs{answered(3000, otherPortIdx, 0)}},
		{
			name: "a failure through the other install's Service, even while the class's claims change and a target is down",
			obs:  []classObs{step(2000, 0, 2, 1, 0), {at: at(2100), kind: cDown, on: true}, {at: at(2200), kind: cDeath, svc: 0}, failed(2500, 2400, otherPortIdx)},
			want: []Invariant{OthersUntouchedAcross},
		},
		{name: "a pod of the other install answers a port of the class", obs: []classObs{answered(3000, 0, -1)}, want: []Invariant{OthersUntouchedAcross}},
		{name: "a failure on a port nobody claims", obs: []classObs{step(2000, 0, 0, 1, -1), failed(3000, 2900, 2)}, excuse: ExcuseUnclaimed},
		{
			name:   "a failure on a port just claimed",
			obs:    []classObs{step(2000, 0, 0, 1, 2), failed(3000, 2900, 2)},
			excuse: ExcuseClaimChanged,
		},
		{
			name: "a failure on a port claimed, unchanged for the converge bound, no holder settled",
			obs:  []classObs{step(2000, 0, 0, 1, 2), failed(12500, 12400, 2)},
			want: []Invariant{NoFailedRequest},
		},
		{
			name:   "a failure within the abrupt bound of the holder's pod's death",
			obs:    []classObs{{at: at(2800), kind: cDeath, svc: 0}, failed(3000, 2950, 0)},
			excuse: ExcuseDeath,
		},
		{
			name:   "a failure under way when the holder's pod died",
			obs:    []classObs{{at: at(2800), kind: cDeath, svc: 0}, failed(6000, 2000, 0)},
			excuse: ExcuseDeathInFlight,
		},
		{
			name: "a failure past the abrupt bound of another Service's pod's death",
			obs:  []classObs{{at: at(2800), kind: cDeath, svc: 1}, failed(3000, 2950, 0)},
			want: []Invariant{NoFailedRequest},
		},
		{
			name:   "a failure just after a reload while a killed pod of the holder is in Kubernetes",
			obs:    []classObs{{at: at(2000), kind: cDeath, svc: 0}, {at: at(4100), began: at(4000), kind: cReload}, failed(4500, 4400, 0)},
			excuse: ExcuseReloadLoadsUp,
		},
		{
			name: "a failure just after a reload once the killed pod was noticed",
			obs: []classObs{{at: at(2000), kind: cDeath, svc: 0}, {at: at(3000), kind: cNotice, svc: 0},
				{at: at(4100), began: at(4000), kind: cReload}, failed(4500, 4400, 0)},
			want: []Invariant{NoFailedRequest},
		},
		{
			name:   "through a target that is down, the old holder answers long after it moved away",
			obs:    []classObs{{at: at(1500), kind: cDown, target: 1, on: true}, step(2000, 0, 2, 1, 0), {at: at(12500), kind: cRequest, target: 1, port: 0, svc: 0}},
			excuse: "",
		},
		{
			name: "through the target that is up, the old holder answers long after it moved away",
			obs:  []classObs{{at: at(1500), kind: cDown, target: 1, on: true}, step(2000, 0, 2, 1, 0), answered(12500, 0, 0)},
			want: []Invariant{OthersUntouchedAcross},
		},
		{
			name: "through a target that came back more than the converge bound ago",
			obs: []classObs{{at: at(1500), kind: cDown, target: 1, on: true}, step(2000, 0, 2, 1, 0), {at: at(3000), kind: cDown, target: 1},
				{at: at(13500), kind: cRequest, target: 1, port: 0, svc: 0}},
			want: []Invariant{OthersUntouchedAcross},
		},
		{
			name:   "a failure through a target that is down, on a port whose claims changed long ago",
			obs:    []classObs{{at: at(1500), kind: cDown, target: 1, on: true}, step(2000, 0, 2, 1, 0), {at: at(12500), began: at(12400), kind: cRequest, target: 1, port: 0, svc: -1, err: "x"}},
			excuse: ExcuseTargetDown,
		},
		{
			name: "a failure through a target that is down, of the holder settled there before",
			obs: []classObs{{at: at(1000), kind: cSettled, target: 1, holders: []int{0, 1, -1}}, {at: at(1500), kind: cDown, target: 1, on: true},
				{at: at(3000), began: at(2900), kind: cRequest, target: 1, port: 0, svc: -1, err: "x"}},
			want: []Invariant{NoFailedRequest},
		},
		{
			name: "a failure through a target that is down, of the holder settled there before, which lost a pod since",
			obs: []classObs{{at: at(1000), kind: cSettled, target: 1, holders: []int{0, 1, -1}}, {at: at(1500), kind: cDown, target: 1, on: true},
				{at: at(2000), kind: cGone, svc: 0}, {at: at(5000), began: at(4900), kind: cRequest, target: 1, port: 0, svc: -1, err: "x"}},
			excuse: ExcuseTargetDown,
		},
		{
			name: "a failure through the target that is up, of the holder, which lost a pod while the other was down",
			obs: []classObs{{at: at(1500), kind: cDown, target: 1, on: true},
				{at: at(2000), kind: cGone, svc: 0}, {at: at(5000), began: at(4900), kind: cRequest, target: 0, port: 0, svc: -1, err: "x"}},
			want: []Invariant{NoFailedRequest},
		},
		{
			name: "through a target that is down, a Service whose claim ended before the target's last settled moment answers",
			obs: []classObs{step(1200, 0, 0, 1, -1), {at: at(1300), kind: cSettled, target: 1, holders: []int{0, 1, -1}}, {at: at(1500), kind: cDown, target: 1, on: true},
				{at: at(12500), kind: cRequest, target: 1, port: 2, svc: 2}},
			want: []Invariant{OthersUntouchedAcross},
		},
		{
			name: "a failure through a target that is down, on a port whose claims did not change since it settled",
			obs: []classObs{step(1200, 0, 0, 1, 2), {at: at(1300), kind: cSettled, target: 1, holders: []int{0, 1, -1}}, {at: at(1500), kind: cDown, target: 1, on: true},
				{at: at(12500), began: at(12400), kind: cRequest, target: 1, port: 2, svc: -1, err: "x"}},
			want: []Invariant{NoFailedRequest},
		},
		{
			name: "a failure through the operator's frontend, during a reload",
			obs:  []classObs{{at: at(4100), began: at(4000), kind: cReload}, failed(4050, 4000, opPort)},
			want: []Invariant{OthersUntouchedAcross},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			judged(t, classEvaluate(append(append([]classObs{}, start...), c.obs...), b, classServices), c.want, c.excuse)
		})
	}
}

// TestClassStepsKeepAServingPod: whatever a seed draws, every Service that
// exists keeps a ready pod that answers (a holder can always serve), and
// over a few seeds every kind of step is drawn, c-2 (the oldest) joins a
// port another Service holds.
func TestClassStepsKeepAServingPod(t *testing.T) {
	kinds := map[Kind]int{}
	lateOldest := 0
	for seed := range uint64(20) {
		m := classStart()
		for i, st := range classSteps(seed, 40, 2) {
			claims := m.claims()
			if st.Kind == ClassJoin && st.Node == 2 && m.svcs[2].exists && slices.Contains(claims[:2], st.Target) {
				lateOldest++
			}
			m.apply(st)
			kinds[st.Kind]++
			for s, v := range m.svcs {
				if n, _ := m.count(s, cReady); v.exists && n == 0 {
					t.Fatalf("seed %d step %d (%s): %s has no ready pod", seed, i, st, className(s))
				}
			}
		}
	}
	for _, k := range []Kind{ClassJoin, ClassLeave, ClassPort, ClassDelete, ClassPodAdd, ClassPodTerm, ClassPodGone, ClassPodKill, ClassPodNotice, ClassCrash, ClassTargetDown, ClassTargetUp} {
		if kinds[k] == 0 {
			t.Errorf("no seed drew %s", k)
		}
	}
	if lateOldest == 0 {
		t.Error("c-2, the oldest, never joined a port another Service claims")
	}
}

// classRuns are make test's class histories.
var classRuns = []uint64{3, 4, 7}

// TestHistoriesClass runs the class histories of classRuns (the binary's
// serve in class mode, see class.go).
func TestHistoriesClass(t *testing.T) {
	skipUnlessFixed(t)
	for _, seed := range classRuns {
		t.Run(fmt.Sprintf("class-%d", seed), func(t *testing.T) {
			inPart(t)
			expectNone(t, RunClass(t, seed, classShortSteps))
		})
	}
}
