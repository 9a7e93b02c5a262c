package gluster

// What docs/shared-pools-glusterfs.md requires of a GlusterFS volume that
// holds a shared pool, for the tests that run one.

// SharedPoolSettings are the volume options a shared pool needs:
// client.strict-locks, without which a client reopens a locked file
// without its lock, and no metadata caching (md-cache, quick-read), with
// which a controller read a record another had replaced a moment before.
var SharedPoolSettings = [][2]string{
	{"performance.stat-prefetch", "off"}, {"performance.quick-read", "off"}, {"client.strict-locks", "on"},
}

// CoherentClientArgs mount a client without the kernel's entry and
// attribute caches (MountNode's clientArgs): with them, a client saw
// another's rename of a record up to a second late (ESTALE, a detach not
// seen).
var CoherentClientArgs = []string{"--entry-timeout=0", "--attribute-timeout=0"}
