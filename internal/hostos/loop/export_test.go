package loop

// Internal functions exported for the external test package (loop_test),
// which is external so that it can use internal/testutil (which imports
// this package).

var ParseBackingFile = parseBackingFile

// Scan lists the attached loop devices of a sysfs-like tree at dir.
func Scan(dir string) ([]Device, error) { return scan(dir, nil) }

// ReadIndexAt is ReadIndex on a sysfs-like tree at dir.
func ReadIndexAt(dir string) (*Index, error) { return readIndex(dir) }
