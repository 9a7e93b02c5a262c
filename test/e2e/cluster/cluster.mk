# Single-node Kubernetes for the e2e tests. Include from the top-level Makefile:
#   include test/e2e/cluster/cluster.mk
# Paths are relative to $(CURDIR), i.e. make must run from the repository root.
# See test/e2e/cluster/README.md.

E2E_CLUSTER_DIR ?= $(CURDIR)/test/e2e/cluster
# Where build.sh put the binaries for the pinned versions (e2e.test, kubectl, sidecars...).
E2E_BIN_DIR = $(shell $(E2E_CLUSTER_DIR)/build.sh --print-bin-dir)
E2E_KUBECONFIG ?= $(or $(FILEVOL_E2E_STATE),/var/lib/filevol-e2e)/admin.kubeconfig

.PHONY: e2e-packages e2e-tools cluster-up cluster-down cluster-smoke

e2e-packages:
	$(E2E_CLUSTER_DIR)/install-packages.sh

e2e-tools: e2e-packages ## build (cached) the cluster binaries: kubernetes v1.36.3, etcd, sidecars, e2e.test, images
	$(E2E_CLUSTER_DIR)/build.sh
	$(E2E_CLUSTER_DIR)/snapshot-metadata.sh

cluster-up: e2e-tools ## start the single-node cluster on 127.0.0.1 (root)
	$(E2E_CLUSTER_DIR)/up.sh

cluster-down: ## stop every process it started, unmount, detach, remove the bridge
	$(E2E_CLUSTER_DIR)/down.sh

cluster-smoke: ## a pod runs on the cluster
	$(E2E_CLUSTER_DIR)/smoke.sh
