#!/usr/bin/env bash
# make demo: a local HAProxy, a cluster read from testdata/demo/cluster.yaml,
# one reconcile through the runtime API, HAProxy's servers before and after,
# then traffic through the frontend. Then many Services: serve, in the
# background, follows every annotated Service of the run directory
# (testdata/demo/services.yaml) into its own backend and syncs again on
# each edit of the files. Loopback addresses only.
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

# Stop a previous demo (its serve, then HAProxy), then start HAProxy in
# master-worker mode.
for p in serve haproxy; do
  if [ -f "$run/$p.pid" ]; then kill "$(cat "$run/$p.pid")" 2>/dev/null || true; rm -f "$run/$p.pid"; sleep 0.5; fi
done
mkdir -p "$run"
sed "s#RUN_DIR#$run#g" "$root/testdata/demo/haproxy.cfg" > "$run/haproxy.cfg"
"$root/hack/demo-cluster.sh" "$root/testdata/demo/cluster.yaml" "$run/cluster.yaml" # yours to edit: kept on reruns
"$root/hack/demo-cluster.sh" "$root/testdata/demo/services.yaml" "$run/services.yaml"
haproxy -W -D -S "$run/master.sock" -f "$run/haproxy.cfg"
for _ in $(seq 50); do [ -S "$run/admin.sock" ] && break; sleep 0.1; done

servers() {
  echo "show servers state ${1:-ingress-nginx}" | socat - "UNIX-CONNECT:$run/admin.sock" |
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

# Many Services: one serve follows every Service of the run directory that
# carries the annotation haproxy-k8s-sync.io/backends (services.yaml; the
# Nodes are cluster.yaml's), each into the backend it names.
token="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
(umask 077; echo "$token" > "$run/webhook-token")
many_env=(SERVICE_SELECTION=annotation 'ANNOTATION_BACKENDS=be_*' TARGET_ADDRESS=node
  HAPROXY_RUNTIME_URL="unix://$run/admin.sock" LOG_LEVEL=info LOG_FORMAT=text
  ALLOWED_SERVER_CIDRS=127.0.0.0/8 PORT=18090 WEBHOOK_TOKEN_FILE="$run/webhook-token")
echo "== haproxy-k8s-sync serve --manifests $run with SERVICE_SELECTION=annotation, in the background (logs: $run/serve.log)"
env "${many_env[@]}" "${HKS_BIN:-$root/bin/haproxy-k8s-sync}" serve --manifests "$run" >"$run/serve.log" 2>&1 &
echo $! > "$run/serve.pid"
in_service() { # backend $1 has servers, every one ready and UP
  servers "$1" | awk '{ n++ } !/ready, UP$/ { bad = 1 } END { exit !(n > 0 && !bad) }'
}
for _ in $(seq 100); do
  in_service be_web && in_service be_api && break
  kill -0 "$(cat "$run/serve.pid")" 2>/dev/null || { echo "serve stopped:"; cat "$run/serve.log"; exit 1; }
  sleep 0.1
done
grep -m1 'msg=reconcile ' "$run/serve.log" | sed 's/^/  /' || true
grep 'msg="service refused"' "$run/serve.log" | sort -u | sed 's/^/  /' || true
for b in be_web be_api; do
  echo "== HAProxy backend $b:"
  servers "$b"
done
echo
echo "== 3 requests each to http://127.0.0.1:18081 (backend be_web) and http://127.0.0.1:18082 (be_api):"
for port in 18081 18082; do
  for _ in 1 2 3; do printf '  '; curl -s --max-time 2 "http://127.0.0.1:$port/"; done
done
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
serve keeps running too: it reads $run every 2 s and, when a file changed, syncs every
annotated Service's backend by itself. Edit $run/services.yaml (a copy of
testdata/demo/services.yaml), e.g. move shop/api's endpoint to node-a, or remove shop/web's
annotation: shop/web's servers leave be_web and shop/web-canary, refused until then, gets it.
Its logs: $run/serve.log. A reconcile on demand, the JSON result of every Service:
  curl -s -X POST -H "Authorization: Bearer \$(cat $run/webhook-token)" localhost:18090/reconcile
EOF
echo "Stop it with: kill \$(cat $run/serve.pid) \$(cat $run/haproxy.pid)"
