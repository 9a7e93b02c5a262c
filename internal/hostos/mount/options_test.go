package mount

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSplitOptions(t *testing.T) {
	tests := []struct {
		in    []string
		flags uintptr
		data  string
	}{
		{nil, 0, ""},
		{[]string{"defaults"}, 0, ""},
		{[]string{"ro"}, unix.MS_RDONLY, ""},
		{[]string{"ro", "rw"}, 0, ""},
		{[]string{"rw", "ro"}, unix.MS_RDONLY, ""},
		{[]string{"nosuid", "nodev", "noexec"}, unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{[]string{"nosuid", "suid", "nodev", "dev", "noexec", "exec"}, 0, ""},
		{[]string{"sync", "dirsync"}, unix.MS_SYNCHRONOUS | unix.MS_DIRSYNC, ""},
		{[]string{"sync", "async"}, 0, ""},
		{[]string{"noatime", "nodiratime"}, unix.MS_NOATIME | unix.MS_NODIRATIME, ""},
		{[]string{"noatime", "atime", "nodiratime", "diratime"}, 0, ""},
		{[]string{"relatime"}, unix.MS_RELATIME, ""},
		{[]string{"relatime", "norelatime"}, 0, ""},
		{[]string{"strictatime"}, unix.MS_STRICTATIME, ""},
		{[]string{"lazytime"}, unix.MS_LAZYTIME, ""},
		{[]string{"lazytime", "nolazytime"}, 0, ""},
		{[]string{"nosymfollow"}, unix.MS_NOSYMFOLLOW, ""},
		{[]string{"remount", "ro"}, unix.MS_REMOUNT | unix.MS_RDONLY, ""},
		{[]string{"bind"}, unix.MS_BIND, ""},
		{[]string{"rbind"}, unix.MS_BIND | unix.MS_REC, ""},
		{[]string{"silent"}, unix.MS_SILENT, ""},
		{[]string{"silent", "loud"}, 0, ""},
		{[]string{"mand"}, unix.MS_MANDLOCK, ""},
		{[]string{"mand", "nomand"}, 0, ""},
		{[]string{"nouuid"}, 0, "nouuid"},
		{[]string{"ro", "nouuid", "noatime", "discard", "data=ordered", "errors=remount-ro"},
			unix.MS_RDONLY | unix.MS_NOATIME, "nouuid,discard,data=ordered,errors=remount-ro"},
		// Case matters to mount(2): "RO" is not a flag, the fs decides.
		{[]string{"RO"}, 0, "RO"},
		{[]string{"context=system_u:object_r:container_file_t:s0"}, 0,
			"context=system_u:object_r:container_file_t:s0"},
	}
	for _, tt := range tests {
		flags, data, err := SplitOptions(tt.in)
		if err != nil || flags != tt.flags || data != tt.data {
			t.Errorf("SplitOptions(%q) = %#x, %q, %v; want %#x, %q, nil",
				tt.in, flags, data, err, tt.flags, tt.data)
		}
	}
}

func TestSplitOptionsInvalid(t *testing.T) {
	for _, in := range [][]string{
		{""},
		{"ro", ""},
		{"ro,nosuid"},
		{"uid=0,gid=0"},
		{"a\x00b"},
		{"nouuid", strings.Repeat("x", 5000)},
	} {
		_, _, err := SplitOptions(in)
		if !errors.Is(err, ErrInvalidOption) {
			t.Errorf("SplitOptions(%q) error = %v, want ErrInvalidOption", in, err)
		}
	}
	_, _, err := SplitOptions([]string{"ro", "a,b"})
	if err == nil || !strings.Contains(err.Error(), `"a,b"`) {
		t.Errorf("error %v does not name the option", err)
	}
}
