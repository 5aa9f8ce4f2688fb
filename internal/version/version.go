// Package version is ncclprof's version as the Go programs report it (ncclmerge --version). The
// plugin (profiler/core.h), the Makefile and the Python package state it too; a test keeps the four
// equal.
package version

// Version of this release.
const Version = "0.1.0"
