package pool

import (
	"fmt"
	"testing"
	"time"
)

func TestIndex(t *testing.T) {
	x := newIndex()
	now := time.Now().UTC()
	for _, i := range []int{3, 1, 2} {
		x.put(Volume{ID: fmt.Sprintf("fv-%d", i), CapacityBytes: int64(i), CreatedAt: now,
			Parameters: map[string]string{"k": "v"}})
	}
	first := x.list()
	if len(first) != 3 || first[0].ID != "fv-1" || first[2].ID != "fv-3" || x.provisionedBytes() != 6 {
		t.Fatalf("list = %+v, provisioned %d", first, x.provisionedBytes())
	}
	first[0].Parameters["k"] = "changed"
	if x.list()[0].Parameters["k"] != "v" {
		t.Error("a caller changed the index through List's result")
	}

	// An unchanged put (Get of an unchanged record) keeps the sorted cache.
	x.put(Volume{ID: "fv-2", CapacityBytes: 2, CreatedAt: now, Parameters: map[string]string{"k": "v"}})
	if x.sorted == nil {
		t.Error("an unchanged put dropped the sorted cache")
	}
	x.put(Volume{ID: "fv-2", CapacityBytes: 20, CreatedAt: now})
	if got := x.list()[1]; got.CapacityBytes != 20 || x.provisionedBytes() != 24 {
		t.Errorf("after replace: %+v, provisioned %d", got, x.provisionedBytes())
	}
	x.remove("fv-2")
	x.remove("fv-unknown")
	if got := x.list(); len(got) != 2 || x.provisionedBytes() != 4 {
		t.Errorf("after remove: %+v, provisioned %d", got, x.provisionedBytes())
	}
}
