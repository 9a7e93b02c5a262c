package options

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Quantity is a byte count given with an optional binary suffix
// (Ki, Mi, Gi, Ti) or decimal suffix (k, M, G, T), like Kubernetes quantities.
type Quantity int64

var suffixes = []struct {
	s string
	m int64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
}

// ParseQuantity parses "1Gi", "500M" or "1048576".
func ParseQuantity(s string) (Quantity, error) {
	num, mult := s, int64(1)
	for _, sf := range suffixes {
		if strings.HasSuffix(s, sf.s) {
			num, mult = strings.TrimSuffix(s, sf.s), sf.m
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (examples: 1Gi, 500Mi, 1048576)", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return Quantity(n * mult), nil
}

// String implements flag.Value.
func (q *Quantity) String() string { return strconv.FormatInt(int64(*q), 10) }

// Set implements flag.Value.
func (q *Quantity) Set(s string) error {
	v, err := ParseQuantity(s)
	if err != nil {
		return err
	}
	*q = v
	return nil
}
