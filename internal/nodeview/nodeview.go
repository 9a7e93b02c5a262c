// Package nodeview builds the driver's own view of the volumes in its
// pool on this node — each record, its image file, the loop devices backed
// by it, its staging and target mounts, filesystem usage and health — from
// the pool and what the kernel shows now (sysfs, /proc/self/mountinfo,
// statfs). It serves that view read-only as JSON (/debug/volumes, see
// package api) and feeds the scrape-time metrics collector.
//
// It reads, never changes: no mount, no attach, no record write. It must
// not import gRPC, the CSI spec or internal/csi (health comes through the
// HealthFunc the caller passes), nor client-go.
package nodeview

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/nodeview/api"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/internal/volview"
)

// Record parameters that csi-provisioner --extra-create-metadata adds.
const (
	ParamPVName       = volume.ParamPVName
	ParamPVCName      = volume.ParamPVCName
	ParamPVCNamespace = volume.ParamPVCNamespace
)

// quarantineDir is where the pool moves images without a record (see the
// layout in package pool's doc).
const quarantineDir = "quarantine"

// Pool is what the view reads of the pool; *pool.Pool satisfies it.
type Pool interface {
	Dir() string
	VolumesDir() string
	List() []volume.Volume
	Capacity() (volume.Capacity, error)
	ImagePath(id string) string
}

// HealthFunc returns the abnormal conditions of a volume, given the
// staging and target paths the kernel shows (either may be empty). The
// driver passes its NodeGetVolumeHealth, so the view and the CSI health
// RPCs can never disagree.
type HealthFunc func(ctx context.Context, volumeID, stagingPath, targetPath string) ([]api.Condition, error)

// Builder builds Reports. Its fields are set once; Build is safe for
// concurrent use.
type Builder struct {
	Node, Driver, Version string
	Pool                  Pool
	// Kernel is read only: its loop list, mount table and statfs.
	Kernel hostos.Host
	// Health, when set, fills Volume.Health (Build with health=true).
	Health HealthFunc
	// Share, when set, is called once per Build before the health
	// questions, with the loop devices and the mount table the view just
	// read: the context it returns makes every health answer come from
	// them (reading.WithListed), instead of a reading of
	// every loop device and the whole mount table per volume.
	Share func(ctx context.Context, devs []loop.Device, table mount.Table) context.Context
	// Warnings are copied into every Report (api.Report.Warnings).
	Warnings []string
	// DirPool, when set, lists the directory volumes this process serves;
	// DirHealth says which conditions of one a person must hear of (the
	// driver leaves out an unenforced size, which the volume's context
	// already says). Those with any are Report.DirVolumes.
	DirPool   interface{ List() []volume.Volume }
	DirHealth HealthFunc
}

// Build returns the current view. With health false it skips the health
// checks (the metrics collector does not need them). Problems reading one
// source are recorded in Report.Errors; the rest is still filled.
func (b *Builder) Build(ctx context.Context, health bool) api.Report {
	r := api.Report{Node: b.Node, Driver: b.Driver, Version: b.Version, Time: time.Now().UTC(), PoolDir: b.Pool.Dir(),
		Warnings: b.Warnings}
	fail := func(what string, err error) { r.Errors = append(r.Errors, what+": "+err.Error()) }
	if c, err := b.Pool.Capacity(); err != nil {
		fail("pool capacity", err)
	} else {
		r.Pool = api.Pool{TotalBytes: c.TotalBytes, FreeBytes: c.FreeBytes, ReservedBytes: c.ReservedBytes,
			AvailableBytes: c.AvailableBytes, ProvisionedBytes: c.ProvisionedBytes}
	}
	q, err := Quarantined(b.Pool.Dir())
	if err != nil {
		fail("quarantine", err)
	}
	r.Quarantine = q
	// The kernel reports backing files with symlinks resolved.
	dir, vdir := b.Pool.Dir(), b.Pool.VolumesDir()
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	if real, err := filepath.EvalSymlinks(vdir); err == nil {
		vdir = real
	}
	byID := map[string][]loop.Device{}
	devs, err := b.Kernel.Loops.List()
	if err != nil {
		fail("loop devices", err)
	}
	for _, d := range devs {
		// The path sysfs shows is not enough: another node sharing this
		// kernel, with its own pool mounted at the same path in its own
		// mount namespace, has devices shown under our pool's path. Only
		// the file's identity makes a device this pool's.
		if !strings.HasPrefix(d.BackingFile, dir+"/") || !b.Kernel.Loops.BackedBy(d, d.BackingFile) {
			continue
		}
		r.LoopDevices++
		if id, ok := pool.ImageVolumeID(vdir, d.BackingFile); ok {
			byID[id] = append(byID[id], d)
		}
	}
	listed := err == nil
	// Health reads the table even without a device: a block volume's bind
	// whose device is gone is found there.
	share := health && b.Health != nil && b.Share != nil
	var table mount.Table
	if r.LoopDevices > 0 || share {
		if table, err = b.Kernel.Mounts.Table(); err != nil {
			fail("mount table", err)
		}
	}
	if share && listed && err == nil {
		ctx = b.Share(ctx, devs, table)
	}
	// Indexed: every volume's uses are looked up in the one table.
	mounts := volview.IndexTable(table)
	r.Volumes = []api.Volume{}
	for _, rec := range b.Pool.List() {
		v := volumeView(rec, b.Pool.ImagePath(rec.ID), mounts.Of(byID[rec.ID]))
		if st := stagingFS(v); st != "" {
			if s, err := b.Kernel.FS.StatFS(st); err != nil {
				fail("statfs "+st, err)
			} else {
				v.Usage = &api.Usage{TotalBytes: s.TotalBytes, UsedBytes: s.UsedBytes, AvailableBytes: s.AvailableBytes,
					TotalInodes: s.TotalInodes, UsedInodes: s.UsedInodes}
			}
		}
		if health && b.Health != nil {
			if err := b.health(ctx, &v); err != nil {
				fail("health of "+rec.ID, err)
			}
		}
		r.Volumes = append(r.Volumes, v)
	}
	if health && b.DirPool != nil && b.DirHealth != nil {
		for _, rec := range b.DirPool.List() {
			conds, err := b.DirHealth(ctx, rec.ID, "", "")
			if err != nil {
				fail("health of "+rec.ID, err)
			}
			if len(conds) > 0 {
				v := volumeView(rec, "", volview.Usage{})
				v.Image, v.Health = api.Image{}, conds
				r.DirVolumes = append(r.DirVolumes, v)
			}
		}
	}
	return r
}

// health asks once per target (the CSI request names one publish path),
// keeping each reason once.
func (b *Builder) health(ctx context.Context, v *api.Volume) error {
	staging := ""
	if len(v.Staging) > 0 {
		staging = v.Staging[0].Path
	}
	targets := []string{""}
	if len(v.Targets) > 0 {
		targets = targets[:0]
		for _, t := range v.Targets {
			targets = append(targets, t.Path)
		}
	}
	seen := map[string]bool{}
	for _, t := range targets {
		conds, err := b.Health(ctx, v.Record.ID, staging, t)
		if err != nil {
			return err
		}
		for _, c := range conds {
			if !seen[c.Reason] {
				seen[c.Reason] = true
				v.Health = append(v.Health, c)
			}
		}
	}
	return nil
}

// Quarantined lists the names of the images the pool moved aside.
func Quarantined(poolDir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(poolDir, quarantineDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out, err
}

func volumeView(rec volume.Volume, img string, u volview.Usage) api.Volume {
	v := api.Volume{
		Record: api.Record{ID: rec.ID, Name: rec.Name, CapacityBytes: rec.CapacityBytes, FSType: rec.FSType,
			Provisioning: rec.Provisioning, Parameters: rec.Parameters, Node: rec.Node, CreatedAt: rec.CreatedAt},
		PV: rec.Parameters[ParamPVName], PVCNamespace: rec.Parameters[ParamPVCNamespace], PVCName: rec.Parameters[ParamPVCName],
		Image: image(img, rec.ImagePending),
	}
	if e := rec.Encryption; e != nil {
		v.Record.Encryption, v.Record.EncryptionKeyMade = e.Scheme, e.Wrapped != nil
	}
	for _, d := range u.Devices {
		v.LoopDevices = append(v.LoopDevices, api.LoopDevice{Path: d.Path, ReadOnly: d.ReadOnly, DirectIO: d.DirectIO,
			SizeBytes: d.SizeBytes, Deleted: d.Deleted})
	}
	staging, targets := u.Roles()
	v.Staging, v.Targets = apiMounts(staging), apiMounts(targets)
	switch {
	case len(v.Targets) > 0:
		v.State = api.StatePublished
	case len(v.Staging) > 0:
		v.State = api.StateStaged
	case len(v.LoopDevices) > 0:
		v.State = api.StateAttached
	default:
		v.State = api.StateIdle
	}
	return v
}

func apiMounts(uses []volview.Use) []api.Mount {
	var out []api.Mount
	for _, x := range uses {
		out = append(out, api.Mount{Path: x.MountPoint, FSType: x.FSType, Device: x.Device.Path, ReadOnly: x.ReadOnly(),
			PodUID: volview.PodUID(x.MountPoint)})
	}
	return out
}

// stagingFS is the path whose statfs is the volume's usage.
func stagingFS(v api.Volume) string {
	for _, ms := range [][]api.Mount{v.Staging, v.Targets} {
		for _, m := range ms {
			if m.FSType != "devtmpfs" {
				return m.Path
			}
		}
	}
	return ""
}

func image(path string, pending bool) api.Image {
	img := api.Image{Path: path, Pending: pending}
	st, err := os.Stat(path)
	if err != nil {
		return img
	}
	img.Exists, img.SizeBytes = true, st.Size()
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		img.AllocatedBytes = sys.Blocks * 512 // st_blocks is always in 512-byte units
	}
	return img
}
