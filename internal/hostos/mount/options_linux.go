package mount

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// flagOption is what one mount(8) option does to the mount(2) flags.
type flagOption struct {
	set, clear uintptr
}

// flagOptions maps the mount(8) options that are mount(2) flags, as
// libmount's optmap does. A negative form clears what its positive form
// sets, so the last of "ro,rw" wins, as with mount(8). Everything not
// listed is filesystem data.
var flagOptions = map[string]flagOption{
	"defaults": {}, // rw,suid,dev,exec,async: all are the zero flags
	"ro":       {set: unix.MS_RDONLY},
	"rw":       {clear: unix.MS_RDONLY},
	"nosuid":   {set: unix.MS_NOSUID},
	"suid":     {clear: unix.MS_NOSUID},
	"nodev":    {set: unix.MS_NODEV},
	"dev":      {clear: unix.MS_NODEV},
	"noexec":   {set: unix.MS_NOEXEC},
	"exec":     {clear: unix.MS_NOEXEC},
	"sync":     {set: unix.MS_SYNCHRONOUS},
	"async":    {clear: unix.MS_SYNCHRONOUS},
	"dirsync":  {set: unix.MS_DIRSYNC},

	"noatime":       {set: unix.MS_NOATIME},
	"atime":         {clear: unix.MS_NOATIME},
	"nodiratime":    {set: unix.MS_NODIRATIME},
	"diratime":      {clear: unix.MS_NODIRATIME},
	"relatime":      {set: unix.MS_RELATIME},
	"norelatime":    {clear: unix.MS_RELATIME},
	"strictatime":   {set: unix.MS_STRICTATIME},
	"nostrictatime": {clear: unix.MS_STRICTATIME},
	"lazytime":      {set: unix.MS_LAZYTIME},
	"nolazytime":    {clear: unix.MS_LAZYTIME},

	// Since Linux 5.10 nosymfollow is a flag; as data ext4 and xfs would
	// refuse it as an unknown option.
	"nosymfollow": {set: unix.MS_NOSYMFOLLOW},
	"symfollow":   {clear: unix.MS_NOSYMFOLLOW},

	"remount": {set: unix.MS_REMOUNT},
	"bind":    {set: unix.MS_BIND},
	"rbind":   {set: unix.MS_BIND | unix.MS_REC},
	"silent":  {set: unix.MS_SILENT},
	"loud":    {clear: unix.MS_SILENT},
	"mand":    {set: unix.MS_MANDLOCK},
	"nomand":  {clear: unix.MS_MANDLOCK},
}

func splitOptions(options []string) (uintptr, string, error) {
	var (
		flags uintptr
		data  []string
	)
	for _, o := range options {
		if o == "" || strings.ContainsAny(o, ",\x00") {
			return 0, "", fmt.Errorf("%w: %q", ErrInvalidOption, o)
		}
		if f, ok := flagOptions[o]; ok {
			flags = flags&^f.clear | f.set
			continue
		}
		data = append(data, o)
	}
	joined := strings.Join(data, ",")
	// mount(2) copies at most one page of data and silently drops the rest;
	// refuse instead of mounting with options cut in half.
	if len(joined) >= os.Getpagesize() {
		return 0, "", fmt.Errorf("%w: filesystem options are %d bytes, more than mount(2) takes",
			ErrInvalidOption, len(joined))
	}
	return flags, joined, nil
}
