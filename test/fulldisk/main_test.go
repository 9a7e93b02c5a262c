package fulldisk

import (
	"flag"
	"io"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

var driverLog = flag.Bool("driver-log", false, "show the in-process driver's log (klog) on stderr")

// TestMain keeps the in-process driver's log out of the test output
// unless -driver-log asks for it.
func TestMain(m *testing.M) {
	flag.Parse()
	if !*driverLog {
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("logtostderr", "false")
		_ = fs.Set("stderrthreshold", "FATAL")
		klog.SetOutput(io.Discard)
	}
	os.Exit(m.Run())
}
