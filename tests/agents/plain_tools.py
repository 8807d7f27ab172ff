"""Tools that import nothing the sandbox's child has not loaded already, so that they run
where their user may read this checkout but not the interpreter's own library (a root
job's Python under /root, where root lacks CAP_SYS_ADMIN to show it to the tool)."""

import os


def whoami() -> dict[str, object]:
    with open("/proc/self/uid_map") as ids:
        mapped = ids.read().split()
    return {
        "uid": os.getuid(),
        "network": os.readlink("/proc/self/ns/net"),
        "mapped": mapped,
        "reads_shadow": os.access("/etc/shadow", os.R_OK),
    }
