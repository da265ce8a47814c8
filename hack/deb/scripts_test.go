package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// stub stands for the commands that change the system (users, groups,
// ownership, systemd): it records each call and keeps users and groups as
// files, which getent reads back.
const stub = `#!/bin/sh
n=${0##*/}
echo "$n $*" >>"$STUB_LOG"
s=$STUB_STATE
last=$(eval "echo \"\${$#}\"")
case $n in
getent) [ -e "$s/$1/$2" ] || exit 2 ;;
addgroup | groupadd) mkdir -p "$s/group" && : >"$s/group/$last" ;;
adduser) if [ "$1" = --system ]; then mkdir -p "$s/passwd" && : >"$s/passwd/$last"; fi ;;
useradd) mkdir -p "$s/passwd" && : >"$s/passwd/$last" ;;
deluser | userdel) rm -f "$s/passwd/$last" ;;
delgroup | groupdel) rm -f "$s/group/$last" ;;
install) mkdir -p "$last" ;;
esac
`

// host is a machine for the maintainer scripts: a directory standing for
// /, stubs for the commands that would change this one.
type host struct {
	t                *testing.T
	root, bin, state string
	log              string
}

// newHost makes a host; adduser says whether Debian's adduser is there
// (else the scripts fall back on useradd), haproxy whether group haproxy
// exists, systemd whether systemd runs.
func newHost(t *testing.T, adduser, haproxy, systemd bool) *host {
	t.Helper()
	dir := t.TempDir()
	h := &host{t: t, root: filepath.Join(dir, "root"), bin: filepath.Join(dir, "bin"), state: filepath.Join(dir, "state"), log: filepath.Join(dir, "log")}
	for _, d := range []string{h.root, h.bin, h.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(h.bin, "stub"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	stubs := []string{"getent", "groupadd", "useradd", "usermod", "userdel", "groupdel", "chgrp", "systemctl", "install"}
	if adduser {
		stubs = append(stubs, "adduser", "addgroup", "deluser", "delgroup")
	}
	for _, s := range stubs {
		if err := os.Symlink("stub", filepath.Join(h.bin, s)); err != nil {
			t.Fatal(err)
		}
	}
	// The harmless tools the scripts use, as they are.
	for _, tool := range []string{"od", "tr", "mv", "rm", "rmdir", "mkdir"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("no %s", tool)
		}
		if err := os.Symlink(p, filepath.Join(h.bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	if haproxy {
		h.mkdir(filepath.Join(h.state, "group"))
		h.write(filepath.Join(h.state, "group", "haproxy"), "")
	}
	if systemd {
		h.mkdir(filepath.Join(h.root, "run/systemd/system"))
	}
	return h
}

func (h *host) mkdir(p string) {
	h.t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		h.t.Fatal(err)
	}
}

func (h *host) write(p, s string) {
	h.t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// path is p on the host.
func (h *host) path(p string) string { return filepath.Join(h.root, p) }

// exists says whether p exists on the host.
func (h *host) exists(p string) bool {
	_, err := os.Lstat(h.path(p))
	return err == nil
}

// has says whether the host has the user or group name.
func (h *host) has(db, name string) bool {
	_, err := os.Stat(filepath.Join(h.state, db, name))
	return err == nil
}

// run runs a maintainer script of files/ with args, as dpkg does, and
// returns the calls of stubbed commands it made. The script's absolute
// paths under /etc and /run are moved under the host's root.
func (h *host) run(script string, args ...string) ([]string, error) {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join("files", script))
	if err != nil {
		h.t.Fatal(err)
	}
	text := strings.NewReplacer("/etc/", h.root+"/etc/", "/run/systemd/", h.root+"/run/systemd/").Replace(string(b))
	p := filepath.Join(h.t.TempDir(), script)
	h.write(p, text)
	if err := os.Remove(h.log); err != nil && !os.IsNotExist(err) {
		h.t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", append([]string{p}, args...)...)
	cmd.Env = []string{"PATH=" + h.bin, "STUB_LOG=" + h.log, "STUB_STATE=" + h.state}
	out, err := cmd.CombinedOutput()
	if err != nil {
		err = &scriptError{err, string(out)}
	}
	var calls []string
	for _, l := range logLines(h.t, h.log) {
		calls = append(calls, strings.ReplaceAll(l, h.root, ""))
	}
	return calls, err
}

type scriptError struct {
	err    error
	output string
}

func (e *scriptError) Error() string { return e.err.Error() + ": " + e.output }

// called says whether one of calls starts with prefix.
func called(calls []string, prefix string) bool {
	return slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, prefix) })
}

// TestMaintainerScripts runs postinst, prerm and postrm as dpkg would on a
// stand-in host: a first install makes the system user (in group haproxy
// when it exists), the kubeconfig's directory and a webhook token, and
// neither enables nor starts the service; an upgrade keeps the user and
// token and restarts a running service; removal stops it; purge removes
// what postinst made and the unit's enablement, and keeps the operator's
// kubeconfig.
func TestMaintainerScripts(t *testing.T) {
	for _, adduser := range []bool{true, false} {
		name := "adduser"
		if !adduser {
			name = "useradd"
		}
		t.Run(name, func(t *testing.T) {
			h := newHost(t, adduser, true, true)
			calls, err := h.run("postinst", "configure", "")
			if err != nil {
				t.Fatal(err)
			}
			if !h.has("passwd", user) || !h.has("group", user) {
				t.Fatalf("no user or group %s after a first install: %q", user, calls)
			}
			joined := "adduser --quiet " + user + " haproxy"
			if !adduser {
				joined = "usermod --append --groups haproxy " + user
			}
			if !slices.Contains(calls, joined) {
				t.Errorf("the user is not put in group haproxy (%s): %q", joined, calls)
			}
			creation := "adduser --system"
			if !adduser {
				creation = "useradd --system"
			}
			if !called(calls, creation) || !strings.Contains(strings.Join(calls, "\n"), "/usr/sbin/nologin") {
				t.Errorf("the user is not a system user without a shell: %q", calls)
			}
			if !slices.Contains(calls, "install -d -m 0750 -o root -g "+user+" "+confDir) {
				t.Errorf("%s not made root's, readable by group %s: %q", confDir, user, calls)
			}
			tok, err := os.ReadFile(h.path(confDir + "/webhook-token"))
			if err != nil || !regexp.MustCompile(`^[0-9a-f]{48}$`).Match(tok) {
				t.Errorf("webhook token %q (%v), want 48 hex digits (the service asks for 16 characters at least)", tok, err)
			}
			if st, err := os.Stat(h.path(confDir + "/webhook-token")); err != nil || st.Mode().Perm() != 0o640 {
				t.Errorf("webhook token mode %v (%v), want 0640", st.Mode().Perm(), err)
			}
			if !slices.Contains(calls, "chgrp "+user+" "+confDir+"/webhook-token.new") {
				t.Errorf("the token is not given to group %s before it is in place: %q", user, calls)
			}
			if !slices.Contains(calls, "systemctl --system daemon-reload") {
				t.Errorf("no daemon-reload: %q", calls)
			}
			// Not before the kubeconfig exists: enabled, it would fail at
			// every boot; started, it would fail now.
			for _, c := range calls {
				if strings.HasPrefix(c, "systemctl") && (strings.Contains(c, "enable") || strings.Contains(c, "start")) {
					t.Errorf("a first install runs %q", c)
				}
			}

			// An upgrade (configure with the old version): the same user and
			// token, the running service restarted with the new binary.
			calls, err = h.run("postinst", "configure", "0.8.3")
			if err != nil {
				t.Fatal(err)
			}
			if called(calls, creation) || called(calls, "addgroup") || called(calls, "groupadd") {
				t.Errorf("an upgrade makes the user again: %q", calls)
			}
			if again, _ := os.ReadFile(h.path(confDir + "/webhook-token")); string(again) != string(tok) {
				t.Error("an upgrade replaced the webhook token")
			}
			if !slices.Contains(calls, "systemctl try-restart haproxy-k8s-sync.service") {
				t.Errorf("an upgrade does not restart a running service: %q", calls)
			}

			if calls, err = h.run("prerm", "upgrade", "0.8.5"); err != nil || called(calls, "systemctl") {
				t.Errorf("prerm upgrade: %q, %v: the service keeps running until postinst restarts it", calls, err)
			}
			if calls, err = h.run("prerm", "remove"); err != nil || !slices.Contains(calls, "systemctl stop haproxy-k8s-sync.service") {
				t.Errorf("prerm remove: %q, %v", calls, err)
			}
			if calls, err = h.run("postrm", "remove"); err != nil || !h.has("passwd", user) || !h.exists(confDir+"/webhook-token") {
				t.Errorf("postrm remove: %q, %v: a removal keeps the user and the configuration", calls, err)
			}

			// Purge: the operator enabled the service and wrote the
			// kubeconfig.
			wants := "/etc/systemd/system/multi-user.target.wants/haproxy-k8s-sync.service"
			h.mkdir(filepath.Dir(h.path(wants)))
			if err := os.Symlink(unitPath, h.path(wants)); err != nil {
				t.Fatal(err)
			}
			h.write(h.path(kubeconfig), "apiVersion: v1\n")
			calls, err = h.run("postrm", "purge")
			if err != nil {
				t.Fatal(err)
			}
			if h.has("passwd", user) || h.has("group", user) {
				t.Errorf("purge leaves the user or group: %q", calls)
			}
			if h.exists(confDir+"/webhook-token") || h.exists(wants) {
				t.Error("purge leaves the webhook token or the unit's enablement")
			}
			if !h.exists(kubeconfig) {
				t.Error("purge removed the operator's kubeconfig")
			}
			if err := os.Remove(h.path(kubeconfig)); err != nil {
				t.Fatal(err)
			}
			if _, err := h.run("postrm", "purge"); err != nil || h.exists(confDir) {
				t.Errorf("purge with %s empty leaves it (%v)", confDir, err)
			}
		})
	}

	t.Run("no group haproxy, no systemd", func(t *testing.T) {
		h := newHost(t, true, false, false)
		calls, err := h.run("postinst", "configure", "")
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(calls, "adduser --quiet "+user+" haproxy") || called(calls, "usermod") {
			t.Errorf("the user is put in a group that does not exist: %q", calls)
		}
		if called(calls, "systemctl") {
			t.Errorf("systemctl without systemd: %q", calls)
		}
		if !h.has("passwd", user) {
			t.Error("no user")
		}
		// HAProxy installed afterwards: configuring again joins the group.
		h.write(filepath.Join(h.state, "group", "haproxy"), "")
		if calls, err = h.run("postinst", "configure", "0.8.4"); err != nil || !slices.Contains(calls, "adduser --quiet "+user+" haproxy") {
			t.Errorf("reconfigured with group haproxy: %q, %v", calls, err)
		}
	})

	t.Run("unknown arguments", func(t *testing.T) {
		h := newHost(t, true, true, true)
		for _, s := range []string{"postinst", "prerm", "postrm"} {
			if _, err := h.run(s, "bogus"); err == nil {
				t.Errorf("%s bogus succeeds", s)
			}
		}
	})
}
