package main

import (
	"net/http"
	"strconv"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
)

// The requests sync/lb makes for class Services: a backend with the
// recommended lines, a frontend and its bind, in one transaction; each case
// binds its own loopback address, so that replays running at once do not
// share one.
const (
	fesPath = cfgPath + "/frontends"
	besPath = cfgPath + "/backends"
)

func classPair(n, port int64) dataplane.Pair {
	return dataplane.Pair{Frontend: "fe_k8s_default_web_80", Backend: "be_k8s_default_web_80",
		Description: "haproxy-k8s-sync service=default/web", Address: classAddr(n), Port: port}
}

func classAddr(n int64) string { return "127.44.1." + strconv.FormatInt(n, 10) }

// createClass are the steps of one transaction creating p (txn is its
// placeholder, e.g. "txn0").
func createClass(p dataplane.Pair, txn string) []step {
	in := "?transaction_id={" + txn + "}"
	return []step{
		{method: http.MethodPost, path: startTxn},
		{method: http.MethodPost, path: besPath + in, body: dataplane.ClassBackend(p)},
		{method: http.MethodPost, path: fesPath + in, body: map[string]any{"name": p.Frontend, "description": p.Description, "mode": "tcp", "default_backend": p.Backend}},
		{method: http.MethodPost, path: fesPath + "/" + p.Frontend + "/binds" + in, body: map[string]any{"name": "vip", "address": p.Address, "port": p.Port}},
		commit(txn, ""),
	}
}

func steps(groups ...[]step) []step {
	var out []step
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

var classCases = func() []caseDef {
	p1, p2, p3, p4, p5, p6, p7, p8 := classPair(1, 18501), classPair(2, 18501), classPair(3, 18501), classPair(4, 18501), classPair(5, 18501), classPair(6, 18501), classPair(7, 18501), classPair(8, 18501)
	p9 := classPair(9, 18501)
	other := p6
	other.Frontend, other.Backend = "fe_k8s_default_api_80", "be_k8s_default_api_80"
	bindPath := fesPath + "/" + p3.Frontend + "/binds/vip"
	return []caseDef{
		one("class: create backend and frontend with its bind in a transaction", "plain", createClass(p1, "txn0")...),
		one("class: read back", "plain", steps(createClass(p2, "txn0"),
			[]step{get(fesPath + "?full_section=true"), get(besPath + "?full_section=true"), get(fesPath + "/" + p2.Frontend),
				get(fesPath + "/" + p2.Frontend + "/binds"), get(fesPath + "/" + p2.Frontend + "/binds/vip"), get(besPath + "/" + p2.Backend)})...),
		// The read of all backends with their servers (dataplane.ReadAll):
		// servers added as the driver adds them (parked, then put in
		// service at runtime; s5 a backup, s4 left in maintenance) beside
		// haproxy.cfg's, and a class backend without any. Added before the
		// class pair's commit, so that its reload comes after them.
		one("class: read back with servers", "plain", steps([]step{
			add(srvPath+qVersion, map[string]any{"maintenance": "enabled", "weight": 50}),
			add(srvPath+qVersion, map[string]any{"name": "s5", "address": "127.44.0.5", "maintenance": "enabled", "backup": "enabled"}),
			put(srvPath+"/s5"+qVersion, "s5", map[string]any{"maintenance": "disabled"}),
		}, createClass(p9, "txn0"), []step{getKept(besPath + "?full_section=true"), getKept(srvPath)})...),
		one("class: change the bind port", "plain", steps(createClass(p3, "txn0"), []step{
			{method: http.MethodPost, path: startTxn},
			{method: http.MethodPut, path: bindPath + "?transaction_id={txn1}", read: "/frontends/" + p3.Frontend + "/binds/vip", edit: map[string]any{"port": 18502}},
			commit("txn1", "")})...),
		one("class: delete frontend and backend", "plain", steps(createClass(p4, "txn0"), []step{
			{method: http.MethodPost, path: startTxn},
			del(fesPath + "/" + p4.Frontend + "?transaction_id={txn1}"), del(besPath + "/" + p4.Backend + "?transaction_id={txn1}"),
			commit("txn1", ""), get(fesPath + "?full_section=true")})...),
		one("class: create an existing name", "plain", steps(createClass(p5, "txn0"), []step{
			{method: http.MethodPost, path: startTxn},
			{method: http.MethodPost, path: fesPath + "?transaction_id={txn1}", body: map[string]any{"name": p5.Frontend, "mode": "tcp", "default_backend": p5.Backend}},
			{method: http.MethodPost, path: besPath + "?transaction_id={txn1}", body: dataplane.ClassBackend(p5)},
			del(txnPath + "/{txn1}")})...),
		one("class: bind on an address:port taken", "plain", steps(createClass(p6, "txn0"), createClass(other, "txn1"))...),
		one("class: create with a version", "plain",
			step{method: http.MethodPost, path: besPath + qVersion, body: dataplane.ClassBackend(p7)},
			step{method: http.MethodPost, path: fesPath + qVersion, body: map[string]any{"name": p7.Frontend, "mode": "tcp", "default_backend": p7.Backend}},
			step{method: http.MethodPost, path: fesPath + "/" + p7.Frontend + "/binds" + qVersion, body: map[string]any{"name": "vip", "address": p7.Address, "port": p7.Port}}),
		one("class: delete a missing frontend", "plain", del(fesPath+"/fe_k8s_default_none_80"+qVersion)),
		// haproxy -c refuses a frontend whose default backend does not exist.
		one("class: frontend without its backend", "plain",
			step{method: http.MethodPost, path: startTxn},
			step{method: http.MethodPost, path: fesPath + inTxn0, body: map[string]any{"name": p8.Frontend, "mode": "tcp", "default_backend": p8.Backend}},
			commit("txn0", ""), get(txnPath+"/{txn0}"), del(txnPath+"/{txn0}")),
		one("class: frontend without its backend with a version", "plain",
			step{method: http.MethodPost, path: fesPath + qVersion, body: map[string]any{"name": p8.Frontend, "mode": "tcp", "default_backend": p8.Backend}},
			get(fesPath)),
	}
}()
