package fs

import (
	"errors"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// readDirect reads sbRead bytes of dev at off (a multiple of sbRead) with
// O_DIRECT, into page-aligned memory as O_DIRECT demands.
func readDirect(dev string, off int64) ([]byte, error) {
	f, err := os.OpenFile(dev, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mem, err := unix.Mmap(-1, 0, sbRead, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	defer unix.Munmap(mem)
	n, err := f.ReadAt(mem, off)
	if err != nil && !(errors.Is(err, io.EOF) && n > 0) {
		return nil, err
	}
	out := make([]byte, sbRead)
	copy(out, mem[:n])
	return out, nil
}
