package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
)

// The tree-delete phase's volumes: made, filled through their published
// target as a pod would, and the calls made beside the delete.

var dirCapability = &csipb.VolumeCapability{
	AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER},
	AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
}

func createDir(ctx context.Context, c csipb.ControllerClient, name string, params map[string]string, size int64) (string, error) {
	return createFrom(ctx, c, &csipb.CreateVolumeRequest{Name: name, Parameters: params,
		VolumeCapabilities: []*csipb.VolumeCapability{dirCapability}, CapacityRange: &csipb.CapacityRange{RequiredBytes: size}})
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
