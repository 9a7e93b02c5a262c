package mount

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		line string
		want Info
	}{{
		name: "no optional fields",
		line: `27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard`,
		want: Info{ID: 27, ParentID: 1, Major: 254, Minor: 0, Root: "/", MountPoint: "/",
			Options: []string{"rw", "relatime"}, FSType: "ext4", Source: "/dev/vda",
			SuperOptions: []string{"rw", "discard"}},
	}, {
		name: "every kind of optional field",
		line: `36 35 98:0 /mnt1 /mnt2 rw,noatime shared:1 master:2 propagate_from:3 unbindable - ext3 /dev/root rw,errors=continue`,
		want: Info{ID: 36, ParentID: 35, Major: 98, Minor: 0, Root: "/mnt1", MountPoint: "/mnt2",
			Options: []string{"rw", "noatime"}, FSType: "ext3", Source: "/dev/root",
			SuperOptions: []string{"rw", "errors=continue"}},
	}, {
		name: "escapes in root, mount point, source and options",
		line: `40 27 7:3 /a\040b/c\011d /var/lib/kubelet/my\040vol\012x\134y ro - xfs /dev/loop\0403 rw,opt=a\054b`,
		want: Info{ID: 40, ParentID: 27, Major: 7, Minor: 3, Root: "/a b/c\td",
			MountPoint: "/var/lib/kubelet/my vol\nx\\y", Options: []string{"ro"}, FSType: "xfs",
			Source: "/dev/loop 3", SuperOptions: []string{"rw", `opt=a\054b`}},
	}, {
		name: "empty source keeps its field",
		line: `50 27 0:40 / /run/x rw - tmpfs  rw,size=4k`,
		want: Info{ID: 50, ParentID: 27, Minor: 40, Root: "/", MountPoint: "/run/x",
			Options: []string{"rw"}, FSType: "tmpfs", SuperOptions: []string{"rw", "size=4k"}},
	}, {
		name: "deleted mount point stays as the kernel shows it",
		line: `51 27 7:1 / /tmp/gone\040(deleted) rw - ext4 /dev/loop1 rw`,
		want: Info{ID: 51, ParentID: 27, Major: 7, Minor: 1, Root: "/", MountPoint: "/tmp/gone (deleted)",
			Options: []string{"rw"}, FSType: "ext4", Source: "/dev/loop1", SuperOptions: []string{"rw"}},
	}, {
		name: "large device numbers",
		line: `52 27 4294967295:4294967295 / /x rw - fuse.sshfs u@h:/ rw`,
		want: Info{ID: 52, ParentID: 27, Major: 1<<32 - 1, Minor: 1<<32 - 1, Root: "/", MountPoint: "/x",
			Options: []string{"rw"}, FSType: "fuse.sshfs", Source: "u@h:/", SuperOptions: []string{"rw"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, text := range []string{tt.line, tt.line + "\n", "\n" + tt.line + "\n\n"} {
				got, err := Parse([]byte(text))
				if err != nil {
					t.Fatalf("Parse(%q): %v", text, err)
				}
				if len(got) != 1 || !reflect.DeepEqual(got[0], tt.want) {
					t.Fatalf("Parse(%q) =\n%#v\nwant\n%#v", text, got, tt.want)
				}
			}
		})
	}
}

// TestParseMalformed: lines the parser (moby/sys/mountinfo) refuses, and
// with them the whole table. It is lenient where the kernel never errs
// (numbers it cannot parse read as 0, escapes are not range-checked,
// options are not unescaped, a space in the last field is a cifs quirk it
// tolerates); those lines are not tested here.
func TestParseMalformed(t *testing.T) {
	good := `27 1 254:0 / / rw - ext4 /dev/vda rw`
	tests := map[string]string{
		"too few fields":       `27 1 254:0 / /`,
		"no separator":         `27 1 254:0 / / rw ext4 /dev/vda rw`,
		"separator too early":  `27 1 254:0 / - rw ext4 /dev/vda rw`,
		"two fields after -":   `27 1 254:0 / / rw - ext4 /dev/vda`,
		"device without colon": `27 1 2540 / / rw - ext4 /dev/vda rw`,
		"device too large":     `27 1 4294967296:0 / / rw - ext4 /dev/vda rw`,
		"empty mount point":    `27 1 254:0 /  rw - ext4 /dev/vda rw`,
		"empty fstype":         `27 1 254:0 / / rw -  /dev/vda rw`,
		"lone backslash":       `27 1 254:0 / /a\b rw - ext4 /dev/vda rw`,
		"short escape":         `27 1 254:0 / /a\04 rw - ext4 /dev/vda rw`,
		"escape at end":        `27 1 254:0 / /a\ rw - ext4 /dev/vda rw`,
		"non-octal escape":     `27 1 254:0 / /a\089 rw - ext4 /dev/vda rw`,
		"bad escape in source": `27 1 254:0 / / rw - ext4 /dev/v\da rw`,
		"tab separated":        "27\t1\t254:0\t/\t/\trw\t-\text4\t/dev/vda\trw",
	}
	for name, line := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Parse([]byte(good + "\n" + line + "\n"))
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want an error", line, got)
			}
		})
	}
}

// escape is the kernel's mangle(): the inverse of unescape, for round trips.
func escape(s, special string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(special, s[i]) >= 0 {
			fmt.Fprintf(&b, "\\%03o", s[i])
		} else {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// escapeList joins options as they were read: the parser keeps the
// kernel's escapes in them.
func escapeList(list []string) string { return strings.Join(list, ",") }

// format writes i back as a mountinfo line.
func format(i Info) string {
	const special = " \t\n\\"
	return fmt.Sprintf("%d %d %d:%d %s %s %s - %s %s %s", i.ID, i.ParentID, i.Major, i.Minor,
		escape(i.Root, special), escape(i.MountPoint, special), escapeList(i.Options),
		escape(i.FSType, special), escape(i.Source, special), escapeList(i.SuperOptions))
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"))
	f.Add([]byte(`40 27 7:3 /a\040b /m\012x\134y ro shared:4 - xfs /dev/loop\0403 rw,opt=a\054b`))
	f.Add([]byte("50 27 0:40 / /run/x rw - tmpfs  rw\n\n51 50 0:41 / /run/x rw - tmpfs t rw"))
	f.Fuzz(func(t *testing.T, data []byte) {
		table, err := Parse(data)
		if err != nil {
			return
		}
		// What parses must survive a round trip through the kernel's
		// escaping unchanged.
		var lines []string
		for _, i := range table {
			if i.MountPoint == "" || i.FSType == "" {
				t.Fatalf("accepted an empty mount point or fstype: %#v", i)
			}
			lines = append(lines, format(i))
		}
		again, err := Parse([]byte(strings.Join(lines, "\n")))
		if err != nil {
			t.Fatalf("reparse: %v", err)
		}
		if len(again) != len(table) {
			t.Fatalf("reparse: %d entries, want %d", len(again), len(table))
		}
		for k := range table {
			if format(again[k]) != format(table[k]) {
				t.Fatalf("round trip changed\n%#v\ninto\n%#v", table[k], again[k])
			}
		}
		for _, i := range table {
			table.At(i.MountPoint)
			table.Under(i.MountPoint)
			table.OfDevice(i.Major, i.Minor)
		}
	})
}

func mustParse(t testing.TB, text string) Table {
	t.Helper()
	table, err := Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return table
}

func ids(list []Info) []int {
	out := []int{}
	for _, i := range list {
		out = append(out, i.ID)
	}
	return out
}

func TestTableQueries(t *testing.T) {
	table := mustParse(t, `1 0 254:0 / / rw - ext4 /dev/vda rw
10 1 7:3 / /stage rw - ext4 /dev/loop3 rw
11 1 7:3 /sub /pod/vol rw - ext4 /dev/loop3 rw
12 11 0:50 / /pod/vol/deep rw - tmpfs tmpfs rw
13 12 0:51 / /pod/vol/deep rw - tmpfs tmpfs rw
14 1 0:52 / /pod/volume rw - tmpfs tmpfs rw
21 22 0:60 / /beneath rw - tmpfs tmpfs rw
22 1 0:61 / /beneath rw - tmpfs tmpfs rw
31 32 0:70 / /cycle rw - tmpfs tmpfs rw
32 31 0:71 / /cycle rw - tmpfs tmpfs rw
`)
	check := func(name string, got []Info, want []int) {
		t.Helper()
		if !reflect.DeepEqual(ids(got), want) {
			t.Errorf("%s = %v, want %v", name, ids(got), want)
		}
	}
	check("At(/stage/)", table.At("/stage/"), []int{10})
	check("At(/pod/vol/deep)", table.At("/pod/vol/deep"), []int{12, 13})
	// 21 was mounted beneath 22 (MOVE_MOUNT_BENEATH) and is listed first:
	// the parent chain, not file order, says 22 is at the bottom.
	check("At(/beneath)", table.At("/beneath"), []int{22, 21})
	if got := table.At("/cycle"); len(got) != 2 {
		t.Errorf("At(/cycle) = %v, want both entries", ids(got))
	}
	check("At(/nothing)", table.At("/nothing"), []int{})
	check("OfDevice(7,3)", table.OfDevice(7, 3), []int{10, 11})
	check("OfDevice(7,4)", table.OfDevice(7, 4), []int{})
	// /pod/volume shares a prefix with /pod/vol but is not below it.
	check("Under(/pod/vol)", table.Under("/pod/vol"), []int{13, 12, 11})
	check("Under(/pod)", table.Under("/pod/"), []int{13, 12, 14, 11})
	if got := table.Under("/"); len(got) != len(table) || got[len(got)-1].ID != 1 {
		t.Errorf("Under(/) = %v, want every entry with / last", ids(got))
	}
}

func TestReadSelf(t *testing.T) {
	table, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(table.At("/")) == 0 {
		t.Fatalf("no mount at / in %d entries", len(table))
	}
}

func BenchmarkReadMountInfo(b *testing.B) {
	for b.Loop() {
		if _, err := Read(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse1000 parses a table the size of a busy Kubernetes node's.
func BenchmarkParse1000(b *testing.B) {
	var sb strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&sb, "%d 27 0:%d / /var/lib/kubelet/pods/%08d-aaaa-bbbb/volumes/kubernetes.io~csi/pvc-%d/mount rw,nosuid,nodev,relatime shared:%d - ext4 /dev/loop%d rw,seclabel\n",
			100+i, i, i, i, i, i)
	}
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}
