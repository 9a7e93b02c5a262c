package ceph

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil/procs"
)

// TestHarness: two nodes see one filesystem, each client in its node's
// network namespace under its own cephx name, with the page cache off;
// a node's client is found in the MDS's list, evicted (and so blocklisted) and
// unblocklisted; teardown leaves no namespace, mount, process or directory
// behind.
func TestHarness(t *testing.T) {
	var slot int
	var dir string
	var pids []int
	t.Run("run", func(t *testing.T) {
		c := Start(t)
		slot, dir = c.held.Slot, c.Dir()
		a := c.MountNode(t, "node-a")
		// A pool made now must find room.
		c.WaitForRoom(t)
		var st unix.Statfs_t
		if err := unix.Statfs(a, &st); err != nil || st.Bavail == 0 {
			t.Errorf("statfs of a client after WaitForRoom: %d blocks available, %v; want room", st.Bavail, err)
		}
		b := c.MountNode(t, "node-b")
		if err := os.WriteFile(filepath.Join(a, "hello"), []byte("from a"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(b, "hello")); err != nil || string(got) != "from a" {
			t.Fatalf("read through node-b: %q, %v", got, err)
		}
		for _, name := range []string{"node-a", "node-b"} {
			ns := filepath.Join(procs.NetnsDir, fmt.Sprintf("%s%d-%s", Prefix, slot, name))
			pid := c.ClientPID(t, name)
			if !slices.Contains(procs.InNetns(ns), pid) {
				t.Errorf("%s's client %d is not in %s", name, pid, ns)
			}
			pids = append(pids, pid)
		}
		srv := procs.InNetns(filepath.Join(procs.NetnsDir, c.held.ServerNS))
		if len(srv) != 4 {
			t.Errorf("processes in %s: %v, want mon, mgr, osd and mds", c.held.ServerNS, srv)
		}
		pids = append(pids, srv...)
		if a, b := c.ClientUser(t, "node-a"), c.ClientUser(t, "node-b"); a == b {
			t.Errorf("both nodes are %s", a)
		}
		s := c.Client(t, "node-b")
		t.Logf("node-b's client: %+v", s)
		if s.State != "open" || s.Addr == "" {
			t.Errorf("node-b's client: %+v", s)
		}
		ev := c.Evict(t, "node-b")
		if out := c.Ceph(t, "osd", "blocklist", "ls"); !contains(out, ev.Addr) {
			t.Errorf("evicted %s not blocklisted: %s", ev.Addr, out)
		}
		c.Unblocklist(t, ev)
		if out := c.Ceph(t, "osd", "blocklist", "ls"); contains(out, ev.Addr) {
			t.Errorf("%s still blocklisted: %s", ev.Addr, out)
		}
		c.RestartClient(t, "node-b")
		if got, err := os.ReadFile(filepath.Join(b, "hello")); err != nil || string(got) != "from a" {
			t.Fatalf("read through node-b after its restart: %q, %v", got, err)
		}
		pids = append(pids, c.ClientPID(t, "node-b"))
	})
	if t.Skipped() || dir == "" {
		return
	}
	for _, p := range pids {
		if procs.Running(p) {
			t.Errorf("process %d still runs after teardown", p)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s after teardown: %v", dir, err)
	}
	ents, _ := os.ReadDir(procs.NetnsDir)
	for _, e := range ents {
		if len(e.Name()) > len(Prefix) && e.Name()[:len(Prefix)] == Prefix && e.Name()[len(Prefix):len(Prefix)+len(fmt.Sprint(slot))+1] == fmt.Sprintf("%d-", slot) {
			t.Errorf("namespace %s left", e.Name())
		}
	}
	ms, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if len(ms) > 0 {
		t.Errorf("mounts left: %v", ms[0].Mountpoint)
	}
}

func contains(s, sub string) bool { return sub != "" && strings.Contains(s, sub) }
