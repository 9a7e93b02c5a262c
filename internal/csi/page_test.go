package csi

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

func TestPaginate(t *testing.T) {
	var vols []volume.Volume
	for i := range 5 {
		vols = append(vols, volume.Volume{ID: volid.NewVolume(volid.KindImage, "3f9a0c2e", fmt.Sprint(i))})
	}
	slices.SortFunc(vols, func(a, b volume.Volume) int { return strings.Compare(a.ID, b.ID) })
	ids := func(vs []volume.Volume) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.ID)
		}
		return out
	}
	// Walk every page of two, with every other volume filtered out.
	even := func(v volume.Volume) bool { return slices.Index(ids(vols), v.ID)%2 == 0 }
	var got []string
	token := ""
	for range 10 {
		page, next, err := paginate(volumePage(token, 2), vols, volumeID, even)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(page)...)
		if next == "" {
			break
		}
		token = next
	}
	if want := []string{vols[0].ID, vols[2].ID, vols[4].ID}; !slices.Equal(got, want) {
		t.Errorf("pages = %v, want %v", got, want)
	}
	// A token whose volume was deleted meanwhile still works.
	page, next, err := paginate(volumePage(vols[1].ID, 0), slices.Delete(slices.Clone(vols), 1, 2), volumeID, nil)
	if err != nil || next != "" || !slices.Equal(ids(page), ids(vols[2:])) {
		t.Errorf("after a deleted token: %v %q %v", ids(page), next, err)
	}
	if _, _, err := paginate(volumePage("", -1), vols, volumeID, nil); codeOf(err) != codes.InvalidArgument {
		t.Errorf("negative max: %v", err)
	}
	if _, _, err := paginate(volumePage("not-ours", 0), vols, volumeID, nil); codeOf(err) != codes.Aborted {
		t.Errorf("foreign token: %v", err)
	}
}
