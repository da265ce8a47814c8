package dataplanetest

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ConformanceTable is what the real Data Plane API answered and did for a
// list of requests, recorded by hack/record-dataplaneapi against one
// dataplaneapi and one HAProxy (testdata/dataplaneapi/*.json); the
// conformance test replays it against this package's Server.
type ConformanceTable struct {
	DataplaneAPI string `json:"dataplaneapi"`
	HAProxy      string `json:"haproxy"`
	Recorded     string `json:"recorded"`
	Command      string `json:"command"`
	// ReloadDelay is the API's reload_delay during the recording, seconds.
	ReloadDelay int      `json:"reload_delay_seconds"`
	Notes       []string `json:"notes,omitempty"`
	// Setups are the starting points of the cases, by name.
	Setups map[string]Setup `json:"setups"`
	Cases  []Case           `json:"cases"`
}

// Setup is a haproxy.cfg a case starts from, and what the real API read
// from it, which the replay loads into the test API.
type Setup struct {
	Backend string `json:"backend"`
	// Lines are the backend's lines before its server lines.
	Lines []string `json:"backend_lines"`
	// Servers are its server lines.
	Servers []string `json:"server_lines"`
	// DefaultsLines are the lines of the defaults section "base".
	DefaultsLines []string `json:"defaults_lines"`
	// Read: GET of the defaults section, the backend and its servers.
	ReadDefaults json.RawMessage `json:"read_defaults"`
	ReadBackend  json.RawMessage `json:"read_backend"`
	ReadServers  json.RawMessage `json:"read_servers"`
}

// Case is one scenario: requests sent in order from a fresh setup, then
// what the configuration and the running HAProxy held once any reload was
// over.
type Case struct {
	Name  string `json:"name"`
	Setup string `json:"setup"`
	Steps []Step `json:"steps"`
	// Reloaded says HAProxy's master reload counter moved.
	Reloaded bool `json:"reloaded"`
	// ReloadAfter is how long after the last request the reload finished,
	// in seconds rounded to 0.1 (recording only: replays use a short delay).
	ReloadAfter float64 `json:"reload_after_seconds,omitempty"`
	// Servers are the backend's server lines in haproxy.cfg after the case,
	// normalised (NormalizeServerLine).
	Servers []string `json:"server_lines"`
	// BackendLines are its balance, retries and redispatch lines after.
	BackendLines []string `json:"backend_lines"`
	// State is "show servers state" for the servers the case touched.
	State map[string]*ServerState `json:"state"`
	// Sections are the class sections' compared lines after the case
	// (NormalizeSections), when it made any.
	Sections []string `json:"sections,omitempty"`
	// Differs names the aspects ("status", "body", "read", "reload_id", "reloaded",
	// "server_lines", "backend_lines", "state", "sections") the test API cannot match,
	// with why; the replay skips only those.
	Differs map[string]string `json:"differs,omitempty"`
}

// Step is one request and the answer's essentials.
type Step struct {
	Method string `json:"method"`
	// Path is under /v3, with {version} (the current configuration
	// version), {stale} (version - 1) and {txn0}, {txn1} (the transactions
	// this case started, in order) filled in when sent.
	Path string          `json:"path"`
	Body json.RawMessage `json:"body,omitempty"`
	// Status is the answer's status.
	Status int `json:"status"`
	// Shape is the body's shape: "object:" and its sorted top-level keys,
	// "array", "number", or "none".
	Shape string `json:"shape"`
	// Code and Message are an error body's code and message prefix.
	Code     int    `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
	ReloadID bool   `json:"reload_id"`
	// Read, for a step whose case keeps it (a read the Data Plane driver
	// makes), is the answer's body cut to what the driver reads of it
	// (ReadBody); Version then is the Configuration-Version header.
	Read    json.RawMessage `json:"read,omitempty"`
	Version int64           `json:"configuration_version,omitempty"`
}

// ServerState is a server's line of "show servers state": admin and
// operational state bits, address, port, user weight, whether its check runs.
type ServerState struct {
	Admin        int    `json:"admin"`
	Op           int    `json:"op"`
	Addr         string `json:"addr"`
	Port         int    `json:"port"`
	Weight       int    `json:"weight"`
	CheckRunning bool   `json:"check_running"`
}

// LoadConformanceTable reads a table.
func LoadConformanceTable(path string) (*ConformanceTable, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read conformance table: %w", err)
	}
	var t ConformanceTable
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("parse conformance table %s: %w", path, err)
	}
	return &t, nil
}

// Shape describes a body as Step.Shape does, and an error body's code and
// message prefix.
func Shape(body []byte) (shape string, code int, msg string) {
	if len(strings.TrimSpace(string(body))) == 0 {
		return "none", 0, ""
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return "text", 0, ""
	}
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if c, ok := v["code"].(float64); ok {
			code = int(c)
		}
		if m, ok := v["message"].(string); ok {
			msg = MessagePrefix(m)
		}
		return "object:" + strings.Join(keys, ","), code, msg
	case []any:
		return "array", 0, ""
	case float64:
		return "number", 0, ""
	}
	return "other", 0, ""
}

// MessagePrefix is the stable start of an error message: up to its first
// colon (client-native's errors are "<kind>: <reason>"), lower case,
// transaction ids as {id}, at most 48 bytes.
func MessagePrefix(m string) string {
	if i := strings.IndexByte(m, ':'); i >= 0 {
		m = m[:i]
	}
	m = uuid.ReplaceAllString(strings.ToLower(strings.TrimSpace(m)), "{id}")
	if len(m) > 48 {
		m = m[:48]
	}
	return m
}

// uuid matches a transaction id (the real API's are UUIDs, the test API's too).
var uuid = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// serverFlags are server keywords without an argument.
var serverFlags = map[string]bool{
	"check": true, "backup": true, "no-backup": true, "send-proxy": true, "send-proxy-v2": true,
	"no-send-proxy-v2": true, "check-send-proxy": true, "disabled": true, "enabled": true,
	"agent-check": true, "no-check": true, "ssl": true, "no-ssl": true, "check-ssl": true,
}

// timeKeywords take a time, in ms without a unit.
var timeKeywords = map[string]bool{"inter": true, "fastinter": true, "downinter": true, "slowstart": true}

// NormalizeServerLine puts a haproxy.cfg server line in a form that does
// not depend on who wrote it: "server NAME ADDR" then each keyword with its
// argument, sorted; times in ms; comments dropped (the real API's
// "# _version" among them).
func NormalizeServerLine(line string) string {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	f := strings.Fields(line)
	if len(f) < 3 || f[0] != "server" {
		return strings.Join(f, " ")
	}
	var kws []string
	for i := 3; i < len(f); i++ {
		k := f[i]
		if serverFlags[k] || i+1 == len(f) {
			kws = append(kws, k)
			continue
		}
		v := f[i+1]
		if timeKeywords[k] {
			v = millis(v)
		}
		kws = append(kws, k+" "+v)
		i++
	}
	slices.Sort(kws)
	return strings.TrimSpace(strings.Join(f[:3], " ") + " " + strings.Join(kws, " "))
}

// millis turns an HAProxy time ("2s", "500ms", "2000") into ms.
func millis(v string) string {
	units := []struct {
		suffix string
		mul    int64
	}{{"ms", 1}, {"us", 0}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			if x, err := strconv.ParseInt(n, 10, 64); err == nil && u.mul > 0 {
				return strconv.FormatInt(x*u.mul, 10)
			}
			return v
		}
	}
	return v
}

// NormalizeBackendLine keeps the backend lines the table compares (balance,
// retries, redispatch), comments dropped; "" for any other line.
func NormalizeBackendLine(line string) string {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	l := strings.Join(strings.Fields(line), " ")
	for _, p := range []string{"balance ", "retries ", "option redispatch", "no option redispatch"} {
		if strings.HasPrefix(l, p) || l == strings.TrimSpace(p) {
			return l
		}
	}
	return ""
}

// ConformanceAddrs are the addresses the conformance cases give servers;
// the recorder and the replay accept connections on them, so that health
// checks pass and a server's state does not depend on timing. Ports below
// the ephemeral range, on addresses nothing else here uses.
var ConformanceAddrs = []string{
	"127.44.0.1:18401", "127.44.0.2:18401", "127.44.0.3:18401", "127.44.0.4:18401",
	"127.44.0.5:18401", "127.44.0.1:18402",
}

// ClassSection reports whether a section is a class Service's (sync/lb):
// the sections the conformance cases create, whose lines the table holds.
func ClassSection(name string) bool { return strings.Contains(name, "_k8s_") }

// sectionKeywords are the lines of a frontend or backend section the table
// compares: those that decide where traffic goes and how.
var sectionKeywords = []string{"description ", "mode ", "bind ", "default_backend ", "balance ", "option tcp-check",
	"option redispatch", "no option redispatch", "retries ", "server "}

// NormalizeSections returns the compared lines of haproxy.cfg's class
// sections (ClassSection), each as "<section header>: <line>", comments
// dropped, server lines normalised (NormalizeServerLine), sorted: the order
// sections are written in is not compared.
func NormalizeSections(cfg string) []string {
	out := []string{}
	header := ""
	for _, l := range strings.Split(cfg, "\n") {
		if i := strings.IndexByte(l, '#'); i >= 0 {
			l = l[:i]
		}
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "\t") {
			header = ""
			if len(f) >= 2 && (f[0] == "frontend" || f[0] == "backend") && ClassSection(f[1]) {
				header = strings.Join(f, " ")
				out = append(out, header)
			}
			continue
		}
		if header == "" {
			continue
		}
		norm := strings.Join(f, " ")
		for _, k := range sectionKeywords {
			if strings.HasPrefix(norm+" ", k) {
				if f[0] == "server" {
					norm = NormalizeServerLine(norm)
				}
				out = append(out, header+": "+norm)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// BackendReadFields are the fields of a backend the Data Plane driver reads
// (sync/dataplane: its balance, checks, retry lines and the sections it
// inherits from); "servers" is cut by ServerReadFields.
var BackendReadFields = []string{"name", "from", "mode", "balance", "hash_type", "adv_check", "httpchk_params",
	"default_server", "retries", "redispatch", "retry_on", "allbackups"}

// ServerReadFields are the fields of a server the Data Plane driver reads
// (sync/dataplane's managedFields; its test holds the two lists equal).
var ServerReadFields = []string{"name", "address", "port", "weight", "maintenance", "check", "inter", "fastinter",
	"downinter", "rise", "fall", "observe", "error_limit", "on-error", "send-proxy-v2", "check-send-proxy",
	"health_check_port", "backup"}

// ReadBody cuts the answer to a read of backends or servers (by its path:
// servers when it ends in /servers or names one) to what the Data Plane
// driver reads of it: each object keeps its read fields, and a backend's
// "servers", whatever its shape, keeps each server's; lists are sorted by
// name (the driver does not read their order). Any other JSON is kept as is.
func ReadBody(path string, body []byte) (json.RawMessage, error) {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("read body of %s: %w", path, err)
	}
	p, _, _ := strings.Cut(path, "?")
	fields := BackendReadFields
	if strings.HasSuffix(p, "/servers") || strings.Contains(p, "/servers/") {
		fields = ServerReadFields
	}
	return json.Marshal(cut(v, fields))
}

// cut keeps fields of an object, or of each object of a list; the
// "servers" of a backend keep ServerReadFields.
func cut(v any, fields []string) any {
	switch v := v.(type) {
	case []any:
		out := make([]any, 0, len(v))
		for _, e := range v {
			out = append(out, cut(e, fields))
		}
		sort.SliceStable(out, func(i, j int) bool { return nameOf(out[i]) < nameOf(out[j]) })
		return out
	case map[string]any:
		out := map[string]any{}
		for _, f := range fields {
			if x, ok := v[f]; ok {
				out[f] = x
			}
		}
		if srv, ok := v["servers"]; ok && slices.Equal(fields, BackendReadFields) {
			switch srv := srv.(type) {
			case map[string]any:
				m := map[string]any{}
				for k, s := range srv {
					m[k] = cut(s, ServerReadFields)
				}
				out["servers"] = m
			default:
				out["servers"] = cut(srv, ServerReadFields)
			}
		}
		return out
	}
	return v
}

func nameOf(v any) string {
	if m, ok := v.(map[string]any); ok {
		if n, ok := m["name"].(string); ok {
			return n
		}
	}
	return ""
}
