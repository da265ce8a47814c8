package history

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// Slot histories (SlotsSetupOf, make replay … SHAPE=slots): be's servers
// are declared as slots in haproxy.cfg, as docs/haproxy.md recommends for
// the admin socket alone, and reloads by others save the server state
// first as its systemd drop-in does, or do not (state lost).

// SlotSetup is be's slots in a slot history; the zero value: none.
type SlotSetup struct {
	// N is the number of slots of each instance (server-template 1-N),
	// Backup the number of its backup slots (histories with zones: a
	// backup server fills only a backup slot).
	N, Backup int
	// Save says whether a reload by others saves the server state first
	// (the drop-in): saveAlways, saveNever, or saveDrawn (each reload
	// draws it: a reload without it loads the last dump, stale).
	Save string
}

const (
	saveAlways = "always"
	saveNever  = "never"
	saveDrawn  = "drawn"
)

func (s SlotSetup) String() string {
	if s.N == 0 {
		return "none"
	}
	b := ""
	if s.Backup > 0 {
		b = fmt.Sprintf("+%db", s.Backup)
	}
	return fmt.Sprintf("%d%s save=%s", s.N, b, s.Save)
}

// SlotsSetupOf is a slot history's setup: SetupOf's with the runtime driver
// (slots are the socket's: with the Data Plane API haproxy.cfg holds the
// servers), and be's slots drawn from a stream of their own: 3 to 16, so
// that the 12 or 16 pods of a history exhaust them in some; the state
// saved before every reload in half, before none in a quarter, drawn at
// each in the rest. No refused pod: HAProxy refuses an "add server" line,
// and a pod in a slot has none.
func SlotsSetupOf(seed uint64, _ Driver) Setup {
	s := SetupOf(seed, Runtime)
	r := rand.New(rand.NewPCG(seed^0x5107, seed*17+3))
	s.Slots.N = []int{3, 5, 8, 10, 12, 16}[r.IntN(6)]
	if s.Zones {
		s.Slots.Backup = 1 + r.IntN(4) // every third pod is another zone's
	}
	s.Slots.Save = []string{saveAlways, saveAlways, saveNever, saveDrawn}[r.IntN(4)]
	s.Config.Refused = 0
	return s
}

// slotPrefixes are the slots' name prefixes, one per instance: each
// starts with its CLUSTER_NAME, which owns it (model.Owns).
func (w *world) slotPrefixes() []string {
	first := w.cfg.ServerPrefix()
	if w.setup.Config.Writer2 == "cluster" {
		return []string{first, cluster2 + "-"}
	}
	return []string{first}
}

// slotName matches a slot's name: [CLUSTER_NAME-]k8sN, k8sbN a backup's.
var slotName = regexp.MustCompile(`^(?:[a-z]+-)?k8sb?\d+$`)

// backupSlot matches a backup slot's name.
var backupSlot = regexp.MustCompile(`^(?:[a-z]+-)?k8sb\d+$`)

// declareSlots writes be's slots into every target's haproxy.cfg and
// reloads it, before the service starts: the static server first (no
// default-server line for it, it is another's), then the service's check
// as default-server (a slot's check is haproxy.cfg's, HAPROXY_CHECK_* as
// docs/haproxy.md says to copy them), then each instance's templates.
func (w *world) declareSlots() {
	var lines []string
	if w.setup.Static {
		lines = append(lines, fmt.Sprintf("server static %s:%d check", podAddr(staticPod), w.port))
	}
	lines = append(lines, "default-server "+defaultServerKeywords(w.check))
	for _, p := range w.slotPrefixes() {
		lines = append(lines, fmt.Sprintf("server-template %sk8s 1-%d k8s.invalid:1 check init-addr last,0.0.0.0", p, w.setup.Slots.N))
		if w.setup.Slots.Backup > 0 {
			lines = append(lines, fmt.Sprintf("server-template %sk8sb 1-%d k8s.invalid:1 check init-addr last,0.0.0.0 backup", p, w.setup.Slots.Backup))
		}
	}
	for _, tg := range w.targets {
		tg.h.SetServers(w.t, backend, lines)
		tg.h.Reload(w.t)
	}
}

// defaultServerKeywords are check ck as default-server keywords.
func defaultServerKeywords(ck model.Check) string {
	s := fmt.Sprintf("inter %dms fastinter %dms downinter %dms rise %d fall %d",
		ck.Inter.Milliseconds(), ck.FastInter.Milliseconds(), ck.DownInter.Milliseconds(), ck.Rise, ck.Fall)
	if ck.OnError != "" {
		s += " observe layer4 error-limit 1 on-error " + ck.OnError
	}
	if ck.SendProxyV2 {
		s += " send-proxy-v2 check-send-proxy"
	}
	return s
}

// slotReload is what a reload by others in a slot history kept: the state
// saved first, and the pods whose servers were outside the slots (added
// with "add server": the reload drops them whatever was saved), by
// number; -1 when the socket did not say.
type slotReload struct {
	saved    bool
	overflow []int
}

// saves draws whether this reload saves the state first.
func (tg *target) saves() bool {
	switch tg.slots.Save {
	case saveAlways:
		return true
	case saveDrawn:
		return tg.saveDraw.IntN(2) == 0
	}
	return false
}

// prepareReload saves the state as the drop-in does, when this reload
// does, and counts the servers outside the slots before and after: a
// reload loses only those when the state is saved.
func (tg *target) prepareReload() slotReload {
	var sr slotReload
	if tg.slots.N == 0 {
		return sr
	}
	sr.overflow = tg.overflow()
	if tg.saves() {
		// A dump that fails leaves no state file: that reload loses it.
		sr.saved = tg.h.SaveState() == nil
		// The service may have added one since the first read.
		for _, n := range tg.overflow() {
			if !slices.Contains(sr.overflow, n) {
				sr.overflow = append(sr.overflow, n)
			}
		}
	}
	return sr
}

// overflow lists the pods of be's servers that are no slot and not the
// static one (added with "add server"), by address; [-1] when the socket
// did not answer (any pod may have had one).
func (tg *target) overflow() []int {
	reply, err := tg.h.Command("show servers state " + backend)
	if err != nil {
		return []int{-1}
	}
	return overflowOf(reply)
}

// overflowOf reads overflow's pods from a "show servers state" reply.
func overflowOf(reply string) []int {
	var pods []int
	for _, l := range strings.Split(reply, "\n") {
		f := strings.Fields(l)
		if len(f) < 19 || f[1] != backend || f[3] == "static" || strings.HasSuffix(f[17], ".invalid") {
			continue
		}
		// By the pods' addresses as they are now (loopback, or the
		// private network's once TestMain chose it): a server at no pod's
		// address is none of a pod's, and holds no pod's requests.
		if n, ok := podOfAddr(f[4]); ok {
			pods = append(pods, n)
		}
	}
	return pods
}

// overflowHolds says whether pod n's server was outside the slots at the
// reload whose overflow is ov: the reload may have dropped it.
func overflowHolds(ov []int, n int) bool {
	return slices.Contains(ov, n) || slices.Contains(ov, -1)
}

// idleSlotDiffs takes be's idle slots (at the placeholder address) out of
// running, so that no invariant takes them for pods, and says how they
// differ from the idle look (maintenance, check paused, 0.0.0.0:1) and
// whether a slot of haproxy.cfg is missing.
func (w *world) idleSlotDiffs(running map[string]haproxytest.Server) []string {
	if w.setup.Slots.N == 0 {
		return nil
	}
	var diffs []string
	count := map[string]int{}
	for name, s := range running {
		if !slotName.MatchString(name) {
			continue
		}
		count[strings.TrimRight(name, "0123456789")]++
		if s.Address != "0.0.0.0" {
			continue
		}
		if !s.Maint() || s.CheckRunning() || s.Port != 1 {
			diffs = append(diffs, fmt.Sprintf("idle slot %s does not look idle: maint=%v check running=%v port %d", name, s.Maint(), s.CheckRunning(), s.Port))
		}
		delete(running, name)
	}
	for _, p := range w.slotPrefixes() {
		if n := count[p+"k8s"]; n != w.setup.Slots.N {
			diffs = append(diffs, fmt.Sprintf("%d slots %sk8s*, haproxy.cfg declares %d", n, p, w.setup.Slots.N))
		}
		if n := count[p+"k8sb"]; n != w.setup.Slots.Backup {
			diffs = append(diffs, fmt.Sprintf("%d backup slots %sk8sb*, haproxy.cfg declares %d", n, p, w.setup.Slots.Backup))
		}
	}
	return diffs
}

// Why a reload by others lets requests fail and servers lag (runtime
// driver): it dropped what the service added (ExcuseReload: no slots, or
// the state not saved), or only the servers beyond the slots
// (ExcuseOverflow). A slot history's reload that saved the state with no
// server beyond the slots is excused nothing: it loses nothing.
const ExcuseOverflow = "a reload by others dropped the servers beyond the slots"

// reloadExcuse is what a reload by others that starts with o excuses.
func reloadExcuse(opt evalOptions, o obs) string {
	switch {
	case !opt.RuntimeOnly:
		return ""
	case !opt.Slots || !o.saved:
		return ExcuseReload
	case len(o.overflow) > 0:
		return ExcuseOverflow
	}
	return ""
}

// reloadKind names a slot history's reload by others for the report.
func reloadKind(o obs) string {
	switch {
	case !o.saved:
		return "state lost"
	case len(o.overflow) > 0:
		return "state saved, servers beyond the slots"
	}
	return "state saved"
}

// reloadLag says whether a reload by others under way at at, or one that
// ended within bound before, excuses a failed request or a lagging server
// there, since when (the reload's start), and (ExcuseOverflow) the pods
// whose servers it may have dropped.
func (tt *targetTrack) reloadLag(at time.Time, bound time.Duration) (string, time.Time, []int) {
	if !tt.reloadStart.IsZero() && tt.startWhy != "" {
		return tt.startWhy, tt.reloadStart, tt.startOverflow
	}
	if n := len(tt.reloads); n > 0 && at.Sub(tt.reloads[n-1][1]) <= bound && tt.reloadWhy[n-1] != "" {
		return tt.reloadWhy[n-1], tt.reloads[n-1][0], tt.reloadOverflow[n-1]
	}
	return "", time.Time{}, nil
}

// keptServing says whether the reload whose lag is ExcuseOverflow at at
// kept a server in traffic: a pod ready and answering past its entry whose
// server was in a slot (or the static one, haproxy.cfg's). Then a failed
// request is not the dropped servers' doing.
func (tt *targetTrack) keptServing(pods map[int]*podTrack, b Bounds, at time.Time) bool {
	_, _, over := tt.reloadLag(at, b.Reload)
	for n, p := range pods {
		if p.available() && at.Sub(p.since) >= p.entry(b) && !overflowHolds(over, n) {
			return true
		}
	}
	return false
}

// lastLossy is the end of the last reload by others that excuses a lag.
func (tt *targetTrack) lastLossy() (time.Time, bool) {
	end, _, ok := tt.lastLossyWhy()
	return end, ok
}

// lastLossyWhy is lastLossy with what it excuses.
func (tt *targetTrack) lastLossyWhy() (time.Time, string, bool) {
	for i := len(tt.reloads) - 1; i >= 0; i-- {
		if tt.reloadWhy[i] != "" {
			return tt.reloads[i][1], tt.reloadWhy[i], true
		}
	}
	return time.Time{}, "", false
}

// lastDropped is the end of the last reload by others that dropped every
// server the service added (ExcuseReload): not one that kept the slots'
// (ExcuseOverflow), whose pods in slots serve on (the second reader: such
// a reload excused a failure through a slot that kept serving).
func (tt *targetTrack) lastDropped() (time.Time, bool) {
	end, why, ok := tt.lastLossyWhy()
	return end, ok && why == ExcuseReload
}
