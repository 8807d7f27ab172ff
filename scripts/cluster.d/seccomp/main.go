// Prints the seccomp profile for Crucible's workload pods that run agent tools
// (docs/agents.md, "Tools in pods"): the container runtimes' default profile, as Moby
// publishes it, resolved for a container with no capabilities (what the restricted Pod
// Security Standard leaves a pod), plus one rule: unshare may make a new user and network
// namespace, and no other kind. That is what the tool sandbox (services/crucible/agents/
// sandbox_child.py) does to cut a tool's network; the default profile refuses unshare to a
// process without CAP_SYS_ADMIN, so under it every sandboxed call fails as no_isolation.
//
// The other namespace kinds (mount, PID, IPC, UTS, cgroup) stay refused, and so do mount,
// setns and the rest the default profile allows only with CAP_SYS_ADMIN: a seccomp filter
// is fixed when the container starts, so the capabilities a process holds inside its new
// user namespace open none of them.
//
// The kubelet reads the file from its seccomp directory (<root-dir>/seccomp); a pod names
// it as {type: Localhost, localhostProfile: <path below that directory>}.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// otherNamespaces are the namespace flags unshare may not carry.
const otherNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWPID | unix.CLONE_NEWCGROUP

func main() {
	noCapabilities := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	profile, err := seccomp.GetDefaultProfile(noCapabilities)
	if err != nil {
		fmt.Fprintf(os.Stderr, "resolving the default seccomp profile: %v\n", err)
		os.Exit(1)
	}
	profile.Syscalls = append(profile.Syscalls, specs.LinuxSyscall{
		Names:  []string{"unshare"},
		Action: specs.ActAllow,
		// Allowed when (flags & otherNamespaces) == 0: CLONE_NEWUSER, CLONE_NEWNET and the
		// flags that make no namespace.
		Args: []specs.LinuxSeccompArg{
			{Index: 0, Value: otherNamespaces, ValueTwo: 0, Op: specs.OpMaskedEqual},
		},
	})
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	if err := out.Encode(profile); err != nil {
		fmt.Fprintf(os.Stderr, "writing the profile: %v\n", err)
		os.Exit(1)
	}
}
