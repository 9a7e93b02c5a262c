# filevol — a CSI driver whose volumes are sparse files on loop devices.
# `make help` lists the targets.

SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
LDFLAGS := -X github.com/filevol/filevol/internal/version.Version=$(VERSION)
BIN := bin/filevol
RUN_DIR := $(CURDIR)/_output/run
TEST_TIMEOUT ?= 20m
# The platforms of the published driver image (make image, make push, the release
# workflow .github/workflows/release.yaml: one list, here).
PLATFORMS ?= linux/amd64 linux/arm64
APP_VERSION := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' charts/filevol/Chart.yaml)
# make push: REGISTRY is a repository (host[:port]/path: the chart's image.filevol.repository);
# TAG defaults to the chart's default tag, so that repository alone is the one value to set.
REGISTRY ?=
TAG ?= v$(APP_VERSION)
MULTIARCH_TAR := _output/images/filevol-multiarch.tar

.PHONY: bench-sharedfs e2e-podtime image push build-arch print-version print-app-version print-platforms chart-package scale bench-tree-delete bench-cbt e2e e2e-multinode e2e-multinode-killed bench-snapshot bench-guard chart-test deploy images chart-e2e help build run test unit sanity vet deps bench fuzz faults ceph-long stress fulldisk clean e2e-doctor velero-test

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ build and run
build: ## build bin/filevol and bin/kubectl-filevol (the `kubectl filevol` plugin)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/filevol
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/kubectl-filevol ./cmd/kubectl-filevol

build-arch: ## bin/filevol-linux-$(ARCH) (ARCH=amd64|arm64): filevol for an image of that platform (CGO_ENABLED=0, static; no DWARF); make image runs it
	@test -n "$(ARCH)" || { echo "make build-arch ARCH=amd64|arm64"; exit 1; }
	CGO_ENABLED=0 GOOS=linux GOARCH=$(ARCH) $(GO) build -ldflags "-w $(LDFLAGS)" -o bin/filevol-linux-$(ARCH) ./cmd/filevol

print-version:
	@echo $(VERSION)

print-app-version:
	@echo $(APP_VERSION)

print-platforms:
	@echo $(PLATFORMS)

run: build ## run the driver on an embedded pool in _output/run (Ctrl-C stops it)
	@mkdir -p $(RUN_DIR)
	@echo "filevol: pool $(RUN_DIR)/pool, socket $(RUN_DIR)/csi.sock, health http://127.0.0.1:9808/healthz"
	@echo "try it:  export FILEVOL_ENDPOINT=unix://$(RUN_DIR)/csi.sock"
	@echo "         $(BIN) ctl create demo --size 1Gi && $(BIN) ctl list"
	@echo "         staging and target paths must be under $(RUN_DIR)/kubelet (--kubelet-dir)"
	@echo "         (README.md walks through stage, publish, write, unpublish, unstage, delete)"
	$(BIN) --endpoint unix://$(RUN_DIR)/csi.sock --pool-dir $(RUN_DIR)/pool \
		--kubelet-dir $(RUN_DIR)/kubelet --http-endpoint 127.0.0.1:9808 --v 2

##@ test
deps: ## install the host programs the driver and tests need (root, Debian)
	./hack/install-deps.sh

test: deps vet chart-test velero-test ## everything, as root: vet, chart tests, unit tests, and on real loop devices and mounts csi-sanity (in one process, and split into controller and node processes), lifecycle, fault, full-disk and stress tests (-race)
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

velero-test: ## the e2e harness's S3 store and plugin copier (test/e2e/cluster/velero, a module of its own): vet and tests, on 127.0.0.1
	cd test/e2e/cluster/velero && $(GO) vet ./cmd/... && $(GO) test -race -count=1 ./cmd/...

unit: ## unit tests of internal/ (no root: the tests that need loop devices or mounts skip; the node service's tests run on hostos/fake)
	$(GO) test -count=1 ./internal/...

sanity: deps ## csi-sanity only (ext4, xfs, block, dir: directory volumes on a btrfs pool)
	$(GO) test -count=1 -v ./test/sanity/... 2>&1 | grep -E '^(---|ok|FAIL)|Passed|Failed'

vet: ## go vet and gofmt check
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

e2e: build ## the single-node Kubernetes end to end: cluster-up, helm install, stories, doctor, External Storage suite, chart upgrade/uninstall, the quick start as a user does it, cluster-down (root; test/e2e/README.md)
	./test/e2e/run.sh

e2e-podtime: build ## only the time to a running pod, filevol against local-path-provisioner, on the e2e cluster (a benchmark; report _output/e2e/podtime.md)
	E2E_PODTIME=1 E2E_STORIES=0 E2E_SUITE=0 E2E_DOCTOR=0 E2E_CHART=0 E2E_QUICKSTART=0 ./test/e2e/run.sh

e2e-multinode: build ## three nodes on this machine (vm + n2, n3 in namespaces of their own), helm install, the multi-node stories, down (root; test/e2e/cluster/README.md "Extra nodes")
	./test/e2e/multinode/run.sh

e2e-multinode-killed: build ## make e2e-multinode SIGKILLed half-way (nodes, GlusterFS over TLS, dir pool, filevol up), then the next run's clean-up proved to leave nothing (root; after one e2e-multinode build)
	./test/e2e/multinode/killed-run.sh

e2e-doctor: ## kubectl filevol doctor proofs on a running cluster (FILEVOL_E2E_KUBECONFIG, FILEVOL_E2E_POOL, FILEVOL_E2E_DRIVER_URL)
	$(GO) test -tags e2e -count=1 -v -timeout 15m ./test/e2e/doctor/

bench: build deps ## benchmarks against the running driver (report in _output/bench)
	./hack/bench.sh

scale: build deps ## 1,000 volumes staged and published on one node: stage latency, memory, /metrics, /debug/volumes, restart, simulated reboot (report in _output/scale; docs/scale.md)
	./hack/bench.sh --only scale --out _output/scale/report.md $(SCALE_ARGS)

bench-tree-delete: build deps ## a directory volume of a million files deleted while other directory volumes are created and deleted, on btrfs and ext4 directory pools (report in _output/tree-delete)
	./hack/bench.sh --only tree-delete --out _output/tree-delete/report.md $(TREE_DELETE_ARGS)

bench-cbt: build deps ## SnapshotMetadata (GetMetadataDelta, GetMetadataAllocated) on a 64 GiB thin block volume, 1 % and 10 % changed, xfs and btrfs pools; REFERENCE_BIN=path/to/hostpathplugin adds csi-driver-host-path beside it (report in _output/cbt; docs/snapshots.md)
	./hack/bench.sh --only cbt --settle 0 --out _output/cbt/report.md $(if $(REFERENCE_BIN),--reference-bin $(REFERENCE_BIN)) $(CBT_ARGS)

bench-guard: deps ## the directory pool's quota guard: the window a pod's escaped subvolume has before it is counted (seconds to EDQUOT, MiB past the size) and one pass over 600 subvolumes (root; docs/security.md)
	$(GO) test -count=1 -run '^$$' -bench 'BenchmarkGuard' -benchtime 5x ./internal/dirpool/

SHAREDFS_ARGS ?= --fio-rounds 3 --fio-size 268435456 --fio-runtime 10s --sharedfs-lifecycle 3
bench-sharedfs: build deps ## shared image pools on CephFS (ceph-fuse), GlusterFS and a local xfs, interleaved: CreateVolume, attach+stage, fio in a staged volume with the loop device's direct I/O on and off (report in _output/sharedfs; docs/performance.md)
	./hack/bench.sh --only sharedfs --settle 0 --out _output/sharedfs/report.md $(SHAREDFS_ARGS)

bench-snapshot: build deps ## snapshot, restore and expansion timings on xfs (reflink), btrfs and ext4 pools
	./hack/bench-snapshot.sh

FAULTS_ITERATIONS ?= 200
faults: build ## crash safety: SIGKILL the driver through whole lifecycles and reboots, and a shared pool's controller and node processes at every boundary of attach, detach, stage and unstage, on a local directory, on GlusterFS and on CephFS (-ceph), and an encrypted volume's stage and unstage at every boundary and fscrypt ioctl (long; make test runs a short one, without CephFS)
	$(GO) test -count=1 -v -timeout 60m ./test/faults -args -iterations=$(FAULTS_ITERATIONS) -bin=$(CURDIR)/$(BIN) -ceph

ceph-long: ## CephFS proofs that wait for the MDS's own timeouts (a node's ceph-fuse killed, or cut off, and nobody evicts it), csi-sanity on a CephFS shared image pool and directory pool, and test/multinode on CephFS: the fencing table with the controller's own eviction, attach and detach, two controllers, GC, the index, repair and snapshots (root; minutes; make test runs the short ones in test/ceph, TestFencingNodeBlocklisted and TestFencingNodeDeadEvictedByController)
	$(GO) test -count=1 -v -timeout 30m -run 'TestImagePoolFenceLong' ./test/ceph -args -long
	$(GO) test -count=1 -v -timeout 30m ./test/sanity/cephfs -args -ceph
	$(GO) test -count=1 -v -timeout 30m ./test/sanity/cephfsdir -args -ceph
	$(GO) test -count=1 -v -timeout 30m -run '(TestFencingNode(Dead|Partitioned|FilevolKilledWhileWriting|Blocklisted|DeadEvictedByController|EvictedOnAttach)|Test(AttachDetachAcrossNodes|TwoControllersRaceForOneVolume|ControllersShareOneView|GCLeavesAnotherNodesLoopDevice|RepairAtOpenWaitsForTheOwnersOtherReplica|SnapshotAndCloneOfAnAttachedVolume))/ceph' ./test/multinode -args -ceph

stress: ## 64 concurrent callers on 4 volumes under -race
	$(GO) test -race -count=1 -v ./test/stress -args -duration=60s

fulldisk: ## a pool that runs out of space
	$(GO) test -count=1 -v ./test/fulldisk

fuzz: ## run every fuzz target for FUZZTIME (default 30s) each; report in _output/fuzz
	./hack/fuzz.sh

##@ chart and images
chart-test: ## chart tests with the Helm SDK (values matrix, RBAC, schema, deploy/ drift); no cluster
	cd hack/tools && $(GO) test -count=1 ./...

deploy: ## regenerate deploy/ from charts/filevol; IMAGE=REPOSITORY[:TAG]: write _output/deploy/ with that driver image instead (deploy/ keeps the default)
	./hack/render-deploy.sh $(if $(IMAGE),-image $(IMAGE))

images: ## OCI image tarballs in _output/images (root; make e2e-tools first for the sidecars)
	./hack/images.sh

image: ## the driver image for PLATFORMS (linux/amd64 linux/arm64): one multi-platform OCI index, _output/images/filevol-multiarch.tar (no Docker; root adds the chroot checks of the host's platform)
	FILEVOL_PLATFORMS="$(PLATFORMS)" ./hack/images.sh --multiarch

push: ## push _output/images/filevol-multiarch.tar (make image) to REGISTRY=host[:port]/repository as TAG (default v<appVersion>); INSECURE=1: plain HTTP beyond localhost; digests in _output/images/digests.txt
	@test -n "$(REGISTRY)" || { echo "usage: make push REGISTRY=host[:port]/repository [TAG=$(TAG)] [INSECURE=1]"; exit 2; }
	@test -s $(MULTIARCH_TAR) || { echo "$(MULTIARCH_TAR) missing: run make image first"; exit 2; }
	cd hack/tools && $(GO) run ./cmd/ociimage push $(if $(INSECURE),-insecure) -digests $(CURDIR)/_output/images/digests.txt \
		$(CURDIR)/$(MULTIARCH_TAR) $(REGISTRY):$(TAG)

.PHONY: images-ceph images-ceph-test
images-ceph: ## _output/images/filevol-ceph.tar: the filevol image plus the ceph CLI, for the shared controller's eviction of CephFS clients (sharedPool.controller.cephCLI; root; host architecture)
	./hack/images.sh --ceph

images-ceph-test: ## the filevol-ceph image's own ceph, run from its rootfs read-only and without capabilities: its version, `ceph status` and `client ls` against the harness's CephFS cluster, and internal/cephevict's eviction through it (root; about 30 s; needs make images-ceph)
	@test -s _output/images/filevol-ceph.tar || { echo "_output/images/filevol-ceph.tar missing: run make images-ceph first"; exit 2; }
	FILEVOL_CEPH_IMAGE=$(CURDIR)/_output/images/filevol-ceph.tar $(GO) test -count=1 -v -timeout 10m ./test/cephimage/

chart-package: ## helm package charts/filevol into _output/chart (the project's helm, hack/tools)
	@mkdir -p _output/chart
	cd hack/tools && $(GO) tool helm package $(CURDIR)/charts/filevol --destination $(CURDIR)/_output/chart

chart-e2e: ## helm install/upgrade/uninstall on the e2e cluster (make cluster-up first)
	cd hack/tools && $(GO) test -tags e2e -count=1 -v -timeout 30m ./e2e/

clean: ## remove build output (not the pool of `make run`)
	rm -rf bin

# cluster-up, cluster-down, e2e-tools, cluster-smoke
include test/e2e/cluster/cluster.mk
