package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// summary describes a set of latency samples.
type summary struct {
	n                       int
	min, p50, p90, p99, max time.Duration
	mean                    time.Duration
}

func summarize(s []time.Duration) summary {
	if len(s) == 0 {
		return summary{}
	}
	s = slices.Clone(s)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return summary{
		n: len(s), min: s[0], max: s[len(s)-1], mean: sum / time.Duration(len(s)),
		p50: rank(s, 50), p90: rank(s, 90), p99: rank(s, 99),
	}
}

// rank is the nearest-rank percentile of sorted samples: a real sample,
// never an interpolation, so p99 of 30 samples is honestly the maximum.
func rank(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func (s summary) String() string {
	return fmt.Sprintf("p50 %s · p90 %s · p99 %s · max %s (n=%d)", ms(s.p50), ms(s.p90), ms(s.p99), ms(s.max), s.n)
}

// ms formats a duration in milliseconds with enough digits for sub-ms figures.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v < 10:
		return fmt.Sprintf("%.3f ms", v)
	case v < 1000:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.2f s", v/1000)
}

// rate is operations per second over a wall-clock interval.
func rate(n int, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return float64(n) / wall.Seconds()
}
