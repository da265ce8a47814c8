#!/usr/bin/env bash
# teeth.sh: does the history checker find the defects of issues 43 and 53 by itself?
# Entries p1, p2, ... are defects planted on purpose where no defect was found
# (node mode, reloads): the judge must find them too.
# For each fix, on a scratch worktree of HEAD with that fix's code reverted,
# run the checker's histories alone (never the regression tests) and report
# whether it found a violation, which, and how long it took.
#
#   hack/teeth.sh [NAME...]      default: every entry of the table below
#
# Each line of the table: name | how the fix is undone | histories as
# SEED:DRIVER:SHAPE. A fix is undone by reverting commits' code, newest first
# (their tests, the checker and the test doubles are kept: only the service's
# code goes back), or, where later commits built on it, by an edit:
# sed@FILE@EXPR (EXPR must change FILE; sed -z: the file is one buffer);
# several, joined by "+" (no '|' anywhere in an entry: it splits the fields;
# match one with '.'). "unwire" takes the reload watch out
# of the service's wiring that the checker runs, as serve wires it.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
table=$(cat <<'EOF'
1-reload-by-others|unwire|1:runtime:short 2:runtime:short
2-default-server|sed@sync/dataplane/defaultserver.go@s/func (in inheritance) inherit(srv model.Server) inherited {\n/&\treturn inherited{Carried: true}\n/|9:dataplane:short 11:dataplane:short 13:dataplane:short
3-move-checked|sed@sync/dataplane/steps.go@s/if movesOnSocket(ch) {/if false \&\& movesOnSocket(ch) {/+sed@sync/dataplane/read.go@s/= runningAt(out.Servers\[i\], r)/= out.Servers[i].Address, out.Servers[i].Port; _ = r/|17:dataplane:soak 21:dataplane:soak
4-backup-kept|sed@sync/dataplane/convert.go@s/\tif !read {\n\t\tm.Backup = ""/\t_ = read\n\tif true {\n\t\tm.Backup = ""/+sed@sync/dataplane/convert.go@s/Backup: s.Backup == enabled, //|5:dataplane:short 4:dataplane:short 7:dataplane:short 5:dataplane:soak
6-hung-target|sed@sync/reconcile/followup.go@s/\tf.reset()\n\tf.mu.Unlock()\n\tpoke(reason)/\tf.reset()\n\tfor target := range f.watches {\n\t\tf.unwatch(target)\n\t}\n\tf.mu.Unlock()\n\tpoke(reason)/+sed@sync/reconcile/followup.go@s/!f.observed\[t.Target\]/!false/+sed@sync/reconcile/followup.go@s/!f.observed\[target\]/!false/+sed@sync/reconcile/coalesce.go@s/if before != nil \&\& c.follow != nil/if false \&\& before != nil \&\& c.follow != nil/|2:runtime:soak 3:runtime:soak
7-patience|e050e2a|8:runtime:soak 12:runtime:soak
8-dead-replacement|sed@sync/plan/keep.go@s/return !failed\[n\] } \/\/ about to serve/return true } \/\/ about to serve/+sed@sync/reconcile/reconcile.go@s/plan.CalculateWith(all, want, pol)/plan.CalculateWith(cur, want, pol); _ = all/|5:dataplane:soak
9-gate-refused|sed@sync/reconcile/gate.go@s/if t.Error != "" \&\& !t.onlyRefused {/if t.Error != "" {/|32:runtime:short 54:runtime:short
10-guard-maint|sed@sync/plan/plan.go@s/if desired\[i\].State != model.Ready {/if false {/|129:runtime:short 324:runtime:short
11-role-at-cap|sed@sync/plan/plan.go@s/\tp.roomForRoles(desired, pol)[^\n]*\n//|223:runtime:short
12-two-replicas-name|sed@sync/runtimeapi/runtimeapi.go@s/case nameTaken(err):/case false \&\& nameTaken(err):/|10:runtime:short 17:runtime:short 24:runtime:short
13-two-clusters-id|sed@sync/runtimeapi/runtimeapi.go@s/return errors.As(err, \&ce) \&\& strings.HasPrefix(ce.Command, "add server ") \&\&\n\t\tstrings.Contains(ce.Reply, "custom id")/return false \&\& errors.As(err, \&ce) \&\& strings.HasPrefix(ce.Command, "add server ") \&\&\n\t\tstrings.Contains(ce.Reply, "custom id")/|2:runtime:short 22:runtime:short
14-guard-refused|sed@sync/plan/plan.go@s/if !ok .. cur.Runtime != nil/if ok \&\& cur.Runtime != nil/+sed@sync/plan/plan.go@s/\t\tif cur.Up {/\t\tif ok \&\& cur.Up {/|32:runtime:short
15-guard-looks-again|sed@sync/reconcile/followup.go@s/res.guardParked() .. res.guardHolds() .. res.handingOver()/!(!res.guardParked() \&\& !res.handingOver())/|32:runtime:short
16-gate-after-reload|sed@sync/reconcile/gate.go@s/checked = rt.CheckRunning \&\& rt.CheckPassed .. reloaded/checked = rt.CheckRunning \&\& rt.CheckPassed \&\& reloaded == reloaded/|109:dataplane:short 113:dataplane:short 114:dataplane:short 118:dataplane:short
17-replica-unparked|sed@sync/runtimeapi/runtimeapi.go@s/case unparkedSince(err):/case false \&\& unparkedSince(err):/|132:runtime:short
18-cap-ready-first|sed@sync/plan/plan.go@s/(c.Gate .. c.New != nil \&\& c.New.State == model.Ready) != serving/!serving/|158:runtime:short
19-refused-replacement|sed@sync/plan/keep.go@s/\tfor _, n := range refused {\n\t\tfailed\[n\] = true\n\t}\n//|420:runtime:short 311:runtime:short
20-cap-givers|sed@sync/plan/plan.go@s/roomGivers(have, desired.Servers), pol.Refused)/nil, pol.Refused)/|126:runtime:short
21-status-pair|sed@sync/fleet/status.go@s/inService(f.servedBy.sk., sr.Result, sel, names)/inService(nil, sr.Result, sel, names)/|4:dataplane:class
22-straggler|sed@sync/reconcile/reconcile.go@s/return !s.first.IsZero() .. now.Sub(s.first) >= s.grace/return false/|9:dataplane:class
23-pending-removal|sed@sync/dataplane/apply.go@s/if err := c.awaitPendingRemoval(ctx, p); err != nil {/if err := error(nil); err != nil {/|7:dataplane:short
24-hung-frontends|sed@sync/lb/manager.go@s/results, left := eachTarget(ctx, \&m.busy, len(m.Targets), m.straggle(),/results, left := eachTarget(ctx, \&m.busy, len(m.Targets), time.Hour,/|534110162:dataplane:class
25-health-port-proxy|sed@sync/model/model.go@s/return c.SendProxyV2 \&\& c.Port == 0 }/return c.SendProxyV2 }/|1:runtime:nodes
26-settings-first|sed@sync/dataplane/steps.go@s/socketAdds := p.Settings == nil \&\& /socketAdds := /+sed@sync/dataplane/read.go@s/ \&\& !settingsLoading()\n/\n\t\t\t\t_ = settingsLoading\n/|1:dataplane:nodes
27-other-install|sed@sync/lb/plan.go@s/\t\treturn m.class == o.Class/\t\treturn true/|7:dataplane:class
28-hung-pair|sed@sync/reconcile/leftbehind.go@s/return r.straggle() . time.Second }/return time.Hour }/+sed@sync/reconcile/leftbehind.go@s/\tif len(targets) == 0 {\n\t\treturn ctx/\tif true {\n\t\treturn ctx/|682573831:dataplane:class
29-writer-fight|sed@sync/reconcile/contested.go@s/\tif again == 0 {/\tif true {/|179255428:runtime:serve-soak
30-parked-contest|sed@sync/reconcile/followup.go@s/if (!there .. st == model.CheckParked) \&\& !w.loading\[n\] {/if !there \&\& !w.loading[n] {/|188303918:runtime:nodes-soak
p1-autoscaler-taint-ignored|sed@sync/desired/node.go@s/if t.Key == TaintToBeDeleted .. t.Key == TaintKarpenterDisrupted {/if t.Key == TaintKarpenterDisrupted {/|3:runtime:nodes-soak
p2-adds-reload|sed@sync/dataplane/route.go@s/adds > MaxRuntimeAdds/adds > 0/|1:dataplane:short 2:dataplane:short
p3-holder-by-age|sed@sync/services/select.go@s/\t\t\tcase held.r. == key.s.:\n\t\t\t\tc.Hold = HoldsResource\n\t\t\tcase sl.Class \&\& len.s.Status.LoadBalancer.Ingress. > 0:\n\t\t\t\tc.Hold = HoldsStatus\n//|3:dataplane:class
p4-sessions-shut|sed@sync/plan/drain.go@s/case timeout > 0 .. u.State == model.Maint .. rt.Since >= timeout+time.Second:/case u.State == model.Maint:/|3:runtime:short 1:runtime:short
p5-drain-timeout-ignored|sed@sync/plan/drain.go@s/case timeout > 0 .. u.State == model.Maint/case false \&\& u.State == model.Maint/|3:runtime:short 16:runtime:short
p6-tls-links|sed@sync/tlsfiles/tlsfiles.go@s/fi, err := os.Stat(p.path)/fi, err := os.Lstat(p.path)/|6:runtime:nodes-soak
p7-ipmode|sed@cmd/haproxy-k8s-sync/fleet.go@s/f.ProxyProtocol = cfg.SendProxyV2/f.ProxyProtocol = false/|3:dataplane:class
p8-cidrs-ignored|sed@sync/desired/validate.go@s/return "", ReasonAddressNotAllowed, "outside ALLOWED_SERVER_CIDRS"/return a.String(), "", ""/|3:runtime:short
p9-managed-by-ignored|sed@sync/desired/desired.go@s/if c.opts.ManagedBy != "" \&\& s.Labels/if false \&\& s.Labels/|3:runtime:short
p10-publish-ignored|sed@sync/desired/desired.go@s/case isTrue(c.Ready, true) \&\& !isTrue(c.Terminating, false):/case isTrue(c.Ready, true) \&\& isTrue(c.Serving, true) \&\& !isTrue(c.Terminating, false):/|3:runtime:short 8:runtime:short 12:runtime:short 9:runtime:short
EOF
)
want=("$@")
out=$root/bin/teeth.txt
mkdir -p bin
echo "teeth at $(git describe --always --dirty) on ${HKS_HAPROXY:-haproxy on PATH}, $(date -u +%FT%TZ)" | tee "$out"
while IFS='|' read -r name commits runs; do
  if [ ${#want[@]} -gt 0 ] && [[ ! " ${want[*]} " == *" $name "* ]]; then continue; fi
  wt=$(mktemp -d)/teeth
  git worktree add -q --detach "$wt" HEAD
  (
    cd "$wt"
    IFS=+ read -r -a undo <<<"$commits"
    for c in "${undo[@]}"; do
      if [[ "$c" == sed@* ]]; then
        IFS=@ read -r _ file expr <<<"$c"
        before=$(md5sum "$file")
        sed -z -i "$expr" "$file"
        [ "$(md5sum "$file")" != "$before" ] || { echo "$name: $expr changed nothing in $file"; exit 1; }
        continue
      fi
      if [ "$c" = unwire ]; then
        sed -i 's|go func() { rw.Run(ctx); close(watching) }()|go func() { _ = rw; _ = ctx; close(watching) }()|' sync/history/world.go
        grep -q '_ = rw' sync/history/world.go || { echo "$name: cannot unwire"; exit 1; }
        continue
      fi
      # Revert the commit's code, not its tests, the checker or the doubles.
      files=$(git show --name-only --format= "$c" | grep '\.go$' | grep -v '_test\.go$' |
        grep -v -e '^sync/history/' -e '^sync/dataplanetest/' -e '^sync/haproxytest/')
      git diff "$c" "$c^" -- $files | git apply -3 --whitespace=nowarn >/dev/null 2>&1 ||
        { echo "$name: $c does not revert cleanly"; exit 1; }
    done
    go build ./... >/dev/null 2>&1 || { echo "$name: does not build with its fix reverted"; exit 1; }
    for run in $runs; do
      IFS=: read -r seed driver shape <<<"$run"
      start=$(date +%s)
      # The scratch worktree has no bin/: serve and class histories find
      # the kube-apiserver and etcd of this checkout's.
      log=$(TEST_ASSET_KUBE_APISERVER=${TEST_ASSET_KUBE_APISERVER:-$root/bin/kube-apiserver} TEST_ASSET_ETCD=${TEST_ASSET_ETCD:-$root/bin/etcd} \
        HKS_HISTORY_SEED=$seed HKS_HISTORY_DRIVER=$driver HKS_HISTORY_SHAPE=$shape \
        go test -count=1 -timeout 30m -run '^TestReplay$' -v ./sync/history 2>&1)
      if grep -q -e '--- SKIP' <<<"$log"; then
        echo "$name: seed $seed ($driver, $shape) was SKIPPED: $(grep -m1 -A1 -e '--- SKIP' <<<"$log" | tail -1 | sed 's/^ *//' | cut -c1-200)"
        continue
      fi
      took=$(( $(date +%s) - start ))
      printf '%s\n' "$log" > "$root/bin/teeth-$name-$seed-$driver-$shape.log"
      found=$(grep -E '^ +[a-z-]+ after step' <<<"$log" | head -3 | sed 's/^ *//' | cut -c1-200)
      if [ -z "$found" ] && grep -q -e '--- FAIL' <<<"$log"; then
        echo "$name: seed $seed ($driver, $shape) FAILED without a violation in ${took}s (bin/teeth-$name-$seed-$driver-$shape.log):"
        grep -E -e '--- FAIL|Error|error|panic' <<<"$log" | head -5 | sed 's/^ */    /' | cut -c1-200
        continue
      fi
      if [ -n "$found" ]; then
        echo "$name: FOUND by seed $seed ($driver, $shape) in ${took}s:"; echo "$found" | sed 's/^/    /'
        # The control: the same history with the fix in place must pass,
        # or what was found is not this defect.
        if HKS_HISTORY_SEED=$seed HKS_HISTORY_DRIVER=$driver HKS_HISTORY_SHAPE=$shape \
          go -C "$root" test -count=1 -timeout 30m -run '^TestReplay$' ./sync/history >/dev/null 2>&1; then
          echo "    control: the same history passes with the fix"
        else
          echo "    control: the same history FAILS with the fix too: not this defect"
        fi
        exit 0
      fi
      echo "$name: seed $seed ($driver, $shape) passed in ${took}s"
    done
    echo "$name: NOT FOUND"
  ) 2>&1 | tee -a "$out"
  git worktree remove --force "$wt"
done <<<"$table"
