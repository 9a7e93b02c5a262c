package sharedfs

import (
	"encoding/json"
	"errors"
	"github.com/filevol/filevol/internal/volume"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/mount"
)

// fakeCeph is a host with ceph-fuse clients: sockets by path, each with
// its status ID and configuration.
type fakeCeph struct {
	id, fsid string // the mount's ceph.client_id and ceph.cluster_fsid
	socks    map[string]fakeClient
}

type fakeClient struct {
	id     uint64
	config map[string]string
}

func (f fakeCeph) env() cephEnv {
	return cephEnv{
		dirs: []string{"/run/ceph"},
		xattr: func(_, name string) (string, error) {
			switch name {
			case "ceph.client_id":
				return f.id, nil
			case "ceph.cluster_fsid":
				return f.fsid, nil
			}
			return "", unix.ENODATA
		},
		sockets: func() ([]string, error) {
			var out []string
			for s := range f.socks {
				out = append(out, s)
			}
			slices.Sort(out)
			return out, nil
		},
		ask: func(sock string, cmd map[string]string) ([]byte, error) {
			c, ok := f.socks[sock]
			if !ok {
				return nil, unix.ECONNREFUSED
			}
			switch cmd["prefix"] {
			case "status":
				return json.Marshal(map[string]any{"id": c.id})
			case "config get":
				if v, ok := c.config[cmd["var"]]; ok {
					return json.Marshal(map[string]string{cmd["var"]: v})
				}
				return []byte(`{}`), nil
			}
			return nil, errors.New("unknown command")
		},
	}
}

// The client behind the mount is the one whose ID and fsid are the
// mount's, among other clients (another cluster's with the same ID, a
// dead socket).
func TestCephFSFindsItsClient(t *testing.T) {
	f := fakeCeph{id: "client4127", fsid: "fsid-1", socks: map[string]fakeClient{
		"/run/ceph/a.asok": {4127, map[string]string{"fsid": "fsid-2", "fuse_disable_pagecache": "true"}},
		"/run/ceph/b.asok": {4127, map[string]string{"fsid": "fsid-1", "fuse_disable_pagecache": "false"}},
		"/run/ceph/c.asok": {4200, map[string]string{"fsid": "fsid-1", "fuse_disable_pagecache": "true"}},
	}}
	r := Report{Path: "/mnt/cephfs/pool"}
	us := checkCephFS(&r, nil, mount.Info{}, env{ceph: f.env()})
	if got := settingsOf(us); !slices.Equal(got, []string{SettingFuseDisablePagecache}) {
		t.Fatalf("unmet %v", got)
	}
	msg := joinUnmet(us).Error()
	for _, want := range []string{"fuse-disable-pagecache: false (client.4127's admin socket /run/ceph/b.asok), want true",
		"fix: set `fuse disable pagecache = true` in the [client] section of ceph.conf", "--shared-pool-unsafe-allow=fuse-disable-pagecache"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q:\n%s", want, msg)
		}
	}
	if want := (Found{SettingFuseDisablePagecache, "false", "true", false}); !slices.Equal(r.Found, []Found{want}) {
		t.Errorf("found %+v", r.Found)
	}

	f.socks["/run/ceph/b.asok"].config["fuse_disable_pagecache"] = "true"
	r = Report{Path: "/mnt/cephfs/pool"}
	if us := checkCephFS(&r, nil, mount.Info{}, env{ceph: f.env()}); len(us) != 0 || !r.Found[0].OK {
		t.Errorf("as documented: %v, %+v", joinUnmet(us), r.Found)
	}
}

// A client whose socket is not found, or a mount without the attributes:
// unmet, as not read, with the reason.
func TestCephFSUnreadable(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		f          fakeCeph
	}{
		{"no socket", "no admin socket of client.4127 of cluster fsid-1 among 1 found (/run/ceph)",
			fakeCeph{id: "client4127", fsid: "fsid-1", socks: map[string]fakeClient{"/run/ceph/x.asok": {9, nil}}}},
		{"no attribute", "ceph.client_id", fakeCeph{}},
		{"odd ID", `ceph.client_id "4127x" is not clientN`, fakeCeph{id: "4127x", fsid: "f"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.f.env()
			if tc.f.id == "" {
				e.xattr = func(string, string) (string, error) { return "", unix.ENODATA }
			}
			r := Report{Path: "/m"}
			us := checkCephFS(&r, nil, mount.Info{}, env{ceph: e})
			if len(us) != 1 || !strings.HasPrefix(us[0].Found, "could not be read: ") || !strings.Contains(us[0].Found, tc.want) {
				t.Fatalf("%+v", us)
			}
			if r.Found[0].OK || r.Found[0].Value != "" {
				t.Errorf("found %+v", r.Found)
			}
		})
	}
}

// The admin socket protocol against a socket speaking it.
func TestAskAdminSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "c.asok")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 0, 256)
		one := make([]byte, 1)
		for {
			if _, err := c.Read(one); err != nil || one[0] == 0 {
				break
			}
			buf = append(buf, one[0])
		}
		answer := `{"got":` + string(buf) + `}`
		n := len(answer)
		c.Write(append([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, answer...))
	}()
	b, err := askAdminSocket(sock, map[string]string{"prefix": "config get", "var": "fsid"})
	if err != nil || string(b) != `{"got":{"prefix":"config get","var":"fsid"}}` {
		t.Errorf("%s, %v", b, err)
	}
	if _, err := askAdminSocket(filepath.Join(t.TempDir(), "none.asok"), nil); !errors.Is(err, os.ErrNotExist) && err == nil {
		t.Error("a missing socket answered")
	}
}

// A node's client, for its stage records: on CephFS the mount's
// ceph.client_id and ceph.cluster_fsid; on the other kinds nothing, and
// nothing read.
func TestClientOf(t *testing.T) {
	f := fakeCeph{id: "client4127", fsid: " d034fad0-ebd3-4b1c-b9b7-4e42fe4397f3\n"}
	id, fsid, err := cephClient(f.env(), "/pool")
	if err != nil || id != 4127 || fsid != "d034fad0-ebd3-4b1c-b9b7-4e42fe4397f3" {
		t.Errorf("cephClient = %d, %q, %v", id, fsid, err)
	}
	if _, _, err := cephClient(fakeCeph{id: "4127x"}.env(), "/pool"); err == nil || !strings.Contains(err.Error(), "not clientN") {
		t.Errorf("a client ID not clientN: %v", err)
	}
	for _, k := range []Kind{KindLocal, KindGlusterFS, KindOther} {
		// A path that does not exist: a kind that read it would fail.
		if c, ok, err := ClientOf(k, "/nonexistent/pool"); ok || err != nil || c != (volume.StorageClient{}) {
			t.Errorf("ClientOf(%s) = %+v, %v, %v; want nothing", k, c, ok, err)
		}
	}
	if _, _, err := ClientOf(KindCephFS, t.TempDir()); err == nil {
		t.Error("ClientOf(cephfs) of a directory no ceph-fuse serves found a client")
	}
}
