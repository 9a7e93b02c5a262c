package aiofsync

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// newSyncer is New, skipping where this kernel or sandbox refuses AIO (the
// fallback is what runs there, and TestNilSyncerFsyncsHere covers it).
// Every fsync goes through AIO, even one that nothing overlaps, unless
// the test restores aloneDirect.
func newSyncer(t *testing.T) *Syncer {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Skipf("AIO not available here: %v", err)
	}
	s.aloneDirect = false
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func openFile(t *testing.T, dir, name string) int {
	t.Helper()
	fd, err := unix.Open(filepath.Join(dir, name), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.Write(fd, []byte("data")); err != nil {
		t.Fatal(err)
	}
	return fd
}

func TestFsyncGoesThroughAIO(t *testing.T) {
	s := newSyncer(t)
	dir := t.TempDir()
	fd := openFile(t, dir, "f")
	if err := s.Fsync(fd); err != nil {
		t.Fatalf("Fsync of a regular file: %v", err)
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	if err := s.Fsync(dfd); err != nil {
		t.Fatalf("Fsync of a directory: %v", err)
	}
	if got, want := s.submitted.Load(), uint64(2); got != want {
		t.Errorf("%d fsyncs submitted through AIO, want %d (%d done on the calling thread)", got, want, s.direct.Load())
	}
}

// A lone fsync is made on the calling thread; overlapping ones go through
// AIO.
func TestLoneFsyncIsMadeHere(t *testing.T) {
	s := newSyncer(t)
	s.aloneDirect = true
	dir := t.TempDir()
	fd := openFile(t, dir, "f")
	for range 3 {
		if err := s.Fsync(fd); err != nil {
			t.Fatal(err)
		}
	}
	if s.direct.Load() != 3 || s.submitted.Load() != 0 {
		t.Errorf("3 lone fsyncs: %d on the calling thread, %d through AIO; want 3 and 0", s.direct.Load(), s.submitted.Load())
	}
	// One call under way (as if another create were in its fsync): the
	// next goes through AIO.
	s.inFlight.Add(1)
	err := s.Fsync(fd)
	s.inFlight.Add(-1)
	if err != nil {
		t.Fatal(err)
	}
	if s.submitted.Load() != 1 {
		t.Errorf("an overlapping fsync: %d through AIO, want 1", s.submitted.Load())
	}
	if n := s.inFlight.Load(); n != 0 {
		t.Errorf("%d calls counted in flight after all returned", n)
	}
}

// Errors are fsync(2)'s, whichever way the call went.
func TestFsyncErrorsAreFsyncs(t *testing.T) {
	s := newSyncer(t)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	closed := openFile(t, t.TempDir(), "closed")
	unix.Close(closed)
	for _, tc := range []struct {
		name string
		fd   int
		want error
	}{
		{"pipe (no fsync)", p[1], unix.EINVAL},
		{"closed descriptor", closed, unix.EBADF},
		{"negative descriptor", -1, unix.EBADF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Fsync(tc.fd); !errors.Is(err, tc.want) {
				t.Errorf("Fsync = %v, want %v (what fsync(2) returns)", err, tc.want)
			}
		})
	}
}

func TestResult(t *testing.T) {
	for _, tc := range []struct {
		res  int64
		want error
	}{
		{0, nil},
		{-int64(unix.EIO), unix.EIO},
		{-int64(unix.ENOSPC), unix.ENOSPC},
	} {
		if got := result(tc.res); !errors.Is(got, tc.want) || (tc.want == nil && got != nil) {
			t.Errorf("result(%d) = %v, want %v", tc.res, got, tc.want)
		}
	}
}

// More callers than the context holds: the surplus fsyncs on its own
// thread, and every caller gets its own answer.
func TestManyConcurrentFsyncs(t *testing.T) {
	s := newSyncer(t)
	dir := t.TempDir()
	const n = 4 * depth
	fds := make([]int, n)
	for i := range fds {
		fds[i] = openFile(t, dir, "f"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range fds {
		wg.Go(func() { errs[i] = s.Fsync(fds[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Fsync %d: %v", i, err)
		}
	}
	if got := s.submitted.Load() + s.direct.Load(); got != n {
		t.Errorf("%d fsyncs counted, want %d", got, n)
	}
	if s.submitted.Load() == 0 {
		t.Error("no fsync went through AIO")
	}
	s.mu.Lock()
	left := len(s.waiting)
	s.mu.Unlock()
	if left != 0 {
		t.Errorf("%d requests still waiting after every Fsync returned", left)
	}
}

func TestNilSyncerFsyncsHere(t *testing.T) {
	var s *Syncer
	fd := openFile(t, t.TempDir(), "f")
	if err := s.Fsync(fd); err != nil {
		t.Fatalf("nil Syncer Fsync: %v", err)
	}
	if err := s.Fsync(-1); !errors.Is(err, unix.EBADF) {
		t.Errorf("nil Syncer Fsync(-1) = %v, want EBADF", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("nil Syncer Close: %v", err)
	}
}

// The process-wide Fsync works whether or not AIO is available.
func TestProcessFsync(t *testing.T) {
	fd := openFile(t, t.TempDir(), "f")
	if err := Fsync(fd); err != nil {
		t.Fatal(err)
	}
}

func TestCloseReleasesTheReaper(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Skipf("AIO not available here: %v", err)
	}
	fd := openFile(t, t.TempDir(), "f")
	if err := s.Fsync(fd); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-s.reaped:
	default:
		t.Fatal("Close returned with the reaper still running")
	}
	if _, err := unix.FcntlInt(uintptr(s.efd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Errorf("eventfd %d still open after Close (F_GETFD: %v)", s.efd, err)
	}
}
