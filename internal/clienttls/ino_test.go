package clienttls

import (
	"os"
	"syscall"
)

func sysIno(fi os.FileInfo) uint64 { return fi.Sys().(*syscall.Stat_t).Ino }
