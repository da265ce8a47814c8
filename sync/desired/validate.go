package desired

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/cut"
)

// Everything read from Kubernetes is untrusted: whoever may write an
// EndpointSlice in the namespace, or a Node's status, would otherwise decide
// what HAProxy connects to and what its configuration lines say. So every
// address is parsed strictly and written in canonical form, every name is
// reduced to a safe, bounded, unique one, and what fails is skipped and
// reported, never fatal for the rest.

// Reasons an endpoint or Node is skipped; metrics count by these.
const (
	ReasonInvalidAddress    = "invalid-address"
	ReasonAddressNotAllowed = "address-not-allowed"
	ReasonFamilyMismatch    = "family-mismatch"
	ReasonAddressType       = "unsupported-address-type"
	ReasonInvalidPort       = "invalid-port"
	ReasonNoNodeName        = "no-node-name"
	ReasonNodeNotFound      = "node-not-found"
	ReasonNodeNoAddress     = "node-no-address"
	ReasonDuplicateName     = "duplicate-name"
	ReasonUnmanaged         = "unmanaged-slice"
)

// Skipped is one endpoint (or Node) left out of the desired state.
type Skipped struct {
	// Endpoint says which: "<namespace>/<slice> <address>" or "node <name>".
	Endpoint string `json:"endpoint"`
	// Reason is one of the Reason constants.
	Reason string `json:"reason"`
	// Detail says more, when there is more to say.
	Detail string `json:"detail,omitempty"`
}

// MaxSkippedListed bounds the skipped entries a Report lists; Counts still
// counts them all.
const MaxSkippedListed = 100

// Report says what the desired state left out.
type Report struct {
	// Skipped lists the first MaxSkippedListed skipped items, in input order.
	Skipped []Skipped
	// Counts counts every skipped item by reason.
	Counts map[string]int
	// Warnings says what in the configuration matches nothing in
	// Kubernetes (warnings.go), once each.
	Warnings []Warning

	seen map[[2]string]bool // endpoint and reason already counted
}

// skip records one skipped item, once per endpoint and reason however many
// backends (ports) meet it: a set, not a search of the list, so a hostile
// slice costs linear time and items past the listed ones count once too.
func (r *Report) skip(endpoint, reason, detail string) {
	if r.Counts == nil {
		r.Counts = map[string]int{}
		r.seen = map[[2]string]bool{}
	}
	key := [2]string{endpoint, reason}
	if r.seen[key] {
		return
	}
	r.seen[key] = true
	r.Counts[reason]++
	if len(r.Skipped) < MaxSkippedListed {
		r.Skipped = append(r.Skipped, Skipped{Endpoint: endpoint, Reason: reason, Detail: detail})
	}
}

// Total is the number of skipped items.
func (r Report) Total() int {
	n := 0
	for _, c := range r.Counts {
		n += c
	}
	return n
}

// quote bounds a string from Kubernetes for a report or a log line.
func quote(s string) string { return fmt.Sprintf("%q", cut.To(s, 80)) }

// AddressPolicy decides which server addresses are acceptable.
type AddressPolicy struct {
	// Allowed, when not empty, are the only prefixes server addresses may
	// be in (ALLOWED_SERVER_CIDRS); loopback and link-local addresses are
	// then accepted if inside. When empty, any unicast address is accepted
	// except loopback, link-local, unspecified and broadcast.
	Allowed []netip.Prefix
}

// Check parses raw strictly (no leading zeros, no zone, no IPv4-mapped
// IPv6: each reads differently in HAProxy or hides another family) and
// returns its canonical form, or a reason and detail.
func (p AddressPolicy) Check(raw string, family discoveryv1.AddressType) (string, string, string) {
	a, err := netip.ParseAddr(raw)
	switch {
	case len(raw) > 64 || err != nil:
		return "", ReasonInvalidAddress, "not an IP address"
	case a.Zone() != "":
		return "", ReasonInvalidAddress, "an IPv6 zone is not allowed"
	case a.Is4In6():
		return "", ReasonInvalidAddress, "an IPv4-mapped IPv6 address is not allowed"
	case family == discoveryv1.AddressTypeIPv4 && !a.Is4(), family == discoveryv1.AddressTypeIPv6 && !a.Is6():
		return "", ReasonFamilyMismatch, "the address is not " + string(family)
	case a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "", ReasonAddressNotAllowed, "not a unicast address"
	}
	if len(p.Allowed) > 0 {
		for _, pfx := range p.Allowed {
			if pfx.Contains(a) {
				return a.String(), "", ""
			}
		}
		return "", ReasonAddressNotAllowed, "outside ALLOWED_SERVER_CIDRS"
	}
	if a.IsLoopback() || a.IsLinkLocalUnicast() {
		return "", ReasonAddressNotAllowed, "loopback or link-local (allow it with ALLOWED_SERVER_CIDRS)"
	}
	return a.String(), "", ""
}

// MaxNameLength is the longest server name this service writes.
const MaxNameLength = 63

// ServerName turns a Node name, Pod name or IP address into a valid HAProxy
// server name: letters, digits, '-', '_' and '.' are kept, the dots and
// colons of an IP address and every other character become '-', and a name
// longer than MaxNameLength is cut and ends with a hash of the whole, so it
// stays unique and stable.
func ServerName(s string) string { return serverName(s, MaxNameLength) }

// serverName is ServerName within limit characters.
func serverName(s string, limit int) string {
	if _, err := netip.ParseAddr(s); err == nil {
		s = strings.NewReplacer(".", "-", ":", "-").Replace(s)
	}
	b := []byte(s)
	for i, ch := range b {
		ok := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_' || ch == '.'
		if !ok {
			b[i] = '-'
		}
	}
	name := string(b)
	if len(name) > limit || name == "" {
		return withHash(name, s, limit)
	}
	return name
}

// withHash returns name cut so that "-" and an 8-digit hash of key fit in
// limit characters, followed by them.
func withHash(name, key string, limit int) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	suffix := fmt.Sprintf("-%08x", h.Sum32())
	if len(name) > limit-len(suffix) {
		name = name[:limit-len(suffix)]
	}
	return name + suffix
}

// BackupSuffix ends the name of a server that is a backup (Options.LocalZone:
// outside the local zone). No Node, Pod or address name has an '_', so a
// name with it is never another server's plain name.
const BackupSuffix = "_bk"

// MaxClusterName is the longest CLUSTER_NAME: its prefix ("name-") and
// BackupSuffix leave 39 characters of a Node or Pod name before it is cut
// and hashed.
const MaxClusterName = 20

// ValidClusterName says what is wrong with a CLUSTER_NAME, or "": HAProxy's
// server-name characters but '-' (which ends the prefix, so no cluster's
// prefix is the start of another's), at most MaxClusterName, starting and
// ending with a letter or digit.
func ValidClusterName(name string) string {
	if len(name) > MaxClusterName {
		return fmt.Sprintf("has %d characters; at most %d leave room for Node and Pod names in a server name (%d)", len(name), MaxClusterName, MaxNameLength)
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		alnum := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9'
		if ch == '-' {
			// The prefix is the name and a '-': with one inside, a
			// cluster "eu" would own cluster "eu-west"'s servers.
			return "has '-', which ends the name in a server name (a cluster \"eu\" would own \"eu-west\"'s servers); use '_' or '.'"
		}
		if !alnum && ch != '_' && ch != '.' {
			return fmt.Sprintf("has %q; use letters, digits, '_' and '.'", string(ch))
		}
		if !alnum && (i == 0 || i == len(name)-1) {
			return "must start and end with a letter or digit"
		}
	}
	return ""
}

// NodeServerNames returns the names the server of Node node may have under
// opts (node mode): CLUSTER_NAME's prefix, and with a local zone both its
// active and its backup name. What GET /drained looks for.
func NodeServerNames(opts Options, node string) []string {
	n := namer{prefix: opts.NamePrefix, roles: opts.LocalZone != ""}
	active, backup := n.full(n.base(node), false)
	if backup == "" {
		return []string{active}
	}
	return []string{active, backup}
}

// namer makes the server names of one instance: Prefix (CLUSTER_NAME and
// "-") before a safe name, and BackupSuffix after it for a backup server.
// With roles in use every name keeps room for the suffix, so that a
// server's name differs between its roles by the suffix alone.
type namer struct {
	prefix string
	roles  bool
}

func (n namer) limit() int {
	l := MaxNameLength - len(n.prefix)
	if n.roles {
		l -= len(BackupSuffix)
	}
	return l
}

// base is the name part of s, without prefix and suffix.
func (n namer) base(s string) string { return serverName(s, n.limit()) }

// hashed is base made unique by a hash of key.
func (n namer) hashed(base, key string) string { return withHash(base, key, n.limit()) }

// replaced returns the names the server named name, made of raw (made
// unique by key when key is not empty), may have had: in its other role,
// or before roles were turned on or off (the limit differs by the suffix).
// The servers a desired one replaces (model.Server.Replaces).
func (n namer) replaced(name, raw, key string) []string {
	var out []string
	for _, m := range []namer{n, {prefix: n.prefix, roles: !n.roles}} {
		b := m.base(raw)
		if key != "" {
			b = m.hashed(b, key)
		}
		for _, cand := range []string{m.prefix + b, m.prefix + b + BackupSuffix} {
			if cand != name && len(cand) <= MaxNameLength && !slices.Contains(out, cand) {
				out = append(out, cand)
			}
		}
	}
	return out
}

// full is the server name of base in the given role, and the name of the
// same server in the other role (empty without roles).
func (n namer) full(base string, backup bool) (name, other string) {
	active, bk := n.prefix+base, n.prefix+base+BackupSuffix
	switch {
	case !n.roles:
		return active, ""
	case backup:
		return bk, active
	default:
		return active, bk
	}
}
