// Package podtime measures what a user of a storage driver waits for: the
// time from a claim's creation to its pod Running, on the real e2e cluster,
// for filevol and, in the same run, for rancher/local-path-provisioner
// (test/e2e/localpath installs it). It builds with the e2e tag only
// (`go test -tags e2e ./test/e2e/podtime/`); test/e2e/run.sh runs it
// (E2E_PODTIME=1) and it writes its report to FILEVOL_E2E_PODTIME_OUT.
//
// Each sample is one claim and one pod that mounts it, created together as
// a user applies them. The test watches both and notes, at the moment it
// sees each, when the scheduler picked the node (the claim's selected-node
// annotation), when the claim was bound (provisioned), when the pod was
// bound to the node and when it ran. Object timestamps have a resolution of
// one second, too coarse for this: the watch has the test's clock. filevol's
// own share comes from its /metrics (the CSI call latencies), local-path's
// from its helper pods, watched the same way.
//
// Environment:
//
//	FILEVOL_E2E_KUBECONFIG    admin kubeconfig of the e2e cluster (required)
//	FILEVOL_E2E_IMAGE         the pods' image (the cluster's busybox)
//	FILEVOL_E2E_DRIVER_URL    filevol's node plugin HTTP endpoint (/metrics)
//	FILEVOL_E2E_PODTIME_OUT   directory for podtime.md and podtime.json
//	FILEVOL_E2E_PODTIME_ROUNDS  one-at-a-time rounds per class (default 10)
//	FILEVOL_E2E_PODTIME_BURST   claims and pods at once per class (default 50)
//	FILEVOL_E2E_PODTIME_CLASSES the StorageClasses (default filevol,local-path)
package podtime
