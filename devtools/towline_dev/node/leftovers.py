"""What a stopped node must not leave behind: checked by the tests after every stop."""

from __future__ import annotations

import re
from pathlib import Path

from towline_dev.node import cleanup
from towline_dev.node.layout import BRIDGE, NODE_INTERFACE
from towline_dev.node.network import link_exists, run


def leftovers(state_dir: Path, pod_netns: set[str]) -> list[str]:
    """Descriptions of anything the node (state under `state_dir`, pods in network namespaces
    `pod_netns`) left on the machine."""
    found: list[str] = []
    saved = run(["iptables-save"], check=False).stdout
    found += [f"iptables: {line}" for line in saved.splitlines() if re.search(r"\b(KUBE|CNI)-", line)]
    sets = run(["ipset", "list", "-n"], check=False).stdout.split()
    found += [f"ipset: {name}" for name in sets if name.upper().startswith("KUBE-")]
    found += [f"link: {name}" for name in (BRIDGE, NODE_INTERFACE) if link_exists(name)]
    if state_dir.exists():
        mounts = cleanup.mounts_under(state_dir)
        found += [f"netns: {name}" for name in _pod_netns(mounts) if name in pod_netns]
        found += [f"mount: {point}" for point in mounts]
    marker = str(state_dir).encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline:
                argv = cmdline.replace(b"\0", b" ")[:200]
                found.append(f"process {entry.name}: {argv!r}")
    return found


def netns_names(root: Path) -> list[str]:
    """Live network namespaces the containerd of a node under `root` (its state directory, or a cluster's
    that holds it) created for pod sandboxes (``cni-<uuid>``, mounted there: `layout.containerd_config`).
    Only those: a namespace in the machine's /run/netns is some other runtime's, or a node's of older code
    that was killed, and no stop of this node can or should remove it."""
    return _pod_netns(cleanup.mounts_under(root))


def _pod_netns(mount_points: list[str]) -> list[str]:
    """The pod sandboxes' network namespaces (``.../netns/cni-<uuid>``) among `mount_points`, by name."""
    return sorted(Path(point).name for point in mount_points
                  if Path(point).parent.name == "netns" and Path(point).name.startswith("cni-"))
