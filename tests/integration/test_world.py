"""A world (towline_dev.node.world) is a machine of its own for a second node: what `make test` relies on
to run the exclusive part beside the concurrent part's node. Each test tries to reach past the world's
edge from inside, or into it from the machine, the way a node's parts would collide."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from towline_dev.node import world
from towline_dev.node.network import link_exists, run
from towline_dev.processes import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="network, mount and PID namespaces need root"),
]

LINK = "towline-wtest0"


def in_world(script: str, *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(world.command(["sh", "-c", script]), capture_output=True, text=True, timeout=timeout,
                          check=False)


def test_the_commands_status_and_output_come_back() -> None:
    done = in_world("echo inside; exit 7")
    assert (done.returncode, done.stdout) == (7, "inside\n"), done.stderr
    killed = in_world("kill -KILL $$")
    assert killed.returncode == 128 + 9, "a command killed by a signal reads as the shell reports it"


def test_links_and_addresses_made_inside_are_not_the_machines(tmp_path: Path) -> None:
    ready, go = tmp_path / "ready", tmp_path / "go"
    script = (f"ip link add {LINK} type bridge && ip address add 198.51.100.250/32 dev {LINK} && touch {ready}; "
              f"while [ ! -e {go} ]; do sleep 0.1; done; ip -o link show")
    inside = subprocess.Popen(world.command(["sh", "-c", script]), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        wait_for(lambda: ready.exists() or inside.poll() is not None, timeout=30, interval=0.1,
                 what="the world to make its link")
        assert ready.exists(), inside.communicate()
        assert not link_exists(LINK), "a link made in the world is on the machine"
        go.touch()
        stdout, stderr = inside.communicate(timeout=30)
    finally:
        inside.kill()
    assert inside.returncode == 0, stderr
    names = sorted(line.split(":")[1].strip().split("@")[0] for line in stdout.splitlines())
    assert names == ["lo", LINK], "the world sees the machine's links, or not its own"
    assert not link_exists(LINK)


def test_the_machines_links_run_and_processes_are_not_visible_inside() -> None:
    marker = Path("/run") / f"towline-world-test-{os.getpid()}"
    marker.write_text("the machine's\n")
    try:
        done = in_world(f"ls /sys/class/net; test -e {marker} && echo MARKER; ps -e -o pid=; "
                        "iptables-save | grep -c '^-A' || true")
    finally:
        marker.unlink()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert lines[0] == "lo" and "eth0" not in lines, "/sys shows the machine's links"
    assert "MARKER" not in lines, "the world's /run is the machine's"
    assert str(os.getpid()) not in lines[1:-1] and "1" in lines, "the world's /proc lists the machine's processes"
    assert lines[-1] == "0", "the world's netfilter tables hold the machine's rules"


def test_everything_left_running_inside_ends_with_the_command() -> None:
    # A daemon that outlives its parent (as containerd's shims do) is the world's init's to reap, and ends
    # with the world: nothing started inside runs on afterwards.
    tag = f"{os.getpid()}.{id(object())}"
    done = in_world(f"(setsid sleep 3600.{tag.replace('.', '')} &) ; echo started")
    assert done.stdout == "started\n", done.stderr
    survivors = [pid for pid in os.listdir("/proc") if pid.isdigit() and _argv(pid)[-1:] == [
        f"3600.{tag.replace('.', '')}"]]
    assert survivors == []


def test_the_cgroup_hierarchies_stay_mounted_inside() -> None:
    # The node's kubelet needs them; /sys is mounted again inside to show the world's own links.
    done = in_world("ls /sys/fs/cgroup; echo --; ls /sys/fs/cgroup/memory")
    assert done.returncode == 0, done.stderr
    hierarchies, _, memory = done.stdout.partition("--")
    assert set(hierarchies.split()) == set(os.listdir("/sys/fs/cgroup"))
    assert "memory.limit_in_bytes" in memory.split(), "the memory hierarchy is not mounted inside"


def _argv(pid: str) -> list[str]:
    try:
        return Path("/proc", pid, "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def test_iptables_made_inside_stay_inside() -> None:
    done = in_world("iptables -N TOWLINE-WORLD-TEST && iptables-save | grep -c TOWLINE-WORLD-TEST")
    assert done.stdout.strip() == "1", done.stderr
    assert "TOWLINE-WORLD-TEST" not in run(["iptables-save"]).stdout


def test_an_uplinked_world_reaches_the_machine_and_leaves_no_link_rule_or_sysctl() -> None:
    forwarding = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    with socket.create_server(("0.0.0.0", 0)) as listener:  # the world connects from its own netns
        port = listener.getsockname()[1]
        script = ("import socket, subprocess\n"
                  "gateway = subprocess.check_output(['ip', 'route', 'show', 'default']).split()[2].decode()\n"
                  f"socket.create_connection((gateway, {port}), timeout=10).sendall(b'from the world')\n")
        with world.World(["python3", "-c", script], uplink=True, stderr=subprocess.PIPE) as inside:
            listener.settimeout(30)
            connection, (peer, _) = listener.accept()
            with connection:
                assert connection.recv(64) == b"from the world"
            number = inside.uplink
            assert number is not None and peer == f"198.18.{number}.2", "the world's traffic left by another way"
            assert _uplink_rule(number) in run(["iptables-save", "-t", "nat"]).stdout
            assert inside.wait() == 0, inside.process.stderr.read() if inside.process.stderr else ""
    assert not link_exists(f"towline-wup{number}")
    assert _uplink_rule(number) not in run(["iptables-save", "-t", "nat"]).stdout
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text() == forwarding


def test_an_uplinked_world_is_refused_the_machines_test_range_and_the_fence_goes_with_it() -> None:
    """The machine's node, test hosts and identity provider use the addresses every world uses for its own: a
    world whose own host is not up yet must be refused, not answered by the machine's (a world's API server once
    took the machine's provider for its own). The machine itself still reaches the address."""
    address, link = "198.51.100.248", "towline-wtest1"  # free in layout.py's plan (neither node nor test host)
    run(["ip", "link", "add", link, "type", "bridge"])  # a port-less bridge holds an address, as the node's does
    try:
        run(["ip", "address", "add", f"{address}/32", "dev", link])
        run(["ip", "link", "set", link, "up"])
        with socket.create_server((address, 0)) as listener:
            port = listener.getsockname()[1]
            socket.create_connection((address, port), timeout=5).close()  # the machine reaches it
            script = ("import socket\n"
                      "try:\n"
                      f"    socket.create_connection(('{address}', {port}), timeout=10)\n"
                      "    print('reached')\n"
                      "except ConnectionRefusedError:\n"
                      "    print('refused')\n"
                      "except OSError as error:\n"
                      "    print(f'failed: {error!r}')\n")
            with world.World(["python3", "-c", script], uplink=True, stdout=subprocess.PIPE, text=True) as inside:
                number = inside.uplink
                assert number is not None
                assert all(_uplink_rule(number) in run(["iptables", "-S", chain]).stdout
                           for chain in world.FENCED_CHAINS)
                assert inside.wait() == 0
                said = inside.process.stdout.read().strip() if inside.process.stdout else ""
        assert said == "refused", f"the world's connection to the machine's {address}: {said}"
        assert not any(_uplink_rule(number) in run(["iptables", "-S", chain]).stdout
                       for chain in world.FENCED_CHAINS), "the world's fence stayed after it"
    finally:
        run(["ip", "link", "delete", link], check=False)


def test_a_world_that_ended_keeps_its_uplink_number_until_it_is_waited_for() -> None:
    """`make test` waits for its worlds only after the concurrent part: one that ended early has lost its link
    (with its network namespace) but not yet its rule, and a world made meanwhile must not take its number
    (its rule would be the one removed, and the first world's left behind)."""
    with world.World(["true"], uplink=True) as ended:
        number = ended.uplink
        assert number is not None
        ended.process.wait()  # ended, not waited for: World.wait() would remove its uplink
        wait_for(lambda: not link_exists(f"towline-wup{number}"), timeout=30, interval=0.05,
                 what="the ended world's link to go with its network namespace")
        with world.World(["true"], uplink=True) as later:
            assert later.uplink is not None and later.uplink != number, "the ended world's number was taken again"
            taken = later.uplink
        assert _uplink_rule(taken) not in run(["iptables-save", "-t", "nat"]).stdout
        assert _uplink_rule(number) in run(["iptables-save", "-t", "nat"]).stdout
    assert _uplink_rule(number) not in run(["iptables-save", "-t", "nat"]).stdout


def test_a_rule_whose_owner_died_is_removed_by_the_next_world() -> None:
    """A suite killed before it waited for its world leaves the uplink's rule (the link goes with the world):
    the next world removes it, or every killed suite would hold two of the 63 numbers for good. A rule that
    names no owner (older code's) goes too; a living owner's stays (the test above)."""
    died = subprocess.Popen(["true"])
    died.wait()
    older = [*world._masquerade(62, died.pid)[:-1], "towline world uplink 62"]  # its comment named no owner
    stale = [world._masquerade(63, died.pid), older]
    for rule in stale:
        run(["iptables", "-t", "nat", "-A", *rule])
    try:
        with world.World(["true"], uplink=True) as later:
            assert later.uplink is not None
            rules = run(["iptables-save", "-t", "nat"]).stdout
            assert "towline world uplink 63 of" not in rules and '"towline world uplink 62"' not in rules, rules
            assert _uplink_rule(later.uplink) in rules
    finally:
        for rule in stale:
            run(["iptables", "-t", "nat", "-D", *rule], check=False)


def _uplink_rule(number: int) -> str:
    """How `iptables-save` shows uplink `number`'s rule, made by this process's worlds."""
    return f'"{world.uplink_comment(number, os.getpid())}"'

