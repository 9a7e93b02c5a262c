// Package answer is what a kind of volume answers the gRPC services with
// in gRPC's own terms: an error whose code the kind chose (coded.go) and
// the entries of a volume's health (health.go). The services
// (internal/csi) and the kinds' node halves speak it; the pools, which
// know nothing of gRPC, do not.
package answer
