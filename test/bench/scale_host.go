package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// httpGet reads path from the driver's HTTP endpoint.
func (b *bench) httpGet(ctx context.Context, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.httpAddr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %.200s", path, resp.Status, body)
	}
	return body, err
}

// sweepSeconds waits for the start's garbage-collection pass to finish
// (its gauge appears non-zero) and returns its duration.
func (b *bench) sweepSeconds(ctx context.Context) (time.Duration, error) {
	for range 600 {
		body, err := b.httpGet(ctx, "/metrics")
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(body), "\n") {
			var v float64
			if _, err := fmt.Sscanf(line, "filevol_gc_sweep_duration_seconds %g", &v); err == nil && v > 0 {
				return time.Duration(v * float64(time.Second)), nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("no garbage-collection pass reported within a minute of the start")
}

// freeLoopbackAddr returns a 127.0.0.1 port nothing listens on now.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// kernelLimits reports what bounds loop devices and mounts on this kernel.
func kernelLimits() string {
	read := func(p string) string {
		v, err := os.ReadFile(p)
		if err != nil {
			return "?"
		}
		return strings.TrimSpace(string(v))
	}
	loops, _ := filepath.Glob("/sys/block/loop*")
	mounts := strings.Count(read("/proc/self/mountinfo"), "\n")
	return fmt.Sprintf("loop max_loop=%s (devices made on demand beyond it), max_part=%s, %d loop devices exist; fs.mount-max=%s per mount namespace, %d mounts in this one",
		read("/sys/module/loop/parameters/max_loop"), read("/sys/module/loop/parameters/max_part"), len(loops), read("/proc/sys/fs/mount-max"), mounts)
}

// simulateReboot leaves what a reboot leaves, as test/driver's
// SimulateReboot does for the in-process driver: every mount under
// kubeletDir unmounted and every loop device backed by a file under
// poolDir detached; records and images stay. A device just unmounted can
// stay claimed for a moment while another mount namespace drops its copy
// of the mount: retried for up to two seconds.
func simulateReboot(kubeletDir, poolDir string) error {
	table, err := mount.Read()
	if err != nil {
		return err
	}
	for _, m := range table.Under(kubeletDir) {
		if err := mount.UnmountAll(m.MountPoint); err != nil {
			return fmt.Errorf("unmount %s: %w", m.MountPoint, err)
		}
	}
	devs, err := loop.List()
	if err != nil {
		return err
	}
	for _, d := range devs {
		if !strings.HasPrefix(d.BackingFile, poolDir+"/") {
			continue
		}
		err := loop.Detach(d.Path)
		for i := 0; i < 40 && errors.Is(err, loop.ErrBusy); i++ {
			time.Sleep(50 * time.Millisecond)
			err = loop.Detach(d.Path)
		}
		if err != nil {
			return fmt.Errorf("detach %s: %w", d.Path, err)
		}
	}
	return nil
}
