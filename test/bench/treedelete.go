package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// The tree-delete phase (--only tree-delete) is issue 20's promise for
// directory volumes: deleting a tree of a million files must not block
// other calls or time out the provisioner. On each kind of directory pool
// (btrfs: a subvolume with a quota; ext4: a plain directory, size
// unenforced) it fills a directory volume through its published target
// as a pod would, then deletes it while a second client creates and
// deletes small directory volumes in a loop, and times the delete, those
// calls, the background removal and the driver's memory meanwhile.

// provisionerTimeout is external-provisioner's default --timeout: a
// DeleteVolume or CreateVolume slower than this is retried by the
// sidecar, and the user sees the claim stuck.
const provisionerTimeout = 10 * time.Second

// treeFSSize is each tree-delete filesystem's size (sparse).
const treeFSSize = 16 << 30

// treeFileBytes is what each of the million files holds: small files are
// the case where a tree's deletion costs the most per byte.
const treeFileBytes = 64

// treeRemovalTimeout bounds the wait for the background removal.
const treeRemovalTimeout = 30 * time.Minute

// capacityReturnTimeout bounds the wait, after the removal, for
// GetCapacity to give back what the tree took.
const capacityReturnTimeout = 3 * time.Minute

func (b *bench) treeDelete(ctx context.Context) error {
	// The phase runs its own drivers, one per directory pool.
	if err := b.stopDriver("before the tree delete"); err != nil {
		return err
	}
	for _, fsType := range strings.Split(b.cfg.treeFS, ",") {
		if err := b.treeDeleteOn(ctx, fsType); err != nil {
			return fmt.Errorf("tree delete on %s: %w", fsType, err)
		}
	}
	return nil
}

func (b *bench) treeDeleteOn(ctx context.Context, fsType string) (err error) {
	img := filepath.Join(b.runDir, "tree-"+fsType+".img")
	mnt := filepath.Join(b.runDir, "tree-"+fsType)
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	if err := makeLoopFS(ctx, img, mnt, fsType, treeFSSize); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, unmountAndDetach(mnt, img)) }()
	b.driverArgs = []string{"--dir-pool-dir", mnt}
	if err := b.start(ctx); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.stopDriver("after the tree delete on "+fsType)) }()

	label := fsType + " (a subvolume with a quota)"
	params := map[string]string{"provisioningMode": "directory"}
	if fsType != "btrfs" {
		label = fsType + " (a plain directory, size unenforced)"
		params["allowUnenforcedSize"] = "true"
	}
	capacity := func() (int64, error) {
		r, err := b.d.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{Parameters: params, VolumeCapabilities: []*csipb.VolumeCapability{dirCapability}})
		return r.GetAvailableCapacity(), err
	}
	before, err := capacity()
	if err != nil {
		return fmt.Errorf("GetCapacity: %w", err)
	}
	id, err := createDir(ctx, b.d.ctrl, "tree-"+fsType, params, 8<<30)
	if err != nil {
		return err
	}
	took, subvolume, err := b.fillTree(ctx, id, fsType == "btrfs")
	if err != nil {
		return err
	}
	b.rep.detail("Tree delete, "+label+": filling the volume through its target", "%d files of %d bytes in %d directories: %s (%.0f files/s)",
		b.cfg.treeFiles, treeFileBytes, treeDirs(b.cfg.treeFiles, b.cfg.treeWidth), ms(took), rate(b.cfg.treeFiles, took))
	start := time.Now()
	if err := syncFS(mnt); err != nil {
		return err
	}
	b.rep.detail("Tree delete, "+label+": syncfs after the fill", "%s", ms(time.Since(start)))

	baseline, err := churn(ctx, b.d.ctrl, params, nil, 20)
	if err != nil {
		return err
	}
	memBefore, err := b.d.memory()
	if err != nil {
		return err
	}

	// The delete, with the churn beside it until the removal is over.
	stop := make(chan struct{})
	var during churnTimes
	var churnErr error
	var wg sync.WaitGroup
	wg.Go(func() { during, churnErr = churn(ctx, b.d.ctrl, params, stop, 0) })
	peak := memBefore
	sampler := time.NewTicker(100 * time.Millisecond)
	defer sampler.Stop()
	start = time.Now()
	err = deleteVolume(ctx, b.d.ctrl, id)
	deleteTook := time.Since(start)
	var removed time.Duration
	if err == nil {
		for deadline := time.Now().Add(treeRemovalTimeout); ; {
			left, terr := inTrash(mnt, id)
			if terr != nil {
				err = terr
				break
			}
			if !left {
				removed = time.Since(start)
				break
			}
			if time.Now().After(deadline) {
				err = fmt.Errorf("the trash of %s still holds the volume %s after the delete", mnt, treeRemovalTimeout)
				break
			}
			<-sampler.C
			if m, merr := b.d.memory(); merr == nil && m.rssKiB > peak.rssKiB {
				peak = m
			}
		}
	}
	var cleaned time.Duration
	if err == nil && fsType == "btrfs" {
		// The pool's part ends with the subvolume destroyed; the kernel's
		// cleaner frees its tree afterwards, with the churn still running.
		err = btrfsSubvolumeSync(ctx, mnt, subvolume)
		cleaned = time.Since(start)
	}
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	if churnErr != nil {
		return fmt.Errorf("calls beside the delete: %w", churnErr)
	}
	after, err := capacity()
	if err != nil {
		return fmt.Errorf("GetCapacity: %w", err)
	}
	// btrfs keeps the block groups that held the tree's metadata until its
	// cleaner finds them empty: statfs, and so GetCapacity, gives the room
	// back a while after the subvolume is gone.
	back := time.Since(start)
	for deadline := time.Now().Add(capacityReturnTimeout); after < before && time.Now().Before(deadline); back = time.Since(start) {
		time.Sleep(time.Second)
		if after, err = capacity(); err != nil {
			return fmt.Errorf("GetCapacity: %w", err)
		}
	}

	million := fmt.Sprintf("%d files", b.cfg.treeFiles)
	b.rep.target("T1", "DeleteVolume, directory volume of "+million+", "+label, ms(deleteTook),
		"< "+provisionerTimeout.String()+" (provisioner timeout)", deleteTook < provisionerTimeout)
	worst := max(during.create.max, during.delete.max)
	b.rep.target("T2", "Slowest CreateVolume/DeleteVolume of another directory volume meanwhile, "+fsType,
		fmt.Sprintf("%s (%d calls)", ms(worst), during.create.n+during.delete.n), "< "+provisionerTimeout.String(), worst < provisionerTimeout && during.create.n > 0)
	b.rep.info("T3", "Background removal, delete to the volume gone from the trash, "+fsType, ms(removed))
	if fsType == "btrfs" {
		b.rep.info("T3", "Delete to the kernel's cleaner done (btrfs subvolume sync), btrfs", ms(cleaned))
	}
	b.rep.detail("Tree delete, "+label+": CreateVolume of a small directory volume, before", "%s", baseline.create)
	b.rep.detail("Tree delete, "+label+": CreateVolume of a small directory volume, during the removal", "%s", during.create)
	b.rep.detail("Tree delete, "+label+": DeleteVolume of a small directory volume, before", "%s", baseline.delete)
	b.rep.detail("Tree delete, "+label+": DeleteVolume of a small directory volume, during the removal", "%s", during.delete)
	b.rep.detail("Tree delete, "+label+": driver memory", "before the delete %s; highest VmRSS sampled during the removal %s", memBefore, peak)
	returned := fmt.Sprintf("back %s after the delete", ms(back))
	if after < before {
		returned = fmt.Sprintf("still %.1f MiB short %s after the delete", float64(before-after)/(1<<20), ms(back))
	}
	b.rep.detail("Tree delete, "+label+": GetCapacity available", "before the fill %.1f MiB, after the removal %.1f MiB: %s",
		float64(before)/(1<<20), float64(after)/(1<<20), returned)
	return nil
}

var dirCapability = &csipb.VolumeCapability{
	AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER},
	AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
}

func createDir(ctx context.Context, c csipb.ControllerClient, name string, params map[string]string, size int64) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, Parameters: params,
		VolumeCapabilities: []*csipb.VolumeCapability{dirCapability}, CapacityRange: &csipb.CapacityRange{RequiredBytes: size}})
	if err != nil {
		return "", fmt.Errorf("CreateVolume %s: %w", name, err)
	}
	return resp.GetVolume().GetVolumeId(), nil
}

// treeDirs is how many directories hold n files, width in each.
func treeDirs(n, width int) int { return (n + width - 1) / width }

// fillTree stages and publishes volume id as kubelet would, writes
// cfg.treeFiles files into it through the target with a worker per
// directory at a time, and unpublishes and unstages it. With btrfs set it
// returns the ID of the subvolume it wrote into too.
func (b *bench) fillTree(ctx context.Context, id string, btrfs bool) (took time.Duration, subvolume string, err error) {
	staging := filepath.Join(b.kubeletDir(), "plugins/kubernetes.io/csi/filevol.csi.io", id, "globalmount")
	target := filepath.Join(b.kubeletDir(), "pods", "tree", "volumes/kubernetes.io~csi", id, "mount")
	// kubelet makes both paths' parents (beside its vol_data.json).
	for _, p := range []string{staging, target} {
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			return 0, "", err
		}
	}
	if _, err := b.d.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, VolumeCapability: dirCapability}); err != nil {
		return 0, "", fmt.Errorf("NodeStageVolume %s: %w", id, err)
	}
	_, err = b.d.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: dirCapability})
	if err != nil {
		err = fmt.Errorf("NodePublishVolume %s: %w", id, err)
	} else {
		start := time.Now()
		err = writeTree(target, b.cfg.treeFiles, b.cfg.treeWidth)
		took = time.Since(start)
		if err == nil && btrfs {
			subvolume, err = btrfsRootID(ctx, target)
		}
		if _, uerr := b.d.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); uerr != nil {
			err = errors.Join(err, fmt.Errorf("NodeUnpublishVolume %s: %w", id, uerr))
		}
	}
	if _, uerr := b.d.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); uerr != nil {
		err = errors.Join(err, fmt.Errorf("NodeUnstageVolume %s: %w", id, uerr))
	}
	return took, subvolume, err
}

// writeTree writes n small files under root, width in each directory:
// d0000/f000 and so on.
func writeTree(root string, n, width int) error {
	data := make([]byte, treeFileBytes)
	dirs := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for d := range dirs {
				if err := writeDir(filepath.Join(root, fmt.Sprintf("d%04d", d)), min(width, n-d*width), data); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for d := range treeDirs(n, width) {
		select {
		case dirs <- d:
		case err = <-errs:
			break feed
		}
	}
	close(dirs)
	wg.Wait()
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	return err
}

func writeDir(dir string, files int, data []byte) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for i := range files {
		f, err := unix.Openat(fd, fmt.Sprintf("f%06d", i), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fmt.Errorf("create a file in %s: %w", dir, err)
		}
		_, werr := unix.Write(f, data)
		if cerr := unix.Close(f); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fmt.Errorf("write a file in %s: %w", dir, werr)
		}
	}
	return nil
}

// churnTimes are the latencies of the calls churn made.
type churnTimes struct{ create, delete summary }

// churn creates and deletes small directory volumes one after another:
// rounds of them, or until stop is closed when rounds is 0.
func churn(ctx context.Context, c csipb.ControllerClient, params map[string]string, stop <-chan struct{}, rounds int) (churnTimes, error) {
	var creates, deletes []time.Duration
	for i := 0; rounds == 0 || i < rounds; i++ {
		if stop != nil {
			select {
			case <-stop:
				return churnTimes{summarize(creates), summarize(deletes)}, nil
			default:
			}
		}
		start := time.Now()
		id, err := createDir(ctx, c, fmt.Sprintf("churn-%d-%d", time.Now().UnixNano(), i), params, 16<<20)
		if err != nil {
			return churnTimes{}, err
		}
		creates = append(creates, time.Since(start))
		start = time.Now()
		if err := deleteVolume(ctx, c, id); err != nil {
			return churnTimes{}, err
		}
		deletes = append(deletes, time.Since(start))
	}
	return churnTimes{summarize(creates), summarize(deletes)}, nil
}

// inTrash says whether the directory pool at dir still holds volume id in
// its trash or taken from it to destroy (.filevol/trash and
// .filevol/destroying, as internal/dirpool names them: "<id>.<suffix>",
// and "deep.<suffix>" for the deep parts of a tree a plain pool moves to
// the top): the background removal of the volume is not over. The small
// volumes deleted beside it are not waited for.
func inTrash(dir, id string) (bool, error) {
	for _, sub := range []string{"trash", "destroying"} {
		ents, err := os.ReadDir(filepath.Join(dir, ".filevol", sub))
		if err != nil {
			return false, err
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), id+".") || strings.HasPrefix(e.Name(), "deep.") {
				return true, nil
			}
		}
	}
	return false, nil
}

// btrfsSubvolumeSync waits until the kernel's cleaner has freed the
// destroyed subvolume id on the filesystem at dir.
func btrfsSubvolumeSync(ctx context.Context, dir, id string) error {
	ctx, cancel := context.WithTimeout(ctx, treeRemovalTimeout)
	defer cancel()
	_, err := btrfsCmd(ctx, "subvolume", "sync", dir, id)
	return err
}

// btrfsRootID is the ID of the subvolume that holds path.
func btrfsRootID(ctx context.Context, path string) (string, error) {
	return btrfsCmd(ctx, "inspect-internal", "rootid", path)
}

func btrfsCmd(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "btrfs", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("btrfs %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

// unmountAndDetach undoes makeLoopFS.
func unmountAndDetach(mnt, img string) error {
	if err := mount.UnmountAll(mnt); err != nil {
		return err
	}
	// btrfs lets go of its device a moment after the unmount returns.
	var err error
	for range 50 {
		if err = loop.DetachFile(img); err == nil {
			return os.Remove(img)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}
