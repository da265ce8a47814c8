package runtimeapi

import (
	"bufio"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// Stat is what "show stat" says of a server that "show servers state" does
// not.
type Stat struct {
	// Sessions counts its current sessions plus queued requests.
	Sessions int
	// Backup: it is a backup server. Read, not assumed: a server the
	// running HAProxy alone holds is written to haproxy.cfg as read, and
	// written without its role it would take traffic as an active one.
	Backup bool
}

// ParseStat reads the reply to "show stat <backend> 4 -1" (CSV) into each
// server's Stat.
func ParseStat(reply, backend string) (map[string]Stat, error) {
	all, err := parseStat(reply, func(b string) bool { return b == backend })
	return all[backend], err
}

// parseStat reads a "show stat" reply into each kept backend's servers'
// Stat (ReadAll's, all at once: one scan, one buffer).
func parseStat(reply string, keep func(backend string) bool) (map[string]map[string]Stat, error) {
	sc := bufio.NewScanner(strings.NewReader(reply))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "# pxname,svname,") {
		return nil, fmt.Errorf("unexpected reply: %.200s", reply)
	}
	col := map[string]int{}
	for i, name := range strings.Split(strings.TrimPrefix(sc.Text(), "# "), ",") {
		col[name] = i
	}
	qcur, ok1 := col["qcur"]
	scur, ok2 := col["scur"]
	bck, ok3 := col["bck"]
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("no qcur/scur/bck columns: %.200s", reply)
	}
	out := map[string]map[string]Stat{}
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		if len(f) <= max(qcur, scur, bck) || !keep(f[0]) {
			continue
		}
		q, _ := strconv.Atoi(f[qcur])
		n, _ := strconv.Atoi(f[scur])
		if out[f[0]] == nil {
			out[f[0]] = map[string]Stat{}
		}
		out[f[0]][f[1]] = Stat{Sessions: q + n, Backup: f[bck] == "1"}
	}
	return out, sc.Err()
}

// Check state bits and results of "show servers state" (HAProxy's CHK_ST_*
// and CHK_RES_*).
const (
	chkEnabled   = 0x04
	chkPaused    = 0x08
	chkResFailed = 2
	chkResPassed = 3
	chkResCondOK = 4
	// chkStatusL4OK is HCHK_STATUS_L4OK in srv_check_status: the last
	// check was a TCP connect that succeeded (the same on 2.6.12 and 3.0.11).
	chkStatusL4OK  = 6
	opStateRunning = 2
)

// ParseServersState reads the reply to "show servers state <backend>"
// (format version 1, the same from 2.6 to 3.4) into servers of that backend,
// judging a check passed when its health reached rise and its last result
// passed, unless that result is stale (model.Runtime.CheckStale).
func ParseServersState(reply, backend string, rise, fall int) ([]model.Server, error) {
	all, err := parseServersState(reply, func(b string) bool { return b == backend }, rise, fall)
	return all[backend], err
}

// parseServersState reads a "show servers state" reply into each kept
// backend's servers (ReadAll's, all at once: one scan, one buffer).
func parseServersState(reply string, keep func(backend string) bool, rise, fall int) (map[string][]model.Server, error) {
	sc := bufio.NewScanner(strings.NewReader(reply))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	if !sc.Scan() || strings.TrimSpace(sc.Text()) != "1" {
		return nil, fmt.Errorf("unexpected reply: %.200s", reply)
	}
	out := map[string][]model.Server{}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 19 {
			return nil, fmt.Errorf("short line: %.200s", line)
		}
		if !keep(f[1]) {
			continue
		}
		admin, err1 := strconv.ParseUint(f[6], 10, 32)
		weight, err2 := strconv.Atoi(f[7])
		port, err3 := strconv.Atoi(f[18])
		since, err4 := strconv.ParseInt(f[9], 10, 64)
		status, err8 := strconv.Atoi(f[10])
		result, err5 := strconv.Atoi(f[11])
		health, err6 := strconv.Atoi(f[12])
		chk, err7 := strconv.ParseUint(f[13], 10, 32)
		if err := errors.Join(err1, err2, err3, err4, err5, err6, err7, err8); err != nil {
			return nil, fmt.Errorf("bad line %.200s: %w", line, err)
		}
		// Field 5 is the operational state: 2 is running (UP).
		up := f[5] == strconv.Itoa(opStateRunning)
		passed := result == chkResPassed || result == chkResCondOK
		running := chk&chkEnabled != 0 && chk&chkPaused == 0
		rt := &model.Runtime{
			CheckRunning: running,
			ConfigMaint:  admin&admConfigMaint != 0,
			CheckFailed:  running && result == chkResFailed,
			// In maintenance the operational state says nothing; health does.
			CheckPassed: passed && (up || health >= max(rise, 1)),
			CheckL4:     status == chkStatusL4OK,
			Since:       time.Duration(since) * time.Second,
		}
		s := model.Server{Name: f[3], Address: f[4], Port: port, Weight: weight, State: model.Ready, Up: up, Runtime: rt}
		// Fields 2 and 16: the server's id, and whether it was given
		// (srv_f_forced_id): this driver names one on every add.
		if id, err := strconv.Atoi(f[2]); err == nil {
			rt.ID, rt.Ours = id, f[16] == "1" && id >= idBase
		}
		rt.Slot = isSlot(f[17]) // srv_fqdn: "-" when the server has none
		// Field 21, srv_check_port: 0 unless set; equal to the server's
		// port means the same as unset.
		if len(f) > 21 {
			if cp, err := strconv.Atoi(f[21]); err == nil && cp != port {
				s.Check.Port = cp
			}
		}
		switch {
		case admin&admMaint != 0:
			s.State = model.Maint
		case admin&admDrain != 0 || weight == 0:
			s.State = model.Drain
			// A server out of service that shows a passed result with health
			// at rise, below the top (rise+fall-1) where a passed check puts
			// it, did not earn it: leaving maintenance sets health to rise
			// and keeps the last result, from before it was parked, perhaps
			// at another address; a gate cut between "state drain" and
			// "health down" leaves it so. A server in service in that state
			// (put there with a check earned while parked) is left to its
			// running check. With fall 1 the top is rise: nothing to tell.
			if top := max(rise, 1) + max(fall, 1) - 1; passed && health >= max(rise, 1) && health < top {
				rt.CheckPassed, rt.CheckStale = false, true
			}
		}
		out[f[1]] = append(out[f[1]], s)
	}
	return out, sc.Err()
}
