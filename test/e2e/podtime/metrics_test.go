//go:build e2e

package podtime

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// callTimes is filevol_csi_call_duration_seconds' sum and count by method,
// as one scrape of the driver's /metrics shows them.
type callTimes map[string]struct{ Sum, Count float64 }

// The calls on the path from a claim to a running pod.
var pathCalls = []string{"CreateVolume", "NodeStageVolume", "NodePublishVolume"}

func scrape(ctx context.Context, base string) (callTimes, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", base, resp.Status)
	}
	out := callTimes{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || !strings.HasPrefix(name, "filevol_csi_call_duration_seconds_") {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		method := label(labels, "method")
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || method == "" {
			continue
		}
		e := out[method]
		switch name {
		case "filevol_csi_call_duration_seconds_sum":
			e.Sum = v
		case "filevol_csi_call_duration_seconds_count":
			e.Count = v
		default:
			continue
		}
		out[method] = e
	}
	return out, sc.Err()
}

// label returns the value of key in `a="x",b="y"`.
func label(labels, key string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == key {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// perCall is the mean time of each path call between two scrapes, and how
// many calls there were.
type perCall map[string]struct {
	Mean  float64 // seconds
	Calls float64
}

func delta(before, after callTimes) perCall {
	out := perCall{}
	for _, m := range pathCalls {
		n := after[m].Count - before[m].Count
		if n <= 0 {
			continue
		}
		out[m] = struct{ Mean, Calls float64 }{(after[m].Sum - before[m].Sum) / n, n}
	}
	return out
}
