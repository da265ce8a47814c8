package history

import "fmt"

// Targets as they fail beyond a hang (serve histories): an HAProxy that
// crashes and is started again (a new master and worker from haproxy.cfg,
// no old worker: what the runtime API set is gone, as an OOM kill or a
// host's reboot leaves it), and a reload of a haproxy.cfg HAProxy cannot
// load (a bad edit, a missing certificate: the master says it failed and
// the worker that ran goes on).

// restart carries out a TargetRestart on tg: clients get no answer from
// when it is killed until it listens again (obsRestart), after which it is
// judged as after a reload by others.
func (w *world) restart(tg *target) error {
	tg.reloadMu.Lock()
	defer tg.reloadMu.Unlock()
	tg.reloads.Add(1)
	tg.othersReloads.Add(1)
	defer func() { tg.reloads.Add(1); tg.othersReloads.Add(1) }()
	// The real API writes haproxy.cfg with every change: a restart loads
	// what it holds.
	if err := tg.writeAPIConfig(); err != nil {
		return err
	}
	w.rec.add(obs{kind: obsReloadStart, target: tg.i})
	w.rec.add(obs{kind: obsRestart, target: tg.i, hung: true})
	err := tg.h.Restart()
	w.rec.add(obs{kind: obsRestart, target: tg.i})
	w.rec.add(obs{kind: obsReload, target: tg.i})
	if err != nil {
		return fmt.Errorf("restart target %d: %w", tg.i, err)
	}
	return nil
}

// reloadBroken carries out a ReloadBroken on tg: nothing changes for its
// clients, and nothing is excused.
func (w *world) reloadBroken(tg *target) error {
	tg.reloadMu.Lock()
	defer tg.reloadMu.Unlock()
	if err := tg.h.TryReloadBroken(); err != nil {
		return fmt.Errorf("broken reload of target %d: %w", tg.i, err)
	}
	return nil
}

// down carries out a SocketDown, SocketUp, APIDown or APIUp on tg: its
// socket's or API's relay refuses every connection, or takes them again.
// HAProxy serves on: the service cannot reach it (obsDown).
func (w *world) down(tg *target, k Kind) error {
	on := k == SocketDown || k == APIDown
	r, part := tg.relay, "socket"
	if k == APIDown || k == APIUp {
		r, part = tg.apiRelay, "api"
	}
	if r == nil {
		return fmt.Errorf("%s of target %d: no relay before its %s", k, tg.i, part)
	}
	w.rec.add(obs{kind: obsDown, target: tg.i, hung: on, err: part})
	r.refuse(on)
	return nil
}
