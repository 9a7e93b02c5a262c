// Package release holds the check of the release workflow,
// .github/workflows/release.yaml (release_test.go): no code of its own.
package release
