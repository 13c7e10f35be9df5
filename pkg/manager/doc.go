// Package manager assembles jobkeeper's controllers: it holds the Options that
// the CLI fills from flags, builds clients and the shared informer factory,
// serves /metrics, /healthz and /readyz, runs leader election, and starts each
// selected controller through its InitFunc.
package manager
