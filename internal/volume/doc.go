// Package volume holds the words that filevol's gRPC services
// (internal/csi) and its kinds of volume (the image volumes of
// internal/pool and internal/pool/imagenode, the directory volumes of
// internal/dirpool and internal/dirpool/dirnode) share: what a validated
// node request carries (request.go), the errors whose gRPC code a kind
// chose (coded.go), the reasons of the volume health conditions
// (health.go) and the Secrets that reach a kind and nowhere else
// (secrets.go).
//
// It holds no logic of any kind and imports no package of filevol, so
// that a new kind speaks to the services without importing another
// kind, and the services route to a kind without importing it.
package volume
