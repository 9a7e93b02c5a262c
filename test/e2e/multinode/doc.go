// Package multinode holds the stories only several nodes can tell: capacity
// steering the scheduler between node pools, one claim provisioned once on the
// node of its pod, a node that dies with a volume and comes back, shared volumes
// that move between nodes, a ReadWriteMany directory claim written from three
// nodes, and an attach refused by fencing as Kubernetes shows it. They
// run against the three-node cluster of run.sh (make e2e-multinode), built
// with -tags e2e; see test/e2e/cluster/README.md, "Extra nodes".
package multinode
