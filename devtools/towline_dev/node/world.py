"""A machine of its own for a second local node: fresh network, mount and PID namespaces.

The local node's names are machine-wide: its address and bridges, its netfilter chains, the
test-hosts namespace `/run/netns/towline-testhosts`, the node lock `/run/towline-node.lock`,
containerd's runc state under `/run`, the shims `cleanup` finds through `/proc`. So one node per
machine (docs/real-node.md). A *world* gives a command all of those as its own: its own network
namespace (addresses, links, routes, netfilter tables and sysctls under `net.`), its own mount
namespace with an empty `/run` and a `/sys` that shows its own links, and its own PID namespace
(`/proc` lists only its processes, and they all end when the command does). The disk (caches,
`/tmp`), cgroups and the kernel stay shared.

`make test` runs the tests that must own their node (the exclusive part) in a world, beside the
concurrent part's node on the machine itself (tests/suite.py).

With `uplink`, a veth pair joins it to the machine (198.18.N.2 inside, 198.18.N.1 outside, N the
first free of 1-63: the benchmarking range, so nothing is mistaken for a real host) and the machine
forwards and masquerades its traffic: the world reaches what the machine reaches (package mirrors,
PyPI), and a route out exists as on the machine (a Service address is routed before kube-proxy's
DNAT rewrites it). The machine's own test range is not among what it reaches: forwarded traffic from the
uplink to 198.51.100.0/24 is rejected, so a world's test hosts, identity provider or node address that is not
up yet is never answered by the machine's (a world's API server once fetched the machine's provider's keys).
Every iptables call waits for the xtables lock (`-w`): the machine's node's kube-proxy and kube-router hold it
often, and a removal refused for the lock would leave a rule behind.

    python -m towline_dev.node.world [--uplink] -- COMMAND [ARG...]

needs root; the exit status is the command's.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from towline_dev.node.network import link_exists, run, set_sysctl
from towline_dev.processes import alive, wait_for

INSIDE = "--inside"
UPLINK = "--uplink"
_CGROUPS_KEPT = Path("/run/.towline-world-cgroup")
"""Where the cgroup hierarchies wait while /sys is mounted again (the node's kubelet needs them)."""
INSIDE_LINK = "uplink0"
UPLINKS = range(1, 64)
"""Uplink N: the machine's end `towline-wupN` at 198.18.N.1/30, the world's `uplink0` at 198.18.N.2."""


def command(argv: Sequence[str], *, uplink: bool = False) -> list[str]:
    """The argv that runs `argv` in a new world (unshare(1): it forks, mounts /proc, and kills the
    world if it is killed itself). With `uplink`, start it as `World` does, which connects it."""
    return ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
            "--propagation", "private", sys.executable, "-m", "towline_dev.node.world", INSIDE,
            *([UPLINK] if uplink else []), "--", *argv]


class World:
    """`argv` running in a world; with `uplink`, joined to the machine until `wait()` or `kill()` returns.

    The uplink is removed (and the machine's forwarding sysctl put back) only there, not when `argv`
    exits: a caller that also runs a node on the machine waits for the world after stopping that node,
    which restores the forwarding it found (on) before this puts back what was there first."""

    def __init__(self, argv: Sequence[str], *, uplink: bool = False, **popen: Any) -> None:
        self.process = subprocess.Popen(command(argv, uplink=uplink), **popen)
        self._owner = os.getpid()
        """Who removes the uplink's rule (`wait()`): named in it, so a rule whose owner died is known stale."""
        self._forwarding: str | None = None
        self.uplink: int | None = None
        """N of its uplink while connected (addresses 198.18.N.1 outside, 198.18.N.2 inside)."""
        if uplink:
            try:
                self._connect()
            except BaseException:
                self.kill()
                raise

    def _connect(self) -> None:
        ours = os.readlink("/proc/self/ns/net")
        pid = self.process.pid
        # unshare(1) enters the new network namespace itself before it forks the world's init.
        wait_for(lambda: self.process.poll() is not None or _netns_of(pid) not in (ours, None), timeout=30,
                 interval=0.02, what="the world's network namespace")
        if self.process.poll() is not None:
            raise RuntimeError(f"the world exited at once (status {self.process.returncode})")
        taken = _live_uplinks()
        for number in UPLINKS:
            if number in taken:
                continue  # a world that ended but was not waited for yet: its link went with it, its rule not
            made = run(["ip", "link", "add", _host_link(number), "type", "veth", "peer", "name", INSIDE_LINK,
                        "netns", str(pid)], check=False)
            if made.returncode == 0:
                self.uplink = number
                break
            if not link_exists(_host_link(number)):
                raise RuntimeError(f"cannot make the world's uplink: {made.stderr.strip()}")
        else:
            raise RuntimeError(f"every uplink ({len(UPLINKS)}) is taken: too many worlds on this machine")
        outside, inside = _addresses(self.uplink)
        run(["ip", "address", "add", f"{outside}/30", "dev", _host_link(self.uplink)])
        run(["ip", "link", "set", _host_link(self.uplink), "up"])
        run(["iptables", "-w", "-t", "nat", "-A", *_masquerade(self.uplink, self._owner)])
        for chain in FENCED_CHAINS:
            run(["iptables", "-w", "-I", *_fenced(chain, self.uplink, self._owner)])
        self._forwarding = set_sysctl("net.ipv4.ip_forward", "1")
        enter = ["nsenter", f"--net=/proc/{pid}/ns/net", "ip"]
        run([*enter, "address", "add", f"{inside}/30", "dev", INSIDE_LINK])
        run([*enter, "link", "set", INSIDE_LINK, "up"])
        run([*enter, "route", "add", "default", "via", outside])

    def _disconnect(self) -> None:
        if self.uplink is None:
            return
        number, self.uplink = self.uplink, None
        run(["iptables", "-w", "-t", "nat", "-D", *_masquerade(number, self._owner)], check=False)
        for chain in FENCED_CHAINS:
            run(["iptables", "-w", "-D", *_fenced(chain, number, self._owner)], check=False)
        if link_exists(_host_link(number)):
            run(["ip", "link", "delete", _host_link(number)], check=False)
        if self._forwarding is not None:
            set_sysctl("net.ipv4.ip_forward", self._forwarding)
            self._forwarding = None

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Whatever happened in the block, nothing of the world is left: killed if it still runs."""
        if self.process.poll() is None:
            self.kill()
        self.wait()

    def wait(self) -> int:
        """The command's exit status, once it and the world ended; then the uplink is removed."""
        try:
            return self.process.wait()
        finally:
            self._disconnect()

    def kill(self) -> None:
        """End the world at once: unshare(1) takes everything in it along."""
        self.process.kill()
        self.wait()


def _host_link(number: int) -> str:
    """The machine's end of uplink `number`."""
    return f"towline-wup{number}"


def _addresses(number: int) -> tuple[str, str]:
    """The machine's and the world's address on uplink `number`."""
    return f"198.18.{number}.1", f"198.18.{number}.2"


def _masquerade(number: int, owner: int) -> list[str]:
    return ["POSTROUTING", "-s", f"{_addresses(number)[1]}/32", "-j", "MASQUERADE",
            "-m", "comment", "--comment", uplink_comment(number, owner)]


MACHINES_TEST_RANGE = "198.51.100.0/24"
"""The documentation range the machine's node, pods, Services and test hosts use (towline_dev.node.layout); every
world uses the same addresses for its own."""


FENCED_CHAINS = ("INPUT", "FORWARD")
"""Where the machine meets a world's packets for its test range: its own addresses (the node's) and those it
forwards to (the test hosts' namespace, the identity provider, pods)."""


def _fenced(chain: str, number: int, owner: int) -> list[str]:
    """The filter rule that keeps uplink `number`'s world from the machine's test range in `chain` (REJECT: a
    refusal at once, not a wait)."""
    return [chain, "-i", _host_link(number), "-d", MACHINES_TEST_RANGE, "-j", "REJECT",
            "-m", "comment", "--comment", uplink_comment(number, owner)]


def uplink_comment(number: int, owner: int) -> str:
    """What marks uplink `number`'s rule, made by process `owner` (`_RULE_COMMENT` reads it back)."""
    return f"towline world uplink {number} of pid {owner}"


_RULE_COMMENT = re.compile(r'--comment "?towline world uplink (\d+)(?: of pid (\d+))?"?')
"""An uplink's rule as `iptables -S` prints it: `uplink_comment`'s, or older code's without `of pid`."""


def _live_uplinks() -> set[int]:
    """The uplink numbers whose rule is on the machine and whose owner lives: taken until it removes the rule.

    A rule whose owner died (a suite killed before it waited for its world) is removed here: nobody else would,
    and every killed suite would take two of the 63 numbers for good. So is one that names no owner (older
    code's)."""
    taken: set[int] = set()
    for table, chain in (("nat", "POSTROUTING"), *(("filter", fenced) for fenced in FENCED_CHAINS)):
        listed = run(["iptables", "-w", "-t", table, "-S", chain], check=False).stdout
        for rule in listed.splitlines():
            found = _RULE_COMMENT.search(rule)
            if found is None:
                continue
            if found[2] is not None and alive(int(found[2])):
                taken.add(int(found[1]))
            else:
                run(["iptables", "-w", "-t", table, *shlex.split(rule.replace("-A", "-D", 1))], check=False)
    return taken


def _netns_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def await_uplink() -> None:
    """Inside: wait until the machine has handed over the uplink and routed everything out through it
    (a default route in this namespace's table), so the command starts with its network in place."""
    def routed() -> bool:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
        return any(line.split()[1] == "00000000" for line in lines)

    wait_for(routed, timeout=60, interval=0.02, what="the world's uplink")


def furnish() -> None:
    """Inside the new namespaces: an empty /run, a /sys of this network namespace, loopback up."""
    run(["mount", "-t", "tmpfs", "-o", "mode=0755,nosuid,nodev", "towline-world", "/run"])
    Path("/run/lock").mkdir()
    Path("/run/lock").chmod(0o1777)  # as the machine's: anyone may take a lock there
    _CGROUPS_KEPT.mkdir()
    run(["mount", "--rbind", "/sys/fs/cgroup", str(_CGROUPS_KEPT)])
    run(["umount", "--lazy", "/sys"])
    run(["mount", "-t", "sysfs", "-o", "nosuid,nodev,noexec", "sysfs", "/sys"])
    run(["mount", "--move", str(_CGROUPS_KEPT), "/sys/fs/cgroup"])
    _CGROUPS_KEPT.rmdir()
    run(["ip", "link", "set", "lo", "up"])


def init(argv: Sequence[str]) -> int:
    """PID 1 of the world: run `argv`, pass on SIGTERM and SIGHUP, reap every orphan (containerd's
    shims are re-parented here), return `argv`'s exit status. When it returns, the kernel kills
    whatever else still runs in the world.

    SIGINT is not passed on: Ctrl-C reaches `argv` from the terminal already (same process group),
    and a second one would cut pytest's teardown short."""
    child = subprocess.Popen(list(argv))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda received, _frame: child.send_signal(received))
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell reports it


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    inside = args[:1] == [INSIDE]
    args = args[1:] if inside else args
    uplink = args[:1] == [UPLINK]
    args = args[1:] if uplink else args
    if args[:1] == ["--"]:
        args = args[1:]
    if inside:
        furnish()
        if uplink:
            await_uplink()
        return init(args)
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("error: a world needs root (network, mount and PID namespaces)", file=sys.stderr)
        return 1
    return World(args, uplink=uplink).wait()


if __name__ == "__main__":
    raise SystemExit(main())
