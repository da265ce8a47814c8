package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/tlsfiles"
)

// validateURLs reads the Data Plane and runtime URL lists, and the TLS
// files that tls:// runtime URLs need.
func (c *Config) validateURLs() error {
	c.Dataplanes = nil
	for i, raw := range splitList(c.DataplaneURLs) {
		if why := noScheme(raw, i, "http://", "https://"); why != "" {
			return fmt.Errorf("HAPROXY_DATAPLANE_URL: %s", why)
		}
		u, err := parseURL(raw, i)
		if err != nil {
			return fmt.Errorf("HAPROXY_DATAPLANE_URL: %v: put credentials in HAPROXY_DATAPLANE_USERNAME and HAPROXY_DATAPLANE_PASSWORD", err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("HAPROXY_DATAPLANE_URL: %q is not an http(s) URL", short(u.String()))
		}
		c.Dataplanes = append(c.Dataplanes, u)
	}
	c.RuntimeURLs = splitList(c.RuntimeURL)
	if len(c.Dataplanes) == 0 && len(c.RuntimeURLs) == 0 && c.needTarget {
		return errors.New("HAPROXY_DATAPLANE_URL: must be set (or HAPROXY_RUNTIME_URL)")
	}
	tlsURLs := 0
	for i, raw := range c.RuntimeURLs {
		if why := runtimeNoScheme(raw, i); why != "" {
			return fmt.Errorf("HAPROXY_RUNTIME_URL: %s", why)
		}
		u, err := parseURL(raw, i)
		if err != nil {
			return fmt.Errorf("HAPROXY_RUNTIME_URL: %v", err)
		}
		switch {
		case u.Scheme == "unix" && u.Path != "":
		case u.Scheme == "tls" && u.Host != "":
			tlsURLs++
		case u.Scheme == "tcp" && u.Host != "":
			// In clear: whoever reaches it has full control of HAProxy.
			// A loopback address (a sidecar in the same pod) is not across
			// the network.
			if !loopback(u.Hostname()) {
				c.Warnings = append(c.Warnings, fmt.Sprintf("HAPROXY_RUNTIME_URL: %s: admin socket in clear across the network; use tls:// (docs/drivers.md)", short(u.Redacted())))
			}
		default:
			return fmt.Errorf("HAPROXY_RUNTIME_URL: %q is not unix:///path, tls://host:port or tcp://host:port", short(u.String()))
		}
	}
	// With Data Plane URLs, the runtime sockets are those of the same
	// HAProxy instances, in the same order: one each, or none.
	if len(c.Dataplanes) > 0 && len(c.RuntimeURLs) > 0 && len(c.RuntimeURLs) != len(c.Dataplanes) {
		return fmt.Errorf("HAPROXY_RUNTIME_URL: has %d URLs for %d HAPROXY_DATAPLANE_URLs: give one per instance, in the same order", len(c.RuntimeURLs), len(c.Dataplanes))
	}
	return c.loadRuntimeTLS(tlsURLs > 0)
}

// runtimeTLSVars name the TLS files' variables, by part.
var runtimeTLSVars = map[tlsfiles.Part]string{
	tlsfiles.CA:   "HAPROXY_RUNTIME_TLS_CA",
	tlsfiles.Cert: "HAPROXY_RUNTIME_TLS_CERT",
	tlsfiles.Key:  "HAPROXY_RUNTIME_TLS_KEY",
}

// loadRuntimeTLS reads the files tls:// runtime URLs need, once, so that a
// missing or broken one fails at start naming its variable; the loader
// reads them again when they change. Files set without a tls:// URL are
// refused: whoever set them meant the socket to be reached over TLS.
func (c *Config) loadRuntimeTLS(needed bool) error {
	c.RuntimeTLS = nil
	files := tlsfiles.Files{CA: c.RuntimeTLSCA, Cert: c.RuntimeTLSCert, Key: c.RuntimeTLSKey}
	set := map[tlsfiles.Part]string{tlsfiles.CA: files.CA, tlsfiles.Cert: files.Cert, tlsfiles.Key: files.Key}
	for _, part := range []tlsfiles.Part{tlsfiles.CA, tlsfiles.Cert, tlsfiles.Key} {
		name := runtimeTLSVars[part]
		switch {
		case needed && set[part] == "":
			return fmt.Errorf("%s: must be set for a tls:// HAPROXY_RUNTIME_URL (with HAPROXY_RUNTIME_TLS_CA, _CERT and _KEY: the CA the admin socket's certificate chains to, the client certificate and its key)", name)
		case !needed && set[part] != "":
			return fmt.Errorf("%s: set, but no HAPROXY_RUNTIME_URL is tls://host:port", name)
		}
	}
	if c.RuntimeTLSServerName != "" && !needed {
		return errors.New("HAPROXY_RUNTIME_TLS_SERVER_NAME: set, but no HAPROXY_RUNTIME_URL is tls://host:port")
	}
	if !needed {
		return nil
	}
	l, err := tlsfiles.New(files)
	var fe *tlsfiles.Error
	if errors.As(err, &fe) {
		return fmt.Errorf("%s: %v", runtimeTLSVars[fe.Part], err)
	}
	if err != nil {
		return fmt.Errorf("HAPROXY_RUNTIME_TLS_CERT: %v", err)
	}
	c.RuntimeTLS = l
	return nil
}

// noScheme says, when raw (item i of a list) has no scheme, that it has
// none and how to write it with each of schemes; else "". Without "://",
// url.Parse reads "haproxy:5555" as scheme "haproxy", or fails on an
// address: neither says what is wrong. A value with an @ is not quoted (it
// may hold credentials).
func noScheme(raw string, i int, schemes ...string) string {
	if strings.Contains(raw, "://") {
		return ""
	}
	if strings.Contains(raw, "@") {
		return fmt.Sprintf("item %d has no scheme (not shown: it may hold credentials); write it as %s...", i+1, strings.Join(schemes, "... or "))
	}
	var with []string
	for _, s := range schemes {
		with = append(with, s+short(raw))
	}
	return fmt.Sprintf("%q has no scheme; write %s", short(raw), strings.Join(with, " or "))
}

// runtimeNoScheme is noScheme for an admin socket: a path is a unix
// socket; an address (haproxy.cfg's ipv4@ form too) is tls:// or, in
// clear, tcp://.
func runtimeNoScheme(raw string, i int) string {
	if strings.Contains(raw, "://") {
		return ""
	}
	if strings.HasPrefix(raw, "/") || strings.HasPrefix(raw, "unix@") {
		return noScheme(strings.TrimPrefix(raw, "unix@"), i, "unix://")
	}
	addr := strings.TrimPrefix(strings.TrimPrefix(raw, "ipv4@"), "ipv6@")
	if strings.Contains(addr, "@") {
		return noScheme(raw, i, "tls://", "tcp://")
	}
	return fmt.Sprintf("%q has no scheme; write tls://%s (TLS with a client certificate: docs/drivers.md) or, on a trusted network only, tcp://%s", short(raw), short(addr), short(addr))
}

// loopback reports whether host is a loopback address or localhost.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parseURL parses the i-th item of a URL list, refusing credentials in it.
// A URL that cannot be parsed is not quoted: it may hold a password.
func parseURL(raw string, i int) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("item %d cannot be parsed as a URL (not shown: it may hold credentials)", i+1)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%s has credentials in it", short(u.Redacted()))
	}
	return u, nil
}
