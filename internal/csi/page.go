package csi

import (
	"sort"

	"github.com/filevol/filevol/internal/volume"
)

// pageRequest is what a List call asks: where to start and how many.
type pageRequest struct {
	token string
	max   int32
	// validToken says whether the token can be an ID of the listing; a
	// token filevol did not issue is ABORTED (spec: the CO restarts).
	validToken func(string) error
}

// paginate cuts items, sorted by id, into the page req asks for: the
// items after the token that keep accepts (nil: all), at most req.max
// (0: no limit), and the token of the next page ("" on the last). The
// token is the last ID of the previous page, not an offset, so items
// deleted between two pages never shift the listing. keep runs only on
// the items it needs to look at.
func paginate[T any](req pageRequest, items []T, id func(T) string, keep func(T) bool) ([]T, string, error) {
	if req.max < 0 {
		return nil, "", invalidArgument("max_entries %d must not be negative", req.max)
	}
	if req.token != "" && req.validToken(req.token) != nil {
		return nil, "", aborted("starting_token %q was not issued by filevol; restart the listing without a token", truncate(req.token))
	}
	start := 0
	if req.token != "" {
		start = sort.Search(len(items), func(i int) bool { return id(items[i]) > req.token })
	}
	var out []T
	for _, it := range items[start:] {
		if keep != nil && !keep(it) {
			continue
		}
		if req.max > 0 && len(out) == int(req.max) {
			return out, id(out[len(out)-1]), nil
		}
		out = append(out, it)
	}
	return out, "", nil
}

// volumePage is the page request of a listing of volumes.
func volumePage(token string, max int32) pageRequest {
	return pageRequest{token: token, max: max, validToken: validVolumeID}
}

func volumeID(v volume.Volume) string { return v.ID }
