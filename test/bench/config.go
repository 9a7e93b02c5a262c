package main

import "time"

// config is what the flags of main set.
type config struct {
	bin, out            string
	iterations          int // serial CreateVolume samples
	clients, concurrent int // throughput: clients and total creates
	lifecycle           int // create→stage→publish iterations
	volumes             int // volumes in the pool for memory and ListVolumes
	listIterations      int
	verbosity           int
	cpuProfile          string
	keep                bool
	settle              time.Duration // wait after the last run's cleanup (settle.go)
	poolFS              string        // host, ext4, xfs or tmpfs
	driverEnv           []string      // extra K=V for the driver (GOMAXPROCS, GOGC, GODEBUG experiments)
	only                string        // one part only: "", "control", "datapath", "reference" or "scale"
	fioRounds           int           // data path: interleaved rounds (0: skip)
	fioSize             int64         // data path: bytes per target
	fioRuntime          time.Duration // data path: measured time per fio job
	fioAB               string        // data path: "" or a loop device setting to A/B (datapath_ab.go)
	referenceBin        string        // csi-driver-host-path's hostpathplugin, to compare CreateVolume with
	refRounds, refBlock int           // reference comparison: rounds, creates per driver per round
	scaleVolumes        int           // scale: volumes created, staged and published
	treeFiles           int           // tree delete: files in the directory volume deleted
	treeWidth           int           // tree delete: files per directory
	treeFS              string        // tree delete: directory pool filesystems, comma-separated
	cbtGiB, cbtRefGiB   int           // changed-block tracking: filevol's volume, the reference's (0: the same)
	cbtRounds           int           // changed-block tracking: rounds of both calls per driver
	cbtFS, cbtChanges   string        // changed-block tracking: pool filesystems; shares changed, in %, comma-separated
	cbtSame             float64       // changed-block tracking: share of the changed blocks rewritten with their own bytes
	sharedLifecycle     int           // sharedfs: volumes created, attached, staged and deleted per pool and round
}
