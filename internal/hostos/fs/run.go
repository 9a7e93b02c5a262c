package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// stderrHead and stderrTail are how much of a failed program's stderr
	// an ExitError keeps, from its start and from its end: the first
	// complaint (mkfs.xfs says what is wrong, then prints its whole usage
	// text) and the last (resize2fs), small enough for a gRPC status
	// message and a Kubernetes event.
	stderrHead = 256
	stderrTail = 512
	// waitDelay bounds how long Wait waits for the output pipes after the
	// program was killed (a child it left behind may still hold them).
	waitDelay = 2 * time.Second
)

// sbinDirs are searched after the driver's own PATH: container images and
// systemd units often leave the sbin directories, where mkfs, blkid and
// resize2fs live, out of PATH.
var sbinDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"}

// searchPath is the process's PATH followed by the sbin directories not
// already in it; only absolute entries are kept, so a relative PATH entry
// can never pick a program from the working directory.
func searchPath() []string {
	var dirs []string
	seen := map[string]bool{}
	for _, d := range append(filepath.SplitList(os.Getenv("PATH")), sbinDirs...) {
		if filepath.IsAbs(d) && !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// lookPath finds program in dirs (exec.LookPath would only look in the
// process's PATH, not in the PATH given to the child).
func lookPath(program string, dirs []string) (string, error) {
	if strings.Contains(program, "/") {
		return program, nil
	}
	for _, d := range dirs {
		p := filepath.Join(d, program)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s (searched %s): %w", ErrToolMissing, program,
		strings.Join(dirs, ":"), exec.ErrNotFound)
}

func run(ctx context.Context, program string, args ...string) ([]byte, error) {
	dirs := searchPath()
	path, err := lookPath(program, dirs)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Args[0] = program // as given: it is what the program prints in its messages
	cmd.Env = []string{"LC_ALL=C", "PATH=" + strings.Join(dirs, ":")}
	var stdout bytes.Buffer
	stderr := &headTailBuffer{head: stderrHead, max: stderrTail}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	// Its own process group, so that a cancel kills whatever the program
	// started too, and nothing survives the request that ran it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		if errors.Is(err, unix.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	cmd.WaitDelay = waitDelay

	err = cmd.Run()
	if ctxErr := ctx.Err(); ctxErr != nil && err != nil {
		// Wrap the context's error, so the caller can tell a kubelet
		// timeout (DEADLINE_EXCEEDED) from a failing program.
		return stdout.Bytes(), fmt.Errorf("%s interrupted: %w", program, ctxErr)
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return stdout.Bytes(), nil
	case errors.As(err, &exitErr):
		return stdout.Bytes(), &ExitError{
			Program: program,
			Args:    append([]string(nil), args...),
			Code:    exitErr.ExitCode(),
			Stderr:  stderr.String(),
		}
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%w: %s: %w", ErrToolMissing, program, err)
	default:
		return stdout.Bytes(), fmt.Errorf("run %s: %w", program, err)
	}
}

func exitErrorString(e *ExitError) string {
	var b strings.Builder
	b.WriteString(e.Program)
	for _, a := range e.Args {
		b.WriteByte(' ')
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\") {
			a = strconv.Quote(a)
		}
		b.WriteString(a)
	}
	if e.Code < 0 {
		b.WriteString(": killed by a signal")
	} else {
		fmt.Fprintf(&b, ": exit status %d", e.Code)
	}
	// One line, valid UTF-8: the message becomes a gRPC status message
	// (which must be UTF-8) and a Kubernetes event.
	msg := strings.Join(strings.Fields(strings.ToValidUTF8(e.Stderr, "?")), " ")
	if msg != "" {
		b.WriteString(": ")
		b.WriteString(msg)
	}
	return b.String()
}

// headTailBuffer keeps the first head bytes written to it, and the last
// max bytes of what came after.
type headTailBuffer struct {
	head      int
	first     []byte
	max       int
	buf       []byte
	truncated bool
}

func (t *headTailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := t.head - len(t.first); room > 0 {
		k := min(room, len(p))
		t.first = append(t.first, p[:k]...)
		p = p[k:]
	}
	if len(p) > t.max {
		p = p[len(p)-t.max:]
		t.truncated = true
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.truncated = true
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

func (t *headTailBuffer) String() string {
	if t.truncated {
		return string(t.first) + " [...] " + string(t.buf)
	}
	return string(t.first) + string(t.buf)
}
