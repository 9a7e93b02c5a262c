package fs

import "testing"

func TestGrowTarget(t *testing.T) {
	tests := []struct {
		fs                   string
		cur, size, lim, want int64
	}{
		{"btrfs", 128 << 20, 200 << 20, 0, 256 << 20},         // btrfs cannot grow to less
		{"btrfs", 128 << 20, 200 << 20, 220 << 20, 200 << 20}, // the limit wins; the node leaves the fs
		{"btrfs", 128 << 20, 128 << 20, 0, 128 << 20},         // no growth, no rounding
		{"btrfs", 300 << 20, 400 << 20, 0, 400 << 20},
		{"xfs", 300 << 20, 301 << 20, 0, 301 << 20},
		{"ext4", 1 << 20, 2 << 20, 0, 2 << 20},
	}
	for _, tt := range tests {
		if got := GrowTarget(tt.fs, tt.cur, tt.size, tt.lim); got != tt.want {
			t.Errorf("GrowTarget(%s, %d, %d, %d) = %d, want %d", tt.fs, tt.cur, tt.size, tt.lim, got, tt.want)
		}
	}
}
