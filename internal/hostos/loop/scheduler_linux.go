package loop

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// setScheduler selects the I/O scheduler of loop device n's queue
// (Options.Scheduler) unless it is already selected: a switch freezes the
// queue, and a device number's queue keeps whatever the last user of that
// number chose, across detach and attach (the kernel resets read-ahead at
// LOOP_CONFIGURE, not the scheduler).
func setScheduler(dir string, n int, name string) error {
	path := filepath.Join(dir, "loop"+strconv.Itoa(n), "queue", "scheduler")
	raw, err := readAttr(filepath.Dir(path), "scheduler")
	if err != nil {
		return err
	}
	if selectedScheduler(raw) == name {
		return nil
	}
	if err := os.WriteFile(path, []byte(name), 0); err != nil {
		return fmt.Errorf("loop: select scheduler %s: %w", name, err)
	}
	return nil
}

// selectedScheduler returns the bracketed name of queue/scheduler's
// "[none] mq-deadline kyber bfq".
func selectedScheduler(raw string) string {
	for _, f := range strings.Fields(raw) {
		if strings.HasPrefix(f, "[") && strings.HasSuffix(f, "]") {
			return f[1 : len(f)-1]
		}
	}
	return ""
}

func scheduler(d Device) (string, error) {
	raw, err := readAttr(filepath.Join(sysBlock, "loop"+strconv.Itoa(d.Number), "queue"), "scheduler")
	if err != nil {
		return "", err
	}
	return selectedScheduler(raw), nil
}
