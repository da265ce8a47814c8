package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// inheritance is what haproxy.cfg's default-server lines give the servers of
// one backend: the backend's own line, then its defaults section's, and so
// on up the defaults' "from" (nearest first). HAProxy applies them to the
// servers it loads from haproxy.cfg, never to "add server" (management.txt:
// no settings are reused from a default-server statement), so a server
// added through the socket gets them only if the add line carries them
// (inherit).
type inheritance struct {
	// sections are the default_server of each section, nearest first;
	// nil entries (a section with none) are allowed.
	sections []*models.DefaultServer
}

// inherited is what inherit decides for one server.
type inherited struct {
	// Keywords are the "add server" keywords the server's haproxy.cfg entry
	// would inherit and its own line (serverModel) does not set, in a fixed
	// order; the runtime API driver writes them before the server's own
	// (plan.Change.Inherit).
	Keywords []string
	// Carried is false when a keyword it would inherit has no "add server"
	// equivalent this service knows of (Unknown names them): the socket must
	// not add the server, haproxy.cfg and a reload must.
	Carried bool
	Unknown []string
}

// inherit returns the default-server keywords server srv, as this service
// writes it (serverModel), inherits in haproxy.cfg: per keyword the nearest
// section's wins, and the server's own keyword wins over every section's,
// as HAProxy parses them. Only keywords HAProxy 2.6 and later take on "add
// server" (each seen accepted on 2.6.12) and that mean there what they mean
// in haproxy.cfg are carried:
//
//	send-proxy, send-proxy-v2, check-send-proxy, ssl, verify, ca-file,
//	check-ssl, maxconn, maxqueue, minconn, slowstart, fastinter, downinter,
//	port (health_check_port), observe, error-limit, on-error
//
// "init-addr" is left out for an IP address (it only says how to resolve a
// name; 2.6 refuses it on "add server"). Keywords the server always sets
// itself (check, inter, rise, fall, weight, maintenance) are never
// inherited. Any other keyword set in a default-server line, or a value
// that could not be written on one CLI line, leaves Carried false.
func (in inheritance) inherit(srv model.Server) inherited {
	out := inherited{Carried: true}
	p, fields := in.merged()
	own := ownKeywords(srv)
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if !handled[k] && !(k == "init-addr" && net.ParseIP(srv.Address) != nil) {
			out.Carried = false
			out.Unknown = append(out.Unknown, k)
		}
	}
	add := func(field string, kw ...string) {
		if fields[field] && !own[field] {
			out.Keywords = append(out.Keywords, strings.Join(kw, " "))
		}
	}
	flag := func(field, value, kw string) {
		if value == enabled {
			add(field, kw)
		}
	}
	num := func(field string, v *int64, kw, unit string) {
		if v != nil {
			add(field, kw, fmt.Sprintf("%d%s", *v, unit))
		}
	}
	word := func(field, v, kw string) {
		if v == "" {
			return
		}
		if strings.ContainsAny(v, " \t\r\n;#\\'\"") {
			// One CLI line: a separator or a quote would cut it.
			out.Carried = false
			out.Unknown = append(out.Unknown, field)
			return
		}
		add(field, kw, v)
	}
	flag("send-proxy", p.SendProxy, "send-proxy")
	flag("send-proxy-v2", p.SendProxyV2, "send-proxy-v2")
	flag("check-send-proxy", p.CheckSendProxy, "check-send-proxy")
	// A server haproxy.cfg gives send-proxy also sends the PROXY header on
	// its checks, unless they go to another port; one added through the
	// socket does not (seen on 2.6.12: its tcp-check came without the
	// header, and a port that requires it failed it): say it.
	if proxied := p.SendProxy == enabled && fields["send-proxy"] && !own["send-proxy"] ||
		p.SendProxyV2 == enabled && fields["send-proxy-v2"] && !own["send-proxy-v2"]; proxied &&
		!(fields["check-send-proxy"] && p.CheckSendProxy == enabled) && !fields["health_check_port"] && !own["health_check_port"] && !own["check-send-proxy"] {
		out.Keywords = append(out.Keywords, "check-send-proxy")
	}
	flag("ssl", p.Ssl, "ssl")
	word("verify", p.Verify, "verify")
	word("ssl_cafile", p.SslCafile, "ca-file")
	flag("check-ssl", p.CheckSsl, "check-ssl")
	num("maxconn", p.Maxconn, "maxconn", "")
	num("maxqueue", p.Maxqueue, "maxqueue", "")
	num("minconn", p.Minconn, "minconn", "")
	num("slowstart", p.Slowstart, "slowstart", "ms")
	num("fastinter", p.Fastinter, "fastinter", "ms")
	num("downinter", p.Downinter, "downinter", "ms")
	num("health_check_port", p.HealthCheckPort, "port", "")
	word("observe", p.Observe, "observe")
	if p.ErrorLimit != 0 {
		add("error_limit", "error-limit", fmt.Sprint(p.ErrorLimit))
	}
	word("on-error", p.OnError, "on-error")
	return out
}

// handled are the default_server fields inherit knows: carried (unless the
// server sets them), or set by every server this service writes. A
// "disabled" flag (e.g. no-send-proxy-v2) is known too: nothing to carry.
var handled = map[string]bool{
	"send-proxy": true, "send-proxy-v2": true, "check-send-proxy": true, "ssl": true, "verify": true,
	"ssl_cafile": true, "check-ssl": true, "maxconn": true, "maxqueue": true, "minconn": true,
	"slowstart": true, "fastinter": true, "downinter": true, "health_check_port": true,
	"observe": true, "error_limit": true, "on-error": true,
	// Always on the server's own line.
	"check": true, "inter": true, "rise": true, "fall": true, "weight": true, "maintenance": true,
}

// ownKeywords are the default_server fields srv's own line sets, as
// serverModel writes it: they win over the default-server's.
func ownKeywords(srv model.Server) map[string]bool {
	ck := srv.Check
	return map[string]bool{
		"send-proxy-v2": ck.SendProxyV2, "check-send-proxy": ck.ProxyOnCheck(),
		"fastinter": ck.FastInter > 0, "downinter": ck.DownInter > 0, "health_check_port": ck.Port != 0,
		"observe": ck.OnError != "", "error_limit": ck.OnError != "", "on-error": ck.OnError != "",
	}
}

// merged returns the default-server HAProxy runs with, each field from the
// nearest section that sets it, and the names of the fields set (to a
// value other than "disabled" for a flag: nothing to inherit then).
func (in inheritance) merged() (models.ServerParams, map[string]bool) {
	all := map[string]json.RawMessage{}
	for _, ds := range in.sections {
		if ds == nil {
			continue
		}
		b, err := json.Marshal(ds)
		if err != nil {
			continue // cannot happen: the model always marshals
		}
		var fields map[string]json.RawMessage
		if json.Unmarshal(b, &fields) != nil {
			continue
		}
		for k, v := range fields {
			if _, set := all[k]; !set && !zeroJSON(v) {
				all[k] = v
			}
		}
	}
	var p models.ServerParams
	if b, err := json.Marshal(all); err == nil {
		_ = json.Unmarshal(b, &p)
	}
	set := make(map[string]bool, len(all))
	for k, v := range all {
		if string(v) != `"disabled"` {
			set[k] = true
		}
	}
	return p, set
}

// zeroJSON reports whether a field's JSON says nothing is set.
func zeroJSON(v json.RawMessage) bool {
	switch string(v) {
	case "null", `""`, "0", "false", "[]", "{}":
		return true
	}
	return false
}

// readInheritance reads the default-server lines of backend and of its
// defaults sections, for an Apply that may add servers through the socket.
func (c *Client) readInheritance(ctx context.Context, backend string) (inheritance, error) {
	var be models.Backend
	if _, err := c.do(ctx, http.MethodGet, "/configuration/backends/"+url.PathEscape(backend), nil, nil, &be); err != nil {
		return inheritance{}, fmt.Errorf("read backend %s: %w", backend, err)
	}
	_, inh, err := c.readSections(ctx, &be, true, nil)
	return inh, err
}

// mayAddOnSocket reports whether p has a change that may add a server
// through the socket: a new server, or a gated one (a loading server's
// add, a renew, the runtime driver's re-add of a server it added).
func mayAddOnSocket(p plan.Plan) bool {
	return slices.ContainsFunc(p.Changes, func(ch plan.Change) bool { return ch.Action == plan.Add || ch.Gate })
}

// socketApply sends rp through the socket, each change carrying the
// keywords its server inherits (plan.Change.Inherit), which the runtime
// API driver writes on any "add server" it sends for it. A server whose
// keywords cannot be carried is not added there (the callers route it to
// haproxy.cfg; this is the last guard): its add is refused as that one
// server's, and a gate that would add it again (a renew, or the runtime
// driver's re-add of a server it added) gates it where it is.
func (c *Client) socketApply(ctx context.Context, inh inheritance, rp plan.Plan) (plan.Applied, error) {
	var refused plan.ServerErrors
	changes := make([]plan.Change, 0, len(rp.Changes))
	for _, ch := range rp.Changes {
		if ch.New == nil {
			changes = append(changes, ch)
			continue
		}
		got := inh.inherit(*ch.New)
		ch.Inherit = got.Keywords
		if !got.Carried {
			if ch.Action == plan.Add {
				refused = append(refused, plan.ServerError{Server: ch.Name, Error: fmt.Sprintf(
					"not added through the runtime socket: haproxy.cfg's default-server gives it %s, which \"add server\" does not take here; the reload adds it",
					strings.Join(got.Unknown, ", "))})
				continue
			}
			ch.Renew = false
			if ch.Old != nil && ch.Old.Runtime != nil && ch.Old.Runtime.Ours {
				old := *ch.Old
				rt := *old.Runtime
				rt.Ours = false // not re-added: gated in place
				old.Runtime = &rt
				ch.Old = &old
			}
		}
		changes = append(changes, ch)
	}
	rp.Changes = changes
	var applied plan.Applied
	var err error
	if len(changes) > 0 {
		applied, err = c.runtime.Apply(ctx, rp)
	}
	if len(refused) == 0 {
		return applied, err
	}
	var more plan.ServerErrors
	if err != nil && !errors.As(err, &more) {
		return applied, err
	}
	return applied, append(refused, more...)
}
