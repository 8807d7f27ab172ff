"""What a pod under runc's default seccomp profile gets: `unshare` refused with EPERM.

`deny_unshare()` installs that one rule as a seccomp filter on the calling process (and,
as filters are inherited, on every process it starts), so a test can meet the sandbox's
"no namespace" case for real on a machine that allows namespaces. Run it in a process of
its own: a filter cannot be removed.
"""

import ctypes
import errno
import platform

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_RET_K = 0x06
UNSHARE = {"x86_64": 272, "aarch64": 97}
"""The unshare syscall's number per architecture."""


class SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def supported() -> bool:
    return platform.machine() in UNSHARE


def deny_unshare() -> None:
    program = (SockFilter * 4)(
        SockFilter(BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr, the syscall's number
        SockFilter(BPF_JEQ_K, 0, 1, UNSHARE[platform.machine()]),
        SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM),
        SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    )
    fprog = SockFprog(len(program), program)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
