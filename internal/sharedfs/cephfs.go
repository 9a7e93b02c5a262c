package sharedfs

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/mount"
)

// What a ceph-fuse client (mountinfo type fuse.ceph-fuse) shows of itself,
// Ceph 16.2 here:
//
//   - the virtual extended attributes ceph.client_id ("client4127") and
//     ceph.cluster_fsid on any directory of the mount: which client of
//     which cluster serves it;
//   - its admin socket (a Unix socket, $run_dir/$cluster-$name.$pid.$cctid
//     .asok by default, /run/ceph): "status" answers its global ID (4127)
//     and "config get" the effective value of a setting, as it runs, after
//     ceph.conf, the command line and the monitors' configuration.
//
// So the client behind a mount is the socket whose status ID and fsid are
// the mount's, and what it runs with is read there: no configuration file
// is guessed at, and two clients of one host (two clusters, two mounts)
// are told apart.

// DefaultCephSocketDirs are where ceph-fuse puts its admin socket unless
// its configuration says otherwise.
var DefaultCephSocketDirs = []string{"/run/ceph", "/var/run/ceph"}

// cephEnv is how the CephFS profile reaches a client: tests replace it.
type cephEnv struct {
	// dirs are where sockets are looked for (for messages).
	dirs []string
	// xattr reads an extended attribute of a path.
	xattr func(path, name string) (string, error)
	// sockets lists the candidate admin sockets.
	sockets func() ([]string, error)
	// ask sends one admin socket command and returns the answer.
	ask func(sock string, cmd map[string]string) ([]byte, error)
}

// realCephEnv looks for admin sockets (*.asok) in dirs.
func realCephEnv(dirs []string) cephEnv {
	return cephEnv{
		dirs: dirs,
		xattr: func(path, name string) (string, error) {
			b := make([]byte, 256)
			n, err := unix.Getxattr(path, name, b)
			if err != nil {
				return "", err
			}
			return string(b[:n]), nil
		},
		sockets: func() ([]string, error) {
			var out []string
			for _, d := range dirs {
				m, err := filepath.Glob(filepath.Join(d, "*.asok"))
				if err != nil {
					return nil, err
				}
				out = append(out, m...)
			}
			return out, nil
		},
		ask: askAdminSocket,
	}
}

// askAdminSocket speaks Ceph's admin socket protocol: a JSON command ended
// by a NUL byte; the answer's length (32 bits, big-endian), then the
// answer. A client that does not answer in 2 s is taken as gone.
func askAdminSocket(sock string, cmd map[string]string) ([]byte, error) {
	conn, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	req, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(append(req, 0)); err != nil {
		return nil, err
	}
	var n uint32
	if err := binary.Read(conn, binary.BigEndian, &n); err != nil {
		return nil, err
	}
	if n > 1<<20 {
		return nil, fmt.Errorf("%s: an answer of %d bytes", sock, n)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(conn, b)
	return b, err
}

// CephSettings are the settings the CephFS profile checks.
func CephSettings() []string { return []string{SettingFuseDisablePagecache} }

func checkCephFS(r *Report, _ mount.Table, _ mount.Info, e env) []*Unmet {
	const want = "true"
	u := &Unmet{Setting: SettingFuseDisablePagecache, Want: want,
		Why: "ceph-fuse with the kernel page cache may serve a file's old data from this node's cache after another node rewrote it",
		Fix: "set `fuse disable pagecache = true` in the [client] section of ceph.conf on every node (or start ceph-fuse with --fuse_disable_pagecache=true), remount, then restart filevol"}
	value, where, err := cephSetting(e.ceph, r.Path, "fuse_disable_pagecache")
	if err != nil {
		r.Found = append(r.Found, Found{Setting: u.Setting, Want: want})
		u.Found = "could not be read: " + err.Error()
		return []*Unmet{u}
	}
	ok := value == want
	r.Found = append(r.Found, Found{Setting: u.Setting, Value: value, Want: want, OK: ok})
	if ok {
		return nil
	}
	u.Found = fmt.Sprintf("%s (%s)", value, where)
	return []*Unmet{u}
}

// cephSetting finds the client serving path (by its ceph.client_id and
// ceph.cluster_fsid) among the admin sockets and reads setting there: the
// value, and where it was read.
func cephSetting(env cephEnv, path, setting string) (string, string, error) {
	id, fsid, err := cephClient(env, path)
	if err != nil {
		return "", "", err
	}
	socks, err := env.sockets()
	if err != nil {
		return "", "", err
	}
	for _, s := range socks {
		b, err := env.ask(s, map[string]string{"prefix": "status"})
		if err != nil {
			continue // a daemon gone, another's socket
		}
		var st struct {
			ID uint64 `json:"id"`
		}
		if json.Unmarshal(b, &st) != nil || st.ID != id {
			continue
		}
		if v, err := configGet(env, s, "fsid"); err != nil || v != fsid {
			continue
		}
		v, err := configGet(env, s, setting)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", s, err)
		}
		return v, fmt.Sprintf("client.%d's admin socket %s", id, s), nil
	}
	return "", "", fmt.Errorf("no admin socket of client.%d of cluster %s among %d found (%s): make the client's admin socket directory reachable", id, strings.TrimSpace(fsid), len(socks), strings.Join(env.dirs, ", "))
}

// cephClient reads which client of which cluster serves path: its
// ceph.client_id ("client4127") and ceph.cluster_fsid.
func cephClient(env cephEnv, path string) (uint64, string, error) {
	idAttr, err := env.xattr(path, "ceph.client_id")
	if err != nil {
		return 0, "", fmt.Errorf("%s: ceph.client_id: %w", path, err)
	}
	fsid, err := env.xattr(path, "ceph.cluster_fsid")
	if err != nil {
		return 0, "", fmt.Errorf("%s: ceph.cluster_fsid: %w", path, err)
	}
	id, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(idAttr), "client"), 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("%s: ceph.client_id %q is not clientN", path, idAttr)
	}
	return id, strings.TrimSpace(fsid), nil
}

// configGet reads one setting's effective value through an admin socket.
func configGet(env cephEnv, sock, name string) (string, error) {
	b, err := env.ask(sock, map[string]string{"prefix": "config get", "var": name})
	if err != nil {
		return "", err
	}
	var v map[string]string
	if err := json.Unmarshal(b, &v); err != nil {
		return "", fmt.Errorf("config get %s: %w: %s", name, err, b)
	}
	s, ok := v[name]
	if !ok {
		return "", errors.New("config get " + name + ": not in the answer")
	}
	return s, nil
}
