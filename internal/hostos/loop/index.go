package loop

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Index is one pass over every loop device's backing file, indexed by
// the file's base name, so that the devices of many files are found with
// one pass instead of one per file (Find reads every device's backing file
// each time: on a node with 1,000 volumes, 1,000 look-ups cost a million
// sysfs reads).
//
// It is an index, not a cache of answers: Find re-reads each candidate
// device in full before returning it, so a device it returns is as the
// kernel shows it at that moment, and one detached or re-attached to
// another file since the pass is dropped. What it cannot see is a device
// attached after the pass; callers read an Index inside the request
// that asks, after the locks that keep their own volume's devices from
// changing, which makes it as fresh as a Find made there.
type Index struct {
	dir    string
	byBase map[string][]int // base name of the backing file → device numbers
}

// ReadIndex reads every attached device's backing file once (see Index).
func ReadIndex() (*Index, error) { return readIndex(sysBlock) }

func readIndex(dir string) (*Index, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("loop: list %s: %w", dir, err)
	}
	s := &Index{dir: dir, byBase: make(map[string][]int)}
	for _, e := range entries {
		n, ok := parseName(e.Name())
		if !ok {
			continue
		}
		raw, err := readAttr(filepath.Join(dir, e.Name()), "loop/backing_file")
		if gone(err) {
			continue // not attached, or removed while we read
		}
		if err != nil {
			return nil, err
		}
		backing, _ := parseBackingFile(raw)
		base := filepath.Base(backing)
		s.byBase[base] = append(s.byBase[base], n)
	}
	return s, nil
}

// Find returns the devices backed by path, as Find does, among the devices
// the pass saw. Every device Find would match has the base name of path or
// of path with symlinks resolved: a path match is equality, and a device
// attached from another mount namespace reports a suffix of path (see
// mountRelative). Only those candidates are read again, whole.
func (s *Index) Find(path string) ([]Device, error) {
	keep := matcher(path)
	var nums []int
	for _, p := range matchPaths(path) {
		for _, n := range s.byBase[filepath.Base(p)] {
			if !slices.Contains(nums, n) {
				nums = append(nums, n)
			}
		}
	}
	slices.Sort(nums)
	var devs []Device
	for _, n := range nums {
		d, attached, err := readDevice(s.dir, n, keep)
		if err != nil {
			return nil, err
		}
		if attached {
			devs = append(devs, d)
		}
	}
	return devs, nil
}

// Len is the number of attached devices the pass saw.
func (s *Index) Len() int {
	n := 0
	for _, nums := range s.byBase {
		n += len(nums)
	}
	return n
}
