// Package hostos is the root of the only code in filevol that touches the
// kernel or runs programs. Its subpackages:
//
//   - loop:  loop devices through ioctls (LOOP_CONFIGURE, LOOP_SET_CAPACITY,
//     LOOP_CLR_FD) and sysfs lookups (/sys/block/loopN/loop/backing_file);
//   - mount: mount(2)/umount(2) and /proc/self/mountinfo;
//   - fs:    filesystem programs (blkid, mkfs.*, resize tools) run with
//     argument lists under the request's context, plus statfs and freeze ioctls.
//
// Nothing under hostos imports gRPC, the CSI spec or the pool package.
package hostos
