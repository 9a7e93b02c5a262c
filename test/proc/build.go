package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// binRoot holds one directory per test process that built the driver,
// named by its PID: a process killed before it removed its own leaves it,
// and the next build removes those whose process is gone.
const binRoot = "/tmp/filevol-test/.bin"

// built is this test process's one driver binary.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// BuildDriver builds cmd/filevol once per test process (a link takes
// seconds; a package's tests start dozens of processes) and returns its
// path. The package's TestMain calls Cleanup when its tests are done.
func BuildDriver(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		sweepBins()
		built.dir = filepath.Join(binRoot, strconv.Itoa(os.Getpid()))
		if built.err = os.MkdirAll(built.dir, 0o700); built.err != nil {
			return
		}
		bin := filepath.Join(built.dir, "filevol")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/filevol/filevol/cmd/filevol").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build cmd/filevol: %v\n%s", err, out)
			return
		}
		built.bin = bin
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// Cleanup removes the binary BuildDriver built, if any, and passes on the
// exit code of the package's tests: os.Exit(proc.Cleanup(m.Run())).
func Cleanup(code int) int {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	return code
}

// sweepBins removes the binaries of test processes that are gone.
func sweepBins() {
	entries, _ := os.ReadDir(binRoot)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(filepath.Join(binRoot, e.Name()))
		}
	}
}
