package options

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	base := func() Options {
		var o Options
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		o.NodeID = "node-1"
		return o
	}
	if o := base(); o.Validate() != nil {
		t.Fatalf("defaults invalid: %v", o.Validate())
	}
	bad := map[string]func(*Options){
		"mode":                 func(o *Options) { o.Mode = "both" },
		"endpoint":             func(o *Options) { o.Endpoint = "tcp://0.0.0.0:9000" },
		"pool":                 func(o *Options) { o.PoolDir = "relative" },
		"node":                 func(o *Options) { o.NodeID = "" },
		"long node":            func(o *Options) { o.NodeID = string(make([]byte, 64)) },
		"max volumes":          func(o *Options) { o.MaxVolumesPerNode = -1 },
		"kubelet dir":          func(o *Options) { o.KubeletDir = "var/lib/kubelet" },
		"cgroup root":          func(o *Options) { o.CgroupRoots = []string{"sys/fs/cgroup"} },
		"qos resync":           func(o *Options) { o.QoSResync = 0 },
		"driver name":          func(o *Options) { o.DriverName = "" },
		"driver name upper":    func(o *Options) { o.DriverName = "Shared.filevol.csi.io" },
		"driver name dots":     func(o *Options) { o.DriverName = "shared..filevol.csi.io" },
		"driver name dash":     func(o *Options) { o.DriverName = "-shared.filevol.csi.io" },
		"unix no path":         func(o *Options) { o.Endpoint = "unix://" },
		"monitor":              func(o *Options) { o.MonitorInterval = -1 },
		"controller":           func(o *Options) { o.ControllerID = " " },
		"unsafe name":          func(o *Options) { o.PoolShared, o.SharedPoolUnsafeAllow = true, []string{"strict-locks", "locks"} },
		"unsafe alone":         func(o *Options) { o.SharedPoolUnsafeAllow = []string{"strict-locks"} },
		"require name":         func(o *Options) { o.PoolShared, o.SharedPoolRequire = true, []string{"tls", "ssl"} },
		"require alone":        func(o *Options) { o.SharedPoolRequire = []string{"tls"} },
		"dir require name":     func(o *Options) { o.PoolShared, o.DirPoolDir, o.DirPoolRequire = true, "/d", []string{"ssl"} },
		"dir require none and": func(o *Options) { o.PoolShared, o.DirPoolDir, o.DirPoolRequire = true, "/d", []string{"none", "tls"} },
		"dir require no dir":   func(o *Options) { o.PoolShared, o.DirPoolRequire = true, []string{"tls"} },
		"tls secret alone":     func(o *Options) { o.PoolShared, o.SharedPoolTLSSecretDir = true, "/s" },
		"tls dir relative":     func(o *Options) { o.PoolShared, o.SharedPoolTLSSecretDir, o.SharedPoolTLSDir = true, "/s", "rel" },
		"wait negative":        func(o *Options) { o.PoolShared, o.SharedPoolWait = true, -time.Second },
		"wait not shared":      func(o *Options) { o.SharedPoolWait = time.Second },
	}
	for name, mutate := range bad {
		o := base()
		mutate(&o)
		if o.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	o := base()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--pool-shared", "--shared-pool-unsafe-allow=strict-locks, entry-timeout"}); err != nil {
		t.Fatal(err)
	}
	o.NodeID = "node-1"
	if err := o.Validate(); err != nil || strings.Join(o.SharedPoolUnsafeAllow, "|") != "strict-locks|entry-timeout" {
		t.Errorf("--shared-pool-unsafe-allow: %q, %v", o.SharedPoolUnsafeAllow, err)
	}
	for in, want := range map[string]Quantity{"1Gi": 1 << 30, "500Mi": 500 << 20, "2G": 2e9, "42": 42} {
		if q, err := ParseQuantity(in); err != nil || q != want {
			t.Errorf("ParseQuantity(%q) = %d, %v", in, q, err)
		}
	}
}

func TestCgroupRootsFlag(t *testing.T) {
	for arg, want := range map[string][]string{
		"":                         nil,
		"--cgroup-roots=":          nil,
		"--cgroup-roots=/a, /b/c,": {"/a", "/b/c"},
	} {
		var o Options
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		o.AddFlags(fs)
		var args []string
		if arg != "" {
			args = []string{arg}
		} else {
			want = []string{"/sys/fs/cgroup/blkio", "/sys/fs/cgroup"}
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if strings.Join(o.CgroupRoots, "|") != strings.Join(want, "|") {
			t.Errorf("%q: %q, want %q", arg, o.CgroupRoots, want)
		}
	}
}
