"""Bootstrap for one pod's process: a private mount namespace, the pod's mounts, its user, exec.

Run by the step executor as ``python -I -S podbootstrap.py SPEC.json`` (standard
library only, imports nothing from towline). It

1. asks for SIGKILL if the executor dies (PR_SET_PDEATHSIG) and unshares the mount
   namespace, making every mount private so nothing here propagates to the host;
2. bind-mounts each prepared volume directory or file (and the per-pod termination
   message file) at exactly the path the pod names, read-only where asked. A path
   that does not exist on the host is made by laying a tmpfs over its nearest
   existing parent that holds bind mounts of the parent's original entries, so
   the host's directories are never written to. Sources are opened before the
   first mount, so a pod mount over one of their parents (an emptyDir at /tmp)
   cannot hide them;
3. when the pod asks for a user, makes the interpreter and working directory
   reachable for it: a directory it may not search, such as a 0700 home, is
   veiled by a tmpfs exposing only the needed child;
4. with readOnlyRootFilesystem, remounts every other mount read-only (not /proc,
   /sys, /dev and the pod's writable volumes), as a container runtime would;
5. drops to the pod's uid/gid/groups, falling back to the current user with a
   note on stderr if the command would still be unreachable, and execs the
   command with the environment it was given.

Any failure before exec is written to the spec's ``errorFile`` and ends the process
with status 128 so the executor can report StartError instead of a command failure.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import re
import shutil
import signal
import stat
import sys
from dataclasses import dataclass
from typing import Any

CLONE_NEWNS = 0x00020000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_RELATIME = 1 << 21
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_MOVE = 0x2000
MS_REC = 0x4000
MS_UNBINDABLE = 1 << 17
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
START_FAILURE = 128

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class StartError(Exception):
    def __init__(self, message: str, errno: int = 0) -> None:
        super().__init__(message)
        self.errno = errno


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise StartError(f"{what}: {os.strerror(code)}", code)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def encode(value: str | None) -> bytes | None:
        return value.encode() if value is not None else None

    _check(
        _libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
        f"mount {source or fstype} on {target}",
    )


class Namespace:
    """Mount operations inside the private namespace, remembering which paths are ours."""

    def __init__(self, scratch: str) -> None:
        self.scratch = scratch
        self.ours: set[str] = set()
        self._shadow_count = 0

    @staticmethod
    def enter() -> None:
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS) (needs root or CAP_SYS_ADMIN)")
        _mount(None, "/", None, MS_REC | MS_PRIVATE)

    def _staging(self) -> str:
        self._shadow_count += 1
        path = os.path.join(self.scratch, f"shadow-{self._shadow_count}")
        os.makedirs(path, exist_ok=True)
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
        # Unbindable while it is being filled: the scratch directory may lie inside a
        # tree bound into this very overlay, and a recursive bind must not copy it.
        _mount(None, path, None, MS_UNBINDABLE)
        return path

    def _overlay(self, directory: str, entries: list[str], mode: int | None = None) -> None:
        """Put a tmpfs over `directory` holding bind mounts of `entries` from the original."""
        info = os.stat(directory)
        staging = self._staging()
        for entry in entries:
            source = os.path.join(directory, entry)
            target = os.path.join(staging, entry)
            if os.path.islink(source):
                os.symlink(os.readlink(source), target)
                continue
            if os.path.isdir(source):
                os.mkdir(target)
            else:
                open(target, "wb").close()  # an empty mount point
            _mount(source, target, None, MS_BIND | MS_REC)
        os.chmod(staging, mode if mode is not None else stat.S_IMODE(info.st_mode))
        os.chown(staging, info.st_uid, info.st_gid)
        if directory == "/":
            os.chdir(staging)
            _mount(staging, "/", None, MS_MOVE)
            os.chroot(".")
            os.chdir("/")
        else:
            _mount(staging, directory, None, MS_MOVE)
        _mount(None, directory, None, MS_PRIVATE)

    def ensure(self, path: str, *, directory: bool) -> None:
        """Make `path` exist inside the namespace without creating anything on the host."""
        if os.path.lexists(path):
            if os.path.isdir(path) != directory:
                kind = "directory" if directory else "file"
                raise StartError(f"mount path {path} exists but is not a {kind}")
            return
        parent = os.path.dirname(path)
        self.ensure(parent, directory=True)
        if parent not in self.ours:
            self._overlay(parent, sorted(os.listdir(parent)))
            self.ours.add(parent)
        if directory:
            os.mkdir(path, 0o755)
        else:
            open(path, "wb").close()  # an empty mount point
        self.ours.add(path)

    def bind(self, source: str, target: str, *, read_only: bool) -> None:
        self.ensure(target, directory=os.path.isdir(source))
        _mount(source, target, None, MS_BIND | MS_REC)
        if read_only:
            _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)

    def read_only_root(self, writable: set[str]) -> None:
        """readOnlyRootFilesystem: every mount but the pod's writable volumes, /proc, /sys and /dev turns read-only."""
        for mount_point, flags, fstype in _mounts():
            # A namespace handle (ip netns, a CNI's pod network) holds no files; it cannot be remounted.
            if fstype == "nsfs" or mount_point in writable or any(
                mount_point == top or mount_point.startswith(top + "/") for top in ("/proc", "/sys", "/dev")
            ):
                continue
            try:
                _mount(None, mount_point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags)
            except StartError as error:
                if error.errno != errno.ENOENT:  # a mount no path leads to any more is harmless
                    raise

    def expose(self, paths: list[str], uid: int, gids: set[int]) -> None:
        """Veil each directory `uid` may not search on the way to `paths`, keeping only the way through."""
        blocked: dict[str, set[str]] = {}
        for path in paths:
            parts = os.path.realpath(path).strip("/").split("/")
            for depth in range(len(parts)):
                ancestor = "/" + "/".join(parts[:depth])
                if not _searchable(ancestor, uid, gids):
                    blocked.setdefault(ancestor, set()).add(parts[depth])
        for directory in sorted(blocked, key=lambda d: d.count("/")):
            present = [entry for entry in sorted(blocked[directory]) if os.path.lexists(os.path.join(directory, entry))]
            self._overlay(directory, present, mode=0o711)


_KEPT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
               "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}


def _mounts() -> list[tuple[str, int, str]]:
    """Mount points of this namespace with the per-mount flags a read-only remount must keep, and their type."""
    found = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            flags = 0
            for option in fields[5].split(","):
                flags |= _KEPT_FLAGS.get(option, 0)
            fstype = fields[fields.index("-") + 1] if "-" in fields else ""
            found.append((point, flags, fstype))
    return found


def _searchable(directory: str, uid: int, gids: set[int]) -> bool:
    try:
        info = os.stat(directory)
    except OSError:
        return True
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid in gids:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def _can_run_as(uid: int, gid: int, groups: list[int], executable: str, cwd: Cwd) -> bool:
    """Check in a throw-away child, since dropping privileges cannot be undone."""
    child = os.fork()
    if child == 0:
        try:
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            cwd.enter()
            ok = os.access(executable, os.X_OK) and os.access(".", os.X_OK)
            os._exit(0 if ok else 1)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _identity(spec: dict[str, Any]) -> tuple[int, int, list[int]] | None:
    """(uid, gid, groups) to switch to, or None to stay who we are."""
    uid = spec.get("uid")
    if not isinstance(uid, int) or uid == os.getuid():
        return None
    gid = spec.get("gid")
    return uid, gid if isinstance(gid, int) else 0, [int(g) for g in spec.get("groups", [])]


def _switch_user(identity: tuple[int, int, list[int]], executable: str, cwd: Cwd) -> None:
    uid, gid, groups = identity
    if _can_run_as(uid, gid, groups, executable, cwd):
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)
        return
    print(
        f"[towline local node] cannot run {executable} as uid {uid} (not reachable for that user); "
        f"running as uid {os.getuid()} instead",
        file=sys.stderr, flush=True,
    )


@dataclass
class Cwd:
    """The working directory: a path inside the pod's view, or a host directory held open."""

    path: str
    descriptor: int | None = None

    def enter(self) -> None:
        """Prefer the path (getcwd() then names a path that works); the descriptor when a mount hid it."""
        if self.descriptor is not None:
            try:
                reachable = os.path.samestat(os.stat(self.path), os.fstat(self.descriptor))
            except OSError:
                reachable = False
            if not reachable:
                os.fchdir(self.descriptor)
                return
        os.chdir(self.path)


def _open_path(path: str) -> int:
    return os.open(path, os.O_PATH | os.O_CLOEXEC)


def _hidden_by(paths: list[str], mounts: list[dict[str, Any]]) -> list[str]:
    """The paths that lie under (and so would be hidden by) one of the pod's mount targets."""
    targets = [str(mount["target"]).rstrip("/") for mount in mounts]
    return [str(p) for p in paths if any(str(p) == t or str(p).startswith(t + "/") for t in targets)]


def _prepare(spec: dict[str, Any]) -> tuple[list[str], str]:
    Namespace.enter()
    # Host paths (volume sources, scratch space, the default working directory) are
    # opened now and used through /proc/self/fd from here on: a pod mount such as an
    # emptyDir at /tmp may hide the paths they were reached by.
    namespace = Namespace(f"/proc/self/fd/{_open_path(str(spec['scratch']))}")
    mounts = sorted(spec["mounts"], key=lambda m: str(m["target"]).count("/"))
    sources = [_open_path(str(mount["source"])) for mount in mounts]
    # Code the command needs (this machine's Python, the checkout) plays the image's role: a pod
    # volume such as an emptyDir at /tmp must not hide it when the checkout lives under /tmp.
    code = [(path, _open_path(path)) for path in _hidden_by(spec.get("expose", []), mounts) if os.path.exists(path)]
    if spec.get("workingDir"):
        cwd = Cwd(str(spec["workingDir"]))
    else:
        cwd = Cwd(str(spec["hostWorkingDir"]), _open_path(str(spec["hostWorkingDir"])))
    for mount, source in zip(mounts, sources, strict=True):
        namespace.bind(f"/proc/self/fd/{source}", str(mount["target"]), read_only=bool(mount["readOnly"]))
    for path, descriptor in code:
        namespace.bind(f"/proc/self/fd/{descriptor}", path, read_only=True)
    if cwd.descriptor is None:
        namespace.ensure(cwd.path, directory=True)
    argv = [str(part) for part in spec["argv"]]
    executable = shutil.which(argv[0], path=os.environ.get("PATH")) if "/" not in argv[0] else argv[0]
    if executable is None:
        raise StartError(f'exec: "{argv[0]}": executable file not found in $PATH')
    identity = _identity(spec)
    if identity is not None:
        uid, gid, groups = identity
        namespace.expose([executable, cwd.path, *[str(p) for p in spec.get("expose", [])]], uid, {gid, *groups})
    if spec.get("readOnlyRootFilesystem"):
        namespace.read_only_root({str(m["target"]) for m in mounts if not m["readOnly"]})
    if identity is not None:
        _switch_user(identity, executable, cwd)
    if spec.get("noNewPrivileges"):
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    cwd.enter()
    return argv, executable


def main(spec_path: str) -> None:
    with open(spec_path) as handle:
        spec = json.load(handle)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != spec["parentPid"]:
        os._exit(START_FAILURE)  # the executor is already gone
    # Opened before privileges are dropped; not inherited, so a successful exec closes it.
    errors = open(spec["errorFile"], "w")  # noqa: SIM115 - must stay open until exec
    try:
        argv, executable = _prepare(spec)
        os.execv(executable, argv)  # noqa: S606 - replacing ourselves with the pod's command is the point
    except (StartError, OSError) as error:
        message = str(error) if isinstance(error, StartError) else f"{error.strerror}: {error.filename}"
        errors.write(message)
        errors.close()
        os._exit(START_FAILURE)


if __name__ == "__main__":
    main(sys.argv[1])
