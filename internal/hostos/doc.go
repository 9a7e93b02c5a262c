// Package hostos is the root of the only code in filevol that touches the
// kernel or runs programs. Its subpackages:
//
//   - loop:  loop devices through ioctls (LOOP_CONFIGURE, LOOP_SET_CAPACITY,
//     LOOP_CLR_FD) and sysfs lookups (/sys/block/loopN/loop/backing_file);
//   - mount: mount(2)/umount(2) and the mount table (read with
//     github.com/moby/sys/mountinfo);
//   - fs:    filesystem programs (blkid, mkfs.*, resize tools) run with
//     argument lists under the request's context, plus statfs and freeze ioctls;
//   - cgroup: finds a pod's cgroup (kubelet's cgroupfs and systemd
//     layouts) and writes block I/O throttling to it (v1 blkio, v2 io.max);
//   - extents: a file's extent map (FS_IOC_FIEMAP), for thick volumes'
//     reservations and changed-block tracking;
//   - sparse: a file's bytes copied into a new one as thin as its source
//     (SEEK_DATA/SEEK_HOLE, copy_file_range; zeros skipped where holes
//     are not reported), the copies of both pools;
//   - fscrypt: filesystem encryption keys and policies (fscrypt v2 ioctls),
//     behind the Keys seam;
//   - ofd:   open file description locks (F_OFD_SETLK, F_OFD_SETLKW,
//     F_OFD_GETLK), the fencing of shared pools: loop devices' locks on
//     their images, the pool's owner locks, the attachment records' and
//     the freeze requests' owners all take them there, and nowhere else;
//   - fake:  a stateful in-memory kernel for unit tests without root,
//     fscrypt keys and OFD locks included (Keys, Locks).
//
// This package holds the seams the driver takes them through, one per
// kind of kernel object: Loops, Mounter and FSTools, bundled as Host. New
// returns the real ones (OSLoops, OSMounter, OSFS); fake.New().Host() the
// test double. What the loop list and the mount table mean for a volume
// (its mounts, device binds, staging and targets) is package volview's.
//
// Nothing under hostos imports gRPC, the CSI spec or the pool package.
package hostos
