package fs

// GrowTarget rounds a growth from cur to size bytes up to what a
// filesystem of fsType can grow to (MinGrowSize), when limit allows (0:
// no limit): the CO gets a filesystem that really has the size it asked
// for.
func GrowTarget(fsType string, cur, size, limit int64) int64 {
	if m := MinGrowSize[fsType]; size > cur && size < m && (limit == 0 || m <= limit) {
		return m
	}
	return size
}
