// Package e2epoll is the wait of the e2e test packages (stories, multinode):
// one poll loop that keeps the last error f gave, so a timeout says why the
// condition never held, not only that it did not.
package e2epoll

import (
	"context"
	"fmt"
	"time"
)

// Until calls f every interval until it reports done or ctx ends. An error
// from f does not stop the wait (the API server may answer again); the last
// one is part of the error when ctx ends first.
func Until(ctx context.Context, interval time.Duration, f func() (bool, error)) error {
	var last error
	for {
		done, err := f()
		if done {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
