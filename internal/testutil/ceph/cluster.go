package ceph

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/filevol/filevol/internal/testutil/procs"
)

// confTemplate is the cluster's ceph.conf; %[1]s is the slot's directory,
// %[2]s the fsid, %[3]s the cluster's address, %[4]s its /24. Beside the
// single-host needs (pools of size 1, no redundancy warnings, 8 PGs a
// pool, which peer in a second) it keeps memory down (an OSD cache of
// 512 MiB at most, an MDS cache of 64 MiB, the mgr without its optional
// modules) and disables the FUSE client's page cache, as a shared pool
// requires (docs/shared-pools-cephfs.md).
const confTemplate = `[global]
fsid = %[2]s
mon host = [v2:%[3]s:3300,v1:%[3]s:6789]
public addr = %[3]s
public network = %[4]s
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
run dir = %[1]s/run
admin socket = %[1]s/run/$name.asok
log file = %[1]s/log/$name.log
pid file = %[1]s/run/$name.pid
mon data = %[1]s/mon/$id
mgr data = %[1]s/mgr/$id
osd data = %[1]s/osd/$id
mds data = %[1]s/mds/$id
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 2
mon data avail crit = 1
[mon]
mgr initial modules = iostat
[mgr]
mgr standby modules = false
[osd]
osd objectstore = bluestore
bluestore block create = true
bluestore block size = 10737418240
bluestore fsck on mkfs = false
osd memory target = 536870912
osd memory cache min = 67108864
[mds]
mds cache memory limit = 67108864
mds beacon interval = 1
[client]
keyring = %[1]s/keys/$name.keyring
fuse disable pagecache = true
`

// bootstrap writes the configuration and keyrings, makes the monitor and
// starts it, then, at once, the mgr, the MDS, the OSD (made on its sparse
// file meanwhile) and the pools and filesystem, and waits until the MDS
// is active.
func (c *Cluster) bootstrap(logf func(string, ...any), begin time.Time) error {
	c.fsid = newUUID()
	conf := fmt.Sprintf(confTemplate, c.held.Dir, c.fsid, c.held.Addr, fmt.Sprintf("%s.%d.0/24", netPrefix, c.held.Slot))
	if err := os.WriteFile(c.Conf(), []byte(conf), 0o644); err != nil {
		return err
	}
	all := append([]entity(nil), entities...)
	for i := range maxNodes {
		all = append(all, entity{fmt.Sprintf("client.node%d", i), clientCaps})
	}
	keys := map[string]string{}
	for _, e := range all {
		keys[e.name] = newKey()
	}
	files := map[string][]entity{filepath.Join(c.held.Dir, "mon.keyring"): all}
	for _, e := range all[1:] {
		path := filepath.Join(c.held.Dir, "keys", e.name+".keyring")
		switch kind, id, _ := strings.Cut(e.name, "."); kind {
		case "mgr", "osd", "mds": // $<type>_data/keyring, a daemon's default
			path = filepath.Join(c.held.Dir, kind, id, "keyring")
		}
		files[path] = []entity{e}
	}
	for path, es := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, keyring(es, keys), 0o600); err != nil {
			return err
		}
	}
	monmap := filepath.Join(c.held.Dir, "monmap")
	if err := c.run("monmaptool", "--create", "--fsid", c.fsid, "--addv", monID,
		fmt.Sprintf("[v2:%s:3300,v1:%s:6789]", c.held.Addr, c.held.Addr), monmap); err != nil {
		return err
	}
	if err := c.run("ceph-mon", "-c", c.Conf(), "--mkfs", "-i", monID, "--monmap", monmap, "--keyring", filepath.Join(c.held.Dir, "mon.keyring")); err != nil {
		return err
	}
	if err := c.startDaemon("mon", monID); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := c.waitFor(ctx, "the monitor", func() (bool, error) {
		_, err := c.cli(ctx, "mon", "stat")
		return err == nil, nil
	}); err != nil {
		return err
	}
	monUp := time.Now()
	osdErr := make(chan error, 1)
	var osdUp time.Time
	go func() {
		err := c.makeOSD(ctx)
		osdUp = time.Now()
		osdErr <- err
	}()
	for _, d := range [][2]string{{"mgr", mgrID}, {"mds", mdsID}} {
		if err := c.startDaemon(d[0], d[1]); err != nil {
			return err
		}
	}
	// Pools need no OSD to be created; their PGs peer once it is up.
	for _, args := range [][]string{
		{"osd", "pool", "create", FSName + "_metadata"},
		{"osd", "pool", "create", FSName + "_data"},
		{"fs", "new", FSName, FSName + "_metadata", FSName + "_data"},
		{"fs", "set", FSName, "allow_new_snaps", "true"},
	} {
		if _, err := c.cli(ctx, args...); err != nil {
			return err
		}
	}
	fsMade := time.Now()
	if err := <-osdErr; err != nil {
		return err
	}
	if err := c.waitFor(ctx, "an active MDS", c.mdsActive); err != nil {
		return err
	}
	logf("ceph: monitor answered after %v; then the pools and filesystem were made in %v, the OSD up in %v, the MDS active in %v",
		monUp.Sub(begin).Round(time.Millisecond), fsMade.Sub(monUp).Round(time.Millisecond),
		osdUp.Sub(monUp).Round(time.Millisecond), time.Since(monUp).Round(time.Millisecond))
	return nil
}

// makeOSD registers osd.0 (its key is already known), makes its BlueStore
// on a sparse file in its data directory, and starts it.
func (c *Cluster) makeOSD(ctx context.Context) error {
	uuid := newUUID()
	out, err := c.cli(ctx, "osd", "new", uuid)
	if err != nil {
		return err
	}
	if id := strings.TrimSpace(out); id != "0" {
		return fmt.Errorf("osd new gave id %q, want 0", id)
	}
	if err := c.run("ceph-osd", "-c", c.Conf(), "-i", "0", "--mkfs", "--osd-uuid", uuid); err != nil {
		return err
	}
	return c.startDaemon("osd", "0")
}

// mdsActive reports whether the filesystem has an MDS up:active.
func (c *Cluster) mdsActive() (bool, error) {
	out, err := c.cli(context.Background(), "fs", "dump", "--format", "json")
	if err != nil {
		return false, nil
	}
	var d struct {
		Filesystems []struct {
			MDSMap struct {
				Info map[string]struct {
					State string `json:"state"`
				} `json:"info"`
			} `json:"mdsmap"`
		} `json:"filesystems"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		return false, fmt.Errorf("fs dump: %w", err)
	}
	for _, f := range d.Filesystems {
		for _, i := range f.MDSMap.Info {
			if i.State == "up:active" {
				return true, nil
			}
		}
	}
	return false, nil
}

// waitFor polls ready every 200 ms until it reports true, a daemon exits,
// or ctx ends.
func (c *Cluster) waitFor(ctx context.Context, what string, ready func() (bool, error)) error {
	for {
		ok, err := ready()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if p := c.deadDaemon(); p != nil {
			return fmt.Errorf("waiting for %s: %s exited: %v\n%s", what, p.Name, p.Cmd.ProcessState, procs.Tail(filepath.Join(c.LogDir(), p.Name+".log"), 15))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %s after %v", what, readyTimeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startDaemon starts ceph-<kind> -f -i id in the cluster's network
// namespace, as our child.
func (c *Cluster) startDaemon(kind, id string) error {
	name := kind + "." + id
	p, err := c.spawn(name, c.held.ServerNS, "ceph-"+kind, "-f", "-c", c.Conf(), "-i", id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.daemons = append(c.daemons, p)
	c.mu.Unlock()
	return nil
}

// spawn starts prog in network namespace ns as our child
// (procs.Spawn). Its output goes to log/<name>.out.
func (c *Cluster) spawn(name, ns, prog string, args ...string) (*procs.Proc, error) {
	return procs.Spawn(c.held.Dir, name, ns, filepath.Join(c.LogDir(), name+".out"), prog, args...)
}

// deadDaemon is a daemon that has exited, or nil.
func (c *Cluster) deadDaemon() *procs.Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.daemons {
		select {
		case <-p.Done:
			return p
		default:
		}
	}
	return nil
}

// run runs a program to its end in the cluster's network namespace.
func (c *Cluster) run(prog string, args ...string) error {
	cmd := exec.Command("nsenter", append([]string{"--net=" + filepath.Join(procs.NetnsDir, c.held.ServerNS), "--", prog}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", prog, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// cli runs the ceph CLI as client.admin in the cluster's network
// namespace and returns its standard output.
func (c *Cluster) cli(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	full := append([]string{"--net=" + filepath.Join(procs.NetnsDir, c.held.ServerNS), "--", "ceph", "-c", c.Conf(), "-n", "client.admin", "--connect-timeout", "20"}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("ceph %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()+out.String()))
	}
	return out.String(), nil
}

// Ceph runs the ceph CLI as client.admin against this cluster and returns
// its output; a failure fails t.
func (c *Cluster) Ceph(t interface {
	Helper()
	Fatalf(string, ...any)
}, args ...string) string {
	t.Helper()
	out, err := c.cli(context.Background(), args...)
	if err != nil {
		t.Fatalf("ceph: %v", err)
	}
	return out
}
