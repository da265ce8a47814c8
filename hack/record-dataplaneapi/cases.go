package main

import (
	"net/http"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
)

const (
	cfgPath  = "/services/haproxy/configuration"
	srvPath  = cfgPath + "/backends/be/servers"
	bePath   = cfgPath + "/backends/be"
	txnPath  = "/services/haproxy/transactions"
	rtPath   = "/services/haproxy/runtime/backends/be/servers"
	qVersion = "?version={version}"
	inTxn0   = "?transaction_id={txn0}"
	startTxn = txnPath + qVersion
)

// The defaults section and servers every setup has: the shape haproxytest
// writes, with servers checked as the driver writes them.
var (
	defaultsLines = []string{"mode tcp", "timeout connect 1s", "timeout client 10s", "timeout server 10s", "option redispatch 1", "retries 3"}
	serverLines   = []string{
		"server s1 127.44.0.1:18401 check inter 2000 rise 2 fall 3 weight 100",
		"server s2 127.44.0.2:18401 check inter 2000 rise 2 fall 3 weight 100",
		"server s3 127.44.0.3:18401 check inter 2000 rise 2 fall 3 weight 100",
	}
)

var setups = map[string]dataplanetest.Setup{
	"plain": {Backend: "be", Lines: []string{"balance roundrobin"}, Servers: serverLines, DefaultsLines: defaultsLines},
	// A default-server line in the backend: the API adds no server at runtime.
	"default-server": {Backend: "be", Lines: []string{"balance roundrobin", "default-server inter 3000"}, Servers: serverLines, DefaultsLines: defaultsLines},
}

type caseDef struct {
	name, setup string
	steps       []step
	differs     map[string]string
}

type step struct {
	method, path string
	body         any
	// read, when set, is a path under the configuration read for the body,
	// which edit then changes.
	read string
	edit map[string]any
	// keep records the answer's body cut to what the driver reads of it
	// (dataplanetest.ReadBody) and its Configuration-Version.
	keep bool
}

// newServer is a server as the driver adds it.
func newServer(edit map[string]any) map[string]any {
	m := map[string]any{"name": "s4", "address": "127.44.0.4", "port": 18401, "check": "enabled",
		"inter": 2000, "rise": 2, "fall": 3, "weight": 100, "maintenance": "disabled"}
	for k, v := range edit {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return m
}

func add(path string, edit map[string]any) step {
	return step{method: http.MethodPost, path: path, body: newServer(edit)}
}

func put(path, server string, edit map[string]any) step {
	return step{method: http.MethodPut, path: path, read: "/backends/be/servers/" + server, edit: edit}
}

func putBackend(path string, edit map[string]any) step {
	return step{method: http.MethodPut, path: path, read: "/backends/be", edit: edit}
}

func get(path string) step { return step{method: http.MethodGet, path: path} }
func del(path string) step { return step{method: http.MethodDelete, path: path} }
func commit(id string, q string) step {
	return step{method: http.MethodPut, path: txnPath + "/{" + id + "}" + q}
}

// getKept is a read whose body the table keeps (what the driver reads of it).
func getKept(path string) step { return step{method: http.MethodGet, path: path, keep: true} }

func one(name, setup string, steps ...step) caseDef {
	return caseDef{name: name, setup: setup, steps: steps}
}

var (
	weight50   = map[string]any{"weight": 50}
	newAddress = map[string]any{"address": "127.44.0.5"}
	newPort    = map[string]any{"port": 18402}
	// bump moves the version on without a reload (another writer): the
	// first version is 1, and version 0 is no version to the API.
	unknownTxn = "00000000-0000-4000-8000-000000000099"
	bump       = put(srvPath+"/s2"+qVersion, "s2", map[string]any{"weight": 90})
)

// cases are the requests the Data Plane driver makes (sync/dataplane), and
// the edges around them.
var cases = []caseDef{
	// Add a server.
	one("add", "plain", add(srvPath+qVersion, nil)),
	one("add maintenance", "plain", add(srvPath+qVersion, map[string]any{"maintenance": "enabled"})),
	one("add without maintenance field", "plain", add(srvPath+qVersion, map[string]any{"maintenance": nil})),
	one("add backup", "plain", add(srvPath+qVersion, map[string]any{"backup": "enabled"})),
	one("add send-proxy-v2", "plain", add(srvPath+qVersion, map[string]any{"send-proxy-v2": "enabled", "check-send-proxy": "enabled"})),
	one("add force_reload", "plain", add(srvPath+qVersion+"&force_reload=true", nil)),
	one("add in transaction", "plain", step{method: http.MethodPost, path: startTxn},
		add(srvPath+inTxn0, nil), commit("txn0", "")),
	one("add in transaction with forced commit", "plain", step{method: http.MethodPost, path: startTxn},
		add(srvPath+inTxn0, nil), commit("txn0", "?force_reload=true")),
	one("add existing name", "plain", add(srvPath+qVersion, map[string]any{"name": "s1"})),
	one("add stale version", "plain", bump, add(srvPath+"?version={stale}", nil)),
	one("add version 0", "plain", add(srvPath+"?version=0", nil)),
	one("add without version", "plain", add(srvPath, nil)),
	one("add with version and transaction", "plain", step{method: http.MethodPost, path: startTxn},
		add(srvPath+"?version={version}&transaction_id={txn0}", nil)),
	one("add in transaction with force_reload", "plain", step{method: http.MethodPost, path: startTxn},
		add(srvPath+inTxn0+"&force_reload=true", nil)),
	one("add to missing backend", "plain", add(cfgPath+"/backends/nope/servers"+qVersion, nil)),

	// Replace a server.
	one("replace unchanged", "plain", put(srvPath+"/s1"+qVersion, "s1", nil)),
	one("replace weight", "plain", put(srvPath+"/s1"+qVersion, "s1", weight50)),
	one("replace address", "plain", put(srvPath+"/s1"+qVersion, "s1", newAddress)),
	one("replace port", "plain", put(srvPath+"/s1"+qVersion, "s1", newPort)),
	one("replace maintenance enabled", "plain", put(srvPath+"/s1"+qVersion, "s1", map[string]any{"maintenance": "enabled"})),
	one("replace maintenance disabled", "plain", put(srvPath+"/s1"+qVersion, "s1", map[string]any{"maintenance": "disabled"})),
	one("replace drain (weight 0)", "plain", put(srvPath+"/s1"+qVersion, "s1", map[string]any{"weight": 0})),
	one("replace inter", "plain", put(srvPath+"/s1"+qVersion, "s1", map[string]any{"inter": 1000})),
	one("replace rise and fall", "plain", put(srvPath+"/s1"+qVersion, "s1", map[string]any{"rise": 1, "fall": 2})),
	one("replace backup", "plain", put(srvPath+"/s1"+qVersion, "s1", map[string]any{"backup": "enabled"})),
	one("replace send-proxy-v2", "plain", put(srvPath+"/s1"+qVersion, "s1", map[string]any{"send-proxy-v2": "enabled", "check-send-proxy": "enabled"})),
	one("replace weight and address", "plain", put(srvPath+"/s1"+qVersion, "s1", map[string]any{"weight": 50, "address": "127.44.0.5"})),
	one("replace weight and inter", "plain", put(srvPath+"/s1"+qVersion, "s1", map[string]any{"weight": 50, "inter": 1000})),
	one("replace weight force_reload", "plain", put(srvPath+"/s1"+qVersion+"&force_reload=true", "s1", weight50)),
	one("replace weight in transaction", "plain", step{method: http.MethodPost, path: startTxn},
		put(srvPath+"/s1"+inTxn0, "s1", weight50), commit("txn0", "")),
	one("replace stale version", "plain", bump, put(srvPath+"/s1?version={stale}", "s1", weight50)),
	one("replace missing server", "plain", step{method: http.MethodPut, path: srvPath + "/s9" + qVersion, body: newServer(map[string]any{"name": "s9"})}),
	one("replace twice", "plain", put(srvPath+"/s1"+qVersion, "s1", weight50), put(srvPath+"/s2"+qVersion, "s2", newAddress)),

	// Delete a server.
	one("delete", "plain", del(srvPath+"/s3"+qVersion)),
	one("delete force_reload", "plain", del(srvPath+"/s3"+qVersion+"&force_reload=true")),
	one("delete in transaction", "plain", step{method: http.MethodPost, path: startTxn}, del(srvPath+"/s3"+inTxn0), commit("txn0", "")),
	one("delete stale version", "plain", bump, del(srvPath+"/s3?version={stale}")),
	one("delete missing server", "plain", del(srvPath+"/s9"+qVersion)),

	// The backend's balance and retry lines (the driver changes balance and
	// checks inside a transaction; retries and redispatch are read).
	one("backend balance", "plain", putBackend(bePath+qVersion, map[string]any{"balance": map[string]any{"algorithm": "leastconn"}})),
	one("backend balance in transaction", "plain", step{method: http.MethodPost, path: startTxn},
		putBackend(bePath+inTxn0, map[string]any{"balance": map[string]any{"algorithm": "leastconn"}}), commit("txn0", "")),
	one("backend retries and redispatch", "plain", putBackend(bePath+qVersion, map[string]any{"retries": 5, "redispatch": map[string]any{"enabled": "enabled", "interval": 2}})),
	one("backend redispatch disabled", "plain", putBackend(bePath+qVersion, map[string]any{"redispatch": map[string]any{"enabled": "disabled"}})),
	one("backend unchanged", "plain", putBackend(bePath+qVersion, nil)),

	// Transactions.
	one("transaction stale version", "plain", bump, step{method: http.MethodPost, path: txnPath + "?version={stale}"}),
	one("transaction empty commit", "plain", step{method: http.MethodPost, path: startTxn}, commit("txn0", "")),
	one("transaction delete", "plain", step{method: http.MethodPost, path: startTxn}, add(srvPath+inTxn0, nil), del(txnPath+"/{txn0}")),
	one("transaction outdated commit", "plain", step{method: http.MethodPost, path: startTxn}, step{method: http.MethodPost, path: startTxn},
		add(srvPath+"?transaction_id={txn1}", nil), commit("txn1", ""), commit("txn0", ""), get(txnPath+"/{txn0}"), del(txnPath+"/{txn0}")),
	one("transaction outdated write", "plain", step{method: http.MethodPost, path: startTxn}, step{method: http.MethodPost, path: startTxn},
		commit("txn1", ""), add(srvPath+inTxn0, nil)),
	one("transaction after a versioned write", "plain", step{method: http.MethodPost, path: startTxn},
		put(srvPath+"/s1"+qVersion, "s1", weight50), put(srvPath+"/s2"+inTxn0, "s2", weight50), commit("txn0", "")),
	one("transaction unknown: write", "plain", add(srvPath+"?transaction_id="+unknownTxn, nil)),
	one("transaction unknown: commit", "plain", step{method: http.MethodPut, path: txnPath + "/" + unknownTxn}),
	one("transaction unknown: delete", "plain", del(txnPath+"/"+unknownTxn)),
	one("transaction deleted then committed", "plain", step{method: http.MethodPost, path: startTxn},
		del(txnPath+"/{txn0}"), commit("txn0", "")),
	one("transaction list", "plain", step{method: http.MethodPost, path: startTxn}, get(txnPath)),

	// Runtime endpoints.
	one("runtime list", "plain", get(rtPath)),
	one("runtime get", "plain", get(rtPath+"/s1")),
	one("runtime maint", "plain", step{method: http.MethodPut, path: rtPath + "/s1", body: map[string]any{"admin_state": "maint"}}),
	one("runtime drain", "plain", step{method: http.MethodPut, path: rtPath + "/s1", body: map[string]any{"admin_state": "drain"}}),
	one("runtime maint then ready", "plain", step{method: http.MethodPut, path: rtPath + "/s1", body: map[string]any{"admin_state": "maint"}},
		step{method: http.MethodPut, path: rtPath + "/s1", body: map[string]any{"admin_state": "ready"}}),
	one("runtime add", "plain", step{method: http.MethodPost, path: rtPath, body: map[string]any{"name": "s4", "address": "127.44.0.4", "port": 18401, "check": "enabled", "weight": 100}}),
	one("runtime delete in maintenance", "plain", step{method: http.MethodPut, path: rtPath + "/s3", body: map[string]any{"admin_state": "maint"}}, del(rtPath+"/s3")),
	one("runtime get missing", "plain", get(rtPath+"/s9")),

	// Reads.
	one("version", "plain", get(cfgPath+"/version")),
	one("info", "plain", get("/info")),
	one("read backend and servers", "plain", get(bePath), get(srvPath), get(srvPath+"/s1"), get(cfgPath+"/defaults/base")),

	// With a default-server line.
	one("default-server: read backend", "default-server", get(bePath), get(srvPath+"/s1")),
	one("default-server: add", "default-server", add(srvPath+qVersion, nil)),
	one("default-server: add force_reload", "default-server", add(srvPath+qVersion+"&force_reload=true", nil)),
	one("default-server: add in transaction", "default-server", step{method: http.MethodPost, path: startTxn}, add(srvPath+inTxn0, nil), commit("txn0", "")),
	one("default-server: replace weight", "default-server", put(srvPath+"/s1"+qVersion, "s1", weight50)),
	one("default-server: replace address", "default-server", put(srvPath+"/s1"+qVersion, "s1", newAddress)),
	one("default-server: replace inter", "default-server", put(srvPath+"/s1"+qVersion, "s1", map[string]any{"inter": 1000})),
	one("default-server: delete", "default-server", del(srvPath+"/s3"+qVersion)),
}
