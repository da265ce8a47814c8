package desired

// Zones (Options.LocalZone, HAPROXY_LOCAL_ZONE). HAProxy sends traffic to a
// backend's backup servers only while none of its active servers is UP (all
// of them, with "option allbackups"; else the first only), so servers of
// other zones made backup take over by themselves when the local zone has no
// server in service, and leave again when one is back: no reconcile is
// needed at that moment.
//
// HAProxy takes "backup" only when a server is added ("add server", or the
// configuration): "set server" cannot change it. So a server's role is part
// of its name (BackupSuffix), and a server whose role changes (its Node's
// zone label, or HAPROXY_LOCAL_ZONE, changed) is a new server under its
// other name that replaces the old one (model.Server.Replaces): the planner
// adds it, gated, keeps the old one as it is until the new one is in
// service, then parks and deletes the old one.

// backup reports whether a server in zone is a backup one: roles are in
// use and zone is not the local one (an unknown zone is not known to be).
func (c *computer) backup(zone string) bool {
	return c.opts.LocalZone != "" && zone != c.opts.LocalZone
}
