// Package dirpool owns a directory pool: a btrfs filesystem (or a
// directory in one) whose volumes are directories, one btrfs subvolume
// each, with a qgroup limit that makes the claim's size real (writes past
// it get EDQUOT). It is the controller's store of the "dir" kind
// (internal/volid.KindDir) and what the node's directory backend asks for
// a volume's subvolume and usage.
//
// How a size is enforced, and so what a volume is on the filesystem, is
// the pool's quota (quota.go), chosen once at Open from the filesystem:
// btrfs qgroups on a subvolume (quota_btrfs.go), a CephFS quota on a
// directory (quota_ceph.go), or, on any other filesystem, none: a plain
// directory whose size is not enforced (plain.go). The paths below ask it to make, check, limit and destroy a
// volume; the layout and the commit points are the same for every quota.
//
// Layout, under the pool's directory <dir>:
//
//	<dir>/.filevol/pool.json        the pool's ID (8 hex digits)
//	<dir>/.filevol/.lock            flock: shared by every open, exclusive to repair
//	<dir>/.filevol/volumes/<id>.json a volume's record (internal/recordstore)
//	<dir>/.filevol/tmp/<id>         a subvolume being created
//	<dir>/.filevol/trash/<id>.<n>   a deleted subvolume, destroyed in the background
//	<dir>/.filevol/destroying/<id>.<n> one the collector took from the trash to destroy
//	                                (quota_btrfs.go: destroyTrashed says why)
//	<dir>/.filevol/qgroups/<l>_<n>  a qgroup of a destroyed subvolume, due to go (qgroup.go)
//	<dir>/.filevol/snapshots/<sid>.json a snapshot's record; its data is the
//	                                snapshotter's (snapshotter.go: .filevol/snaps
//	                                on btrfs, the volume's .snap on CephFS)
//	<dir>/.filevol/held/<id>.<ino>  a deleted CephFS volume kept for its snapshots
//	<dir>/<basePath>/<subPath>      a volume's subvolume (Params.Path); the
//	                                directories above it that a create made carry
//	                                trusted.filevol.made=<pool ID> (parents.go)
//
// Create makes the subvolume as tmp/<id>, sets its qgroup limit, owner and
// mode, commits the transaction (syncfs), commits the record (the commit
// point), then renames the subvolume to its path, never over anything.
// Delete renames the subvolume into trash (durably), then removes the
// record (the commit point), then destroys the subvolume in the
// background (nested.go: whatever the pod nested or protected inside).
// A crash at any instant leaves one of these, which Open
// resolves when it holds the pool alone:
//
//	tmp/<id>, no record              a create before its commit: destroyed
//	tmp/<id>, record                 a create after its commit: renamed into place
//	record, subvolume in trash       a delete after its rename: record removed
//	  (or in destroying)
//	trash/*, destroying/*            destroyed (the garbage collector's job)
//
// So nothing half-made counts against the pool after a restart.
//
// Every path the pool opens under <dir> is opened with openat2
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS from the pool's root, and every btrfs
// operation takes a directory descriptor and one name (btrfs_linux.go): a
// pod that owns what is inside its volume cannot redirect any of them.
// Directories between <dir> and a volume must belong to the pool's own
// subvolume (same st_dev), so no volume is ever made inside another.
//
// The package knows nothing of gRPC or CSI and imports no hostos package;
// it uses pool's record types, which the controller's VolumeStore speaks.
package dirpool
