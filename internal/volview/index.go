package volview

import (
	"path/filepath"
	"slices"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// TableIndex is a mount table indexed by what Mounts and Binds compare, so
// that the uses of one device are found without walking the whole table:
// on a node with 1,000 volumes the table has 2,000 mounts, and asking it
// once per device made every answer that covers all volumes (the node view,
// the metrics, the garbage collector's sweep) cost the square.
//
// It answers from the table it was given and is exactly as fresh as that
// table; each caller says why its table is fresh enough.
type TableIndex struct {
	table    mount.Table
	byNum    map[[2]uint32][]int // major:minor → positions in table
	bySource map[string][]int    // mount source → positions
	byBind   map[string][]int    // root of a device bind ("/loop3") → positions
}

// IndexTable indexes t.
func IndexTable(t mount.Table) *TableIndex {
	x := &TableIndex{table: t, byNum: map[[2]uint32][]int{}, bySource: map[string][]int{}, byBind: map[string][]int{}}
	for i, m := range t {
		x.byNum[[2]uint32{m.Major, m.Minor}] = append(x.byNum[[2]uint32{m.Major, m.Minor}], i)
		x.bySource[m.Source] = append(x.bySource[m.Source], i)
		if IsDeviceBind(m) {
			x.byBind[m.Root] = append(x.byBind[m.Root], i)
		}
	}
	return x
}

// Table is the indexed table.
func (x *TableIndex) Table() mount.Table { return x.table }

// uses returns, in table order, the mounts of d's filesystem and the binds
// of its node: the mounts for which Mounts or Binds holds. The index only
// narrows down the candidates; the same predicates decide.
func (x *TableIndex) uses(d loop.Device) []mount.Info {
	var pos []int
	for _, list := range [][]int{x.byNum[[2]uint32{d.Major, d.Minor}], x.bySource[d.Path], x.byBind["/"+filepath.Base(d.Path)]} {
		for _, i := range list {
			if !slices.Contains(pos, i) && (Mounts(x.table[i], d) || Binds(x.table[i], d)) {
				pos = append(pos, i)
			}
		}
	}
	slices.Sort(pos)
	out := make([]mount.Info, len(pos))
	for k, i := range pos {
		out[k] = x.table[i]
	}
	return out
}

// Used is Used(table, d) on the indexed table.
func (x *TableIndex) Used(d loop.Device) bool { return len(x.uses(d)) > 0 }

// Of is Of(devs, table) on the indexed table.
func (x *TableIndex) Of(devs []loop.Device) Usage {
	u := Usage{Devices: devs}
	for _, d := range devs {
		for _, m := range x.uses(d) {
			u.Uses = append(u.Uses, Use{Info: m, Device: d, Bind: IsDeviceBind(m)})
		}
	}
	return u
}
