// The seccomp profile of workload pods that run agent tools (main.go says what it allows).
module crucible.dev/cluster/seccomp

go 1.26.0

require (
	github.com/moby/profiles/seccomp v0.3.0
	github.com/opencontainers/runtime-spec v1.3.0
	golang.org/x/sys v0.49.0
)
