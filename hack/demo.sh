#!/usr/bin/env bash
# make demo: a local HAProxy, a cluster read from testdata/demo/cluster.yaml,
# one reconcile through the runtime API, HAProxy's servers before and after,
# then traffic through the frontend. Loopback addresses only.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
run="${TMPDIR:-/tmp}/haproxy-k8s-sync-demo"

need=()
command -v haproxy >/dev/null || need+=(haproxy)
command -v socat >/dev/null || need+=(socat)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "installing ${need[*]} ..."
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Stop a previous demo, then start HAProxy in master-worker mode.
if [ -f "$run/haproxy.pid" ]; then kill "$(cat "$run/haproxy.pid")" 2>/dev/null || true; sleep 0.5; fi
mkdir -p "$run"
sed "s#RUN_DIR#$run#g" "$root/testdata/demo/haproxy.cfg" > "$run/haproxy.cfg"
"$root/hack/demo-cluster.sh" "$root/testdata/demo/cluster.yaml" "$run/cluster.yaml" # yours to edit: kept on reruns
haproxy -W -D -S "$run/master.sock" -f "$run/haproxy.cfg"
for _ in $(seq 50); do [ -S "$run/admin.sock" ] && break; sleep 0.1; done

servers() {
  echo "show servers state ingress-nginx" | socat - "UNIX-CONNECT:$run/admin.sock" |
    awk 'NR>2 && NF>18 {
      st = ($7 % 2 == 1) ? "maint" : (int($7 / 8) % 4 > 0 ? "drain" : "ready");
      printf "  %-10s %s:%s  weight %s  %s, %s\n", $4, $5, $19, $8, st, ($6 == 2 ? "UP" : "DOWN") }'
}

echo "== HAProxy backend ingress-nginx before:"
servers
echo
env=(INGRESS_NAMESPACE=ingress-nginx INGRESS_SERVICE_NAME=ingress-nginx TARGET_ADDRESS=node
  HAPROXY_WEIGHT=endpoints
  HAPROXY_RUNTIME_URL="unix://$run/admin.sock" LOG_LEVEL=info LOG_FORMAT=text
  ALLOWED_SERVER_CIDRS=127.0.0.0/8) # the demo's Nodes are on loopback
sync_cmd=("${HKS_BIN:-$root/bin/haproxy-k8s-sync}" reconcile --manifests "$run/cluster.yaml")
echo "== haproxy-k8s-sync reconcile --manifests $run/cluster.yaml (logs on stderr, the result as JSON on stdout)"
env "${env[@]}" "${sync_cmd[@]}"
echo
echo "== HAProxy backend ingress-nginx after (node-c drains: its pod is terminating):"
servers
echo
echo "== 6 requests to http://127.0.0.1:18080 (node-a has weight 2: two ready pods):"
for _ in 1 2 3 4 5 6; do printf '  '; curl -s --max-time 2 http://127.0.0.1:18080/; done
echo
cat <<EOF
HAProxy keeps running. Edit $run/cluster.yaml (a copy of testdata/demo/cluster.yaml), e.g.:
  - add a Node: node-d (127.0.1.4) and node-e (127.0.1.5) have a listener on :30080. Add a Node
    object (name node-d, InternalIP 127.0.1.4) and an endpoint with nodeName: node-d
  - remove node-b's endpoint: its server leaves traffic at once and is deleted once its sessions end
  - set an endpoint's ready: false (maintenance), or terminating: true (drain)
A Node at another address or port has nothing listening: its server never passes its health
check, and reconcile says so, waits up to 1m, then exits 1. Sync each change with:
  env ${env[*]} ${sync_cmd[*]}
EOF
echo "Stop it with: kill \$(cat $run/haproxy.pid)"
