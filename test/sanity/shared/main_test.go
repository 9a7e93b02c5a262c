package shared

import (
	"os"
	"testing"

	"github.com/filevol/filevol/test/proc"
)

// TestMain removes the driver binary the tests built (proc.BuildDriver).
func TestMain(m *testing.M) { os.Exit(proc.Cleanup(m.Run())) }
