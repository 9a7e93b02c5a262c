// Package stories holds filevol's own end-to-end tests: user stories played
// against a real single-node Kubernetes with filevol and its sidecars
// deployed (test/e2e/run.sh sets that up). The tests build with the e2e tag
// only (`go test -tags e2e ./test/e2e/stories/`) and talk to the cluster
// through client-go; they need root on the node for the pool checks.
//
// Environment (run.sh sets all of it):
//
//	FILEVOL_E2E_KUBECONFIG  admin kubeconfig of the e2e cluster (required)
//	FILEVOL_E2E_POOL        the driver's --pool-dir
//	FILEVOL_E2E_ENDPOINT    the driver's CSI endpoint (capability probe)
//	FILEVOL_E2E_RESTART     command that restarts the driver (SIGTERM, start)
//	FILEVOL_E2E_SHARED_POOL the shared-pool driver's pool directory (its stories skip without it)
//	FILEVOL_E2E_STOP_NODE, FILEVOL_E2E_START_NODE
//	                        commands that stop and start the node's filevol node plugins
//	FILEVOL_E2E_KUBECTL_FILEVOL  the kubectl plugin (bin/kubectl-filevol)
//
// It imports nothing of the driver: like kubelet and the sidecars, it only
// sees what the driver does through Kubernetes and the pool directory.
package stories
