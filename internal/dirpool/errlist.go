package dirpool

import (
	"errors"
	"fmt"
)

// maxKeptErrors bounds the errors a walk over a volume's tree keeps; the
// rest are counted. A pod's tree can hold a million entries that all fail
// the same way, and a million errors in memory is what batching the walk
// avoids.
const maxKeptErrors = 8

// errList keeps a walk's first maxKeptErrors errors and counts the rest.
type errList struct {
	errs []error
	more int
}

func (l *errList) add(err error) {
	switch {
	case err == nil:
	case len(l.errs) < maxKeptErrors:
		l.errs = append(l.errs, err)
	default:
		l.more++
	}
}

// err joins what was kept, saying how many more there were in what.
func (l *errList) err(what string) error {
	errs := l.errs
	if l.more > 0 {
		errs = append(errs, fmt.Errorf("and %d more errors in %s", l.more, what))
	}
	return errors.Join(errs...)
}
