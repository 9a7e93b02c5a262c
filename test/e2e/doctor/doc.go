// Package doctor proves `kubectl filevol doctor` on a real cluster: each
// test builds a situation users get stuck in — a PV held in
// Terminating by a VolumeAttachment, a claim Pending because the node's
// pool cannot hold it, a pod stuck in ContainerCreating because its
// volume's image file was removed — and asserts that doctor names the
// cause. The tests build with the e2e tag only:
//
//	FILEVOL_E2E_KUBECONFIG=/var/lib/filevol-e2e/admin.kubeconfig \
//	FILEVOL_E2E_POOL=<the driver's --pool-dir> \
//	go test -tags e2e -count=1 -v ./test/e2e/doctor/
//
// Environment:
//
//	FILEVOL_E2E_KUBECONFIG  admin kubeconfig (KUBECONFIG when unset; required)
//	FILEVOL_E2E_POOL        the driver's --pool-dir (the missing-image test
//	                        removes a file there; it is skipped when unset)
//	FILEVOL_E2E_DRIVER_URL  the driver's --http-endpoint as a URL
//	                        (default http://127.0.0.1:9808: a host-run driver)
//	FILEVOL_E2E_IMAGE       a busybox image the node has
//
// They run the plugin in-process through kubectlplugin.Main, exactly as
// `kubectl filevol doctor --kubeconfig ... --driver-url ...` would.
package doctor
