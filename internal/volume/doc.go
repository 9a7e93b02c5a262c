// Package volume holds the words that filevol's gRPC services
// (internal/csi) and its kinds of volume (the image volumes of
// internal/pool and internal/pool/imagenode, the directory volumes of
// internal/dirpool and internal/dirpool/dirnode) share: what a validated
// node request carries (request.go), what a kind can do (traits.go), the
// reasons of the volume health conditions (health.go), the sizes and
// mount options every volume gets (sizes.go) and the Secrets that reach
// a kind and nowhere else (secrets.go). What a kind answers in gRPC's
// terms is internal/answer's.
//
// It holds no logic and imports no package of filevol nor gRPC, so that
// the pools speak it without knowing gRPC, a new kind speaks to the
// services without importing another kind, and the services route to a
// kind without importing it.
package volume
