// Package version holds the build-stamped version of filevol.
// It imports nothing of the project.
package version

// Version is set at build time with
// -ldflags "-X github.com/filevol/filevol/internal/version.Version=...".
var Version = "v0.0.0-dev"
