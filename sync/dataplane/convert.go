package dataplane

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

const enabled = "enabled"

// settingsOf reads the backend settings this service manages.
func settingsOf(be *models.Backend) model.Settings {
	s := model.Settings{TCPCheck: be.AdvCheck == "tcp-check"}
	if be.Balance != nil && be.Balance.Algorithm != nil {
		s.Balance = *be.Balance.Algorithm
	}
	if be.AdvCheck == "httpchk" && be.HttpchkParams != nil && (be.HttpchkParams.Method == "" || be.HttpchkParams.Method == "GET") {
		s.HTTPCheck = be.HttpchkParams.URI
	}
	return s
}

// applySettings changes only the managed fields of be, keeping mode, from and
// everything else the API returned (a PUT replaces the whole section).
func applySettings(be *models.Backend, s model.Settings) {
	if be.Balance == nil {
		be.Balance = &models.Balance{}
	}
	algo := s.Balance
	be.Balance.Algorithm = &algo
	switch {
	case s.HTTPCheck != "":
		be.AdvCheck = "httpchk"
		be.HttpchkParams = &models.HttpchkParams{Method: "GET", URI: s.HTTPCheck}
	case s.TCPCheck:
		be.AdvCheck, be.HttpchkParams = "tcp-check", nil
	case be.AdvCheck == "tcp-check" || be.AdvCheck == "httpchk":
		be.AdvCheck, be.HttpchkParams = "", nil
	}
}

// managedFields are the fields of a server this service reads: decoding them
// alone is several times faster than client-native's whole-model decoder,
// which matters for a no-op reconcile over a thousand servers.
type managedFields struct {
	Name        string `json:"name"`
	Address     string `json:"address"`
	Port        *int64 `json:"port"`
	Weight      *int64 `json:"weight"`
	Maintenance string `json:"maintenance"`
	Check       string `json:"check"`
	Inter       *int64 `json:"inter"`
	Fastinter   *int64 `json:"fastinter"`
	Downinter   *int64 `json:"downinter"`
	Rise        *int64 `json:"rise"`
	Fall        *int64 `json:"fall"`
	Observe     string `json:"observe"`
	ErrorLimit  int64  `json:"error_limit"`
	OnError     string `json:"on-error"`
	SendProxyV2 string `json:"send-proxy-v2"`
	// CheckSendProxy: 0.8.8 and before wrote it beside a check port too.
	CheckSendProxy string `json:"check-send-proxy"`
	CheckPort      *int64 `json:"health_check_port"`
	Backup         string `json:"backup"`
}

// rawServer is a server's JSON as the API returned it: the Source of a
// model.Server, decoded into client-native's model only when written.
type rawServer json.RawMessage

// MarshalJSON returns the server's JSON as the API returned it.
func (r rawServer) MarshalJSON() ([]byte, error) { return r, nil }

// serverOf reads a server. In haproxy.cfg, drain is weight 0 (the runtime
// "drain" state is not persisted), and a server whose checks are not enabled
// gets a zero Check so that the planner rewrites it.
func serverOf(raw json.RawMessage) (model.Server, error) {
	var s managedFields
	if err := json.Unmarshal(raw, &s); err != nil {
		return model.Server{}, err
	}
	out := model.Server{Name: s.Name, Address: s.Address, Weight: 1, State: model.Ready, Backup: s.Backup == enabled, Source: rawServer(raw)}
	if s.Port != nil {
		out.Port = int(*s.Port)
	}
	if s.Weight != nil {
		out.Weight = int(*s.Weight)
	}
	switch {
	case s.Maintenance == enabled:
		out.State = model.Maint
	case out.Weight == 0:
		out.State = model.Drain
	}
	if s.Check == enabled {
		out.Check = model.Check{
			Inter:       time.Duration(deref(s.Inter)) * time.Millisecond,
			FastInter:   time.Duration(deref(s.Fastinter)) * time.Millisecond,
			DownInter:   time.Duration(deref(s.Downinter)) * time.Millisecond,
			Rise:        int(deref(s.Rise)),
			Fall:        int(deref(s.Fall)),
			SendProxyV2: s.SendProxyV2 == enabled,
		}
		if cp := int(deref(s.CheckPort)); cp != out.Port {
			out.Check.Port = cp
		}
		// Only the observation this service writes counts as one.
		if s.Observe == "layer4" && s.ErrorLimit == 1 {
			out.Check.OnError = s.OnError
		}
		if s.SendProxyV2 == enabled && s.CheckSendProxy == enabled && !out.Check.ProxyOnCheck() {
			// Its checks open with the PROXY header where they must not
			// (kube-proxy's health port): rewritten. Without the keyword
			// and a port of their own, HAProxy sends it anyway.
			out.Check = model.Check{}
		}
	}
	return out, nil
}

// serverModel writes srv over a copy of the server as read (source may be nil,
// raw JSON from Read, or a model), so fields this service does not manage are kept.
//
// backup is written on a new server (no source) only, from srv.Backup. On one
// that exists it is kept as read, whatever srv says: HAProxy cannot change
// it at runtime, so the API applies a change of it only by a reload (and a
// write that drops it reloads HAProxy with the server active). A server's
// role is in its name, and a new role is a new server (package desired).
func serverModel(srv model.Server, source any) (*models.Server, error) {
	m := &models.Server{}
	read := false
	switch old := source.(type) {
	case rawServer:
		if err := m.UnmarshalJSON(old); err != nil {
			return nil, fmt.Errorf("decode server %s as read: %w", srv.Name, err)
		}
		read = true
	case *models.Server:
		if old != nil {
			cp := *old
			m, read = &cp, true
		}
	}
	m.Name = srv.Name
	m.Address = srv.Address
	m.Port = ptr(int64(srv.Port))
	if srv.Port == 0 {
		m.Port = nil
	}
	weight := int64(srv.Weight)
	m.Maintenance = "disabled"
	switch srv.State {
	case model.Drain:
		weight = 0
	case model.Maint:
		m.Maintenance = enabled
	}
	m.Weight = &weight
	m.Check = enabled
	m.Inter = ptr(srv.Check.Inter.Milliseconds())
	m.Fastinter, m.Downinter = nil, nil
	if srv.Check.FastInter > 0 {
		m.Fastinter = ptr(srv.Check.FastInter.Milliseconds())
	}
	if srv.Check.DownInter > 0 {
		m.Downinter = ptr(srv.Check.DownInter.Milliseconds())
	}
	m.HealthCheckPort = nil
	if srv.Check.Port != 0 {
		m.HealthCheckPort = ptr(int64(srv.Check.Port))
	}
	m.Rise = ptr(int64(srv.Check.Rise))
	m.Fall = ptr(int64(srv.Check.Fall))
	m.Observe, m.ErrorLimit, m.OnError = "", 0, ""
	if srv.Check.OnError != "" {
		m.Observe, m.ErrorLimit, m.OnError = "layer4", 1, srv.Check.OnError
	}
	if !read {
		m.Backup = ""
		if srv.Backup {
			m.Backup = enabled
		}
	}
	m.SendProxyV2, m.CheckSendProxy = "", ""
	if srv.Check.SendProxyV2 {
		m.SendProxyV2 = enabled
	}
	if srv.Check.ProxyOnCheck() {
		m.CheckSendProxy = enabled
	}
	return m, nil
}

func ptr[T any](v T) *T { return &v }

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// retrySection is the part of a backend or defaults section that says how
// HAProxy retries a failed connection.
type retrySection struct {
	Mode       string
	Redispatch *models.Redispatch
	Retries    *int64
	RetryOn    string
	AllBackups string // "enabled", "disabled" or unset
}

func backendRetry(be *models.Backend) retrySection {
	return retrySection{Mode: be.Mode, Redispatch: be.Redispatch, Retries: be.Retries, RetryOn: be.RetryOn, AllBackups: be.Allbackups}
}

func defaultsRetry(d *models.Defaults) retrySection {
	return retrySection{Mode: d.Mode, Redispatch: d.Redispatch, Retries: d.Retries, RetryOn: d.RetryOn, AllBackups: d.Allbackups}
}

// complete reports whether s sets every line that matters, so that the
// sections it inherits from cannot change what HAProxy runs with.
func (s retrySection) complete() bool {
	// (Not "option allbackups": it matters only with backup servers, and
	// asking the defaults for it would cost every backend a read.)
	return s.Mode != "" && s.Redispatch != nil && s.Retries != nil && (s.Mode != "http" || s.RetryOn != "")
}

// inherit fills what s leaves unset from the section it inherits from, as
// HAProxy does: each line comes from the nearest section that sets it.
func (s retrySection) inherit(from retrySection) retrySection {
	s.Mode = cmp.Or(s.Mode, from.Mode)
	s.RetryOn = cmp.Or(s.RetryOn, from.RetryOn)
	s.AllBackups = cmp.Or(s.AllBackups, from.AllBackups)
	if s.Redispatch == nil {
		s.Redispatch = from.Redispatch
	}
	if s.Retries == nil {
		s.Retries = from.Retries
	}
	return s
}

// retryLines reads what HAProxy runs with. The API reads "option redispatch
// [N]" as enabled with interval N (none for a bare line: HAProxy's -1, the
// last retry) and "no option redispatch" as disabled.
func (s retrySection) retryLines() model.RetryLines {
	out := model.RetryLines{Mode: s.Mode, RetryOn: s.RetryOn, AllBackups: s.AllBackups == enabled}
	if r := s.Redispatch; r != nil && r.Enabled != nil && *r.Enabled == enabled {
		out.Redispatch = -1
		if r.Interval != nil {
			out.Redispatch = int(*r.Interval)
		}
	}
	if s.Retries != nil {
		n := int(*s.Retries)
		out.Retries = &n
	}
	return out
}
