"""The kata process's walls, put up before the learner's file is imported (Linux; each wall
where the machine has what it needs, the others named by `walls()`).

- user and network namespaces: the process keeps its user id for files, but holds no
  capability over anything outside (it cannot ptrace the judge, read its memory or open its
  descriptors through /proc; the judge is not dumpable either), and has no network;
- Landlock: it may write, create or delete files only in its private temp dir (not the
  repository, the venv or site-packages), and signal only itself;
- seccomp: no new program (execve), no new process (fork, vfork, clone without
  CLONE_THREAD), no thread either where autograd is removed (a new thread would start with
  grad mode on) or where the judge traces the kata (Rules.threads), no socket but a local one, no ptrace, no reading or writing another
  process's memory, no io_uring, no new namespace, signals only to itself;
- rlimits: no core dump, a bounded number of open files (memory and file size are the
  judging process's, inherited).
`enclose` never raises: a wall the platform refuses is skipped, and the guide (docs/guide.md) lists the
guarantees that then do not hold.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import struct
import sys

CLONE_NEWUSER, CLONE_NEWNET, CLONE_THREAD = 0x10000000, 0x40000000, 0x00010000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
AF_UNIX = 1
EPERM, ENOSYS = 1, 38

# syscall numbers: x86_64 and aarch64 (no fork or vfork there)
_SYSCALLS = {
    "x86_64": {
        "socket": 41, "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "kill": 62, "ptrace": 101,
        "tkill": 200, "tgkill": 234, "execveat": 322, "process_vm_readv": 310, "process_vm_writev": 311,
        "clone3": 435, "pidfd_send_signal": 424, "pidfd_getfd": 438, "unshare": 272, "setns": 308,
        "mount": 165, "bpf": 321, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "perf_event_open": 298, "kcmp": 312, "userfaultfd": 323,
    },
    "aarch64": {
        "socket": 198, "clone": 220, "execve": 221, "kill": 129, "ptrace": 117, "tkill": 130, "tgkill": 131,
        "execveat": 281, "process_vm_readv": 270, "process_vm_writev": 271, "clone3": 435,
        "pidfd_send_signal": 424, "pidfd_getfd": 438, "unshare": 97, "setns": 268, "mount": 40, "bpf": 280,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "perf_event_open": 241,
        "kcmp": 272, "userfaultfd": 282,
    },
}  # fmt: skip
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_LANDLOCK = {"create_ruleset": 444, "add_rule": 445, "restrict_self": 446}  # the same on both

_walls: dict[str, str] = {}  # wall -> "up" or why not


def walls() -> dict[str, str]:
    """Each wall of this process: "up", or why it is not."""
    return dict(_walls)


def enclose(private_dir: str, *, threads: bool = True, namespaces: bool = True) -> dict[str, str]:
    """Put the walls up around this process (see the module docstring); `private_dir` is the
    only place it may write; namespaces=False: the process is in its own already (a rank of a
    world, judge/worlds.py, whose host made them). Returns walls()."""
    if namespaces:
        _try("namespaces", _namespaces)
    _try("rlimits", _rlimits)
    _try("no_new_privs", lambda: _prctl(PR_SET_NO_NEW_PRIVS, 1))
    _try("landlock", lambda: _landlock(private_dir))
    _try("seccomp", lambda: _seccomp(threads))
    return walls()


def _try(name: str, put_up) -> None:
    if not sys.platform.startswith("linux"):
        _walls[name] = "not Linux"
        return
    try:
        put_up()
        _walls[name] = "up"
    except (OSError, AttributeError, KeyError, ValueError) as error:
        _walls[name] = str(error) or type(error).__name__


_libc = None


def _c():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, what: str) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")
    return result


def _prctl(option: int, *args) -> None:
    values = [ctypes.c_ulong(a) if isinstance(a, int) else a for a in args] + [ctypes.c_ulong(0)] * (4 - len(args))
    _check(_c().prctl(option, *values), "prctl")


# --------------------------------------------------------------------------- namespaces


def _namespaces() -> None:
    """A user namespace (the same ids inside, no capability outside) and a network one."""
    uid, gid = os.getuid(), os.getgid()
    _check(_c().unshare(CLONE_NEWUSER | CLONE_NEWNET), "unshare")
    for path, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{path}", "w") as file:
            file.write(text)


def _rlimits() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = 1024 if hard == resource.RLIM_INFINITY else min(hard, 1024)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, limit), limit))


# --------------------------------------------------------------------------- Landlock


_WRITE = {  # access right -> the Landlock ABI that knows it
    1 << 1: 1,  # write a file
    1 << 4: 1,  # remove a directory
    1 << 5: 1,  # remove a file
    1 << 6: 1,  # make a character device
    1 << 7: 1,  # make a directory
    1 << 8: 1,  # make a regular file
    1 << 9: 1,  # make a socket
    1 << 10: 1,  # make a fifo
    1 << 11: 1,  # make a block device
    1 << 12: 1,  # make a symlink
    1 << 13: 2,  # link or rename across directories
    1 << 14: 3,  # truncate
}
_FILE_RIGHTS = (1 << 1) | (1 << 14)  # what a rule on a single file may grant
_SCOPE_SIGNAL = 1 << 1  # ABI 6: signal only processes inside the same domain


def _landlock(private_dir: str) -> None:
    """Writes only beneath `private_dir` (and to /dev/null); reads everywhere; signals to self."""
    libc = _c()
    abi = _check(libc.syscall(_LANDLOCK["create_ruleset"], None, ctypes.c_size_t(0), ctypes.c_uint(1)), "landlock")
    handled = sum(right for right, since in _WRITE.items() if since <= abi)
    scoped = _SCOPE_SIGNAL if abi >= 6 else 0
    attr = struct.pack("<QQQ", handled, 0, scoped) if abi >= 6 else struct.pack("<Q", handled)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(libc.syscall(_LANDLOCK["create_ruleset"], buffer, ctypes.c_size_t(len(attr)), 0), "landlock")
    try:
        for path, rights in ((private_dir, handled), ("/dev/null", handled & _FILE_RIGHTS)):
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = ctypes.create_string_buffer(struct.pack("<Qi", rights, fd), 12)
                _check(libc.syscall(_LANDLOCK["add_rule"], ruleset, 1, rule, 0), "landlock rule")
            finally:
                os.close(fd)
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        _check(libc.syscall(_LANDLOCK["restrict_self"], ruleset, 0), "landlock")
    finally:
        os.close(ruleset)


# --------------------------------------------------------------------------- seccomp


def _seccomp(threads: bool) -> None:
    machine = platform.machine()
    numbers = _SYSCALLS[machine]
    program = _filter(numbers, _AUDIT_ARCH[machine], os.getpid(), threads)
    code = b"".join(struct.pack("<HBBI", *instruction) for instruction in program)
    filters = ctypes.create_string_buffer(code, len(code))
    prog = struct.pack("<H6xQ", len(program), ctypes.addressof(filters))
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.create_string_buffer(prog, len(prog)))


_LD, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000


def _errno(number: int) -> int:
    return 0x00050000 | number


def _filter(numbers: dict, arch: int, pid: int, threads: bool) -> list[tuple[int, int, int, int]]:
    """A classic BPF program: refused syscalls answer an errno (the kata sees an OSError)."""
    refused = [
        "execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev",
        "pidfd_send_signal", "pidfd_getfd", "unshare", "setns", "mount", "bpf", "io_uring_setup",
        "io_uring_enter", "io_uring_register", "perf_event_open", "kcmp", "userfaultfd",
    ]  # fmt: skip
    body: list[tuple] = []

    def on(name: str, then: list[tuple]) -> None:
        if name in numbers:
            body.append(("jeq", numbers[name], then))

    for name in refused:
        on(name, [(_RET, 0, 0, _errno(EPERM))])
    on("clone3", [(_RET, 0, 0, _errno(ENOSYS))])  # glibc falls back to clone, judged below
    clone_thread = [(_RET, 0, 0, _ALLOW)] if threads else [(_RET, 0, 0, _errno(EPERM))]
    on("clone", [(_LD, 0, 0, 16), ("jset", CLONE_THREAD, clone_thread), (_RET, 0, 0, _errno(EPERM))])
    on("socket", [(_LD, 0, 0, 16), ("jeq", AF_UNIX, [(_RET, 0, 0, _ALLOW)]), (_RET, 0, 0, _errno(EPERM))])
    to_self = [(_LD, 0, 0, 16), ("jeq", pid, [(_RET, 0, 0, _ALLOW)]), (_RET, 0, 0, _errno(EPERM))]
    for name in ("kill", "tgkill", "tkill"):
        on(name, to_self)
    program = [(_LD, 0, 0, 4), ("jeq", arch, [(_LD, 0, 0, 0), *body, (_RET, 0, 0, _ALLOW)]), (_RET, 0, 0, _KILL)]
    return _assemble(program)


def _assemble(program: list) -> list[tuple[int, int, int, int]]:
    """Flatten ("jeq"/"jset", k, then-block) into jumps: if true run the block, else skip it."""
    out: list[tuple[int, int, int, int]] = []
    for instruction in program:
        if isinstance(instruction[0], str):
            kind, k, block = instruction
            inner = _assemble(block)
            if len(inner) > 255:
                raise ValueError("seccomp: a block too long to jump over")
            out.append((_JEQ if kind == "jeq" else _JSET, 0, len(inner), k))
            out.extend(inner)
        else:
            out.append(instruction)
    return out


# --------------------------------------------------------------------------- which walls this machine has


WHAT_EACH_WALL_GUARANTEES = {
    "namespaces": "no ptrace of, and no /proc access to, the judge; no network",
    "rlimits": "no core dump; a bounded number of open files",
    "no_new_privs": "no setuid program gains rights",
    "landlock": "writes only to its private temp dir (not your files, the repository or the venv); signals only itself",
    "seccomp": "no new program, process or socket; no other process's memory; signals only itself",
}


def probe() -> dict[str, str]:
    """The walls a kata process gets on this machine: enclose() in a throwaway child."""
    import json
    import tempfile

    read_end, write_end = os.pipe()
    with tempfile.TemporaryDirectory(prefix="katas-walls-") as private:
        child = os.fork()
        if child == 0:
            try:
                os.write(write_end, json.dumps(enclose(private)).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as answer:
            found = answer.read()
        os.waitpid(child, 0)
    return json.loads(found or b"{}")


if __name__ == "__main__":  # python -m judge.sandbox: what the guide's guarantees rest on, here
    for wall, state in probe().items():
        print(f"{wall:13} {'up' if state == 'up' else 'DOWN: ' + state:40} {WHAT_EACH_WALL_GUARANTEES[wall]}")
