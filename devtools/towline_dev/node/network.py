"""The node's host networking: its address, forwarding, and the netfilter state it leaves.

Never touches an interface, route or chain it did not create: the dummy interface
and the CNI bridge carry the node's own names, and netfilter cleanup removes only
chains named by kube-proxy (KUBE-*) and kube-router (KUBE-ROUTER-*, KUBE-NWPLCY-*,
KUBE-POD-FW-*, KUBE-SRC-*/KUBE-DST-* sets) and the CNI plugins (CNI-*).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from pathlib import Path

from towline_dev.node.layout import BRIDGE, NODE_ADDRESS, NODE_INTERFACE

_OWNED_CHAIN = re.compile(r"^(KUBE-|CNI-)")
_OWNED_SET = re.compile(r"^(KUBE-|kube-router)", re.IGNORECASE)


def run(argv: list[str], *, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def link_exists(name: str) -> bool:
    return run(["ip", "link", "show", "dev", name], check=False).returncode == 0


def set_sysctl(key: str, value: str) -> str:
    """Set a sysctl and return its previous value."""
    path = Path("/proc/sys") / key.replace(".", "/")
    previous = path.read_text().strip()
    path.write_text(value)
    return previous


def add_node_address() -> None:
    """A port-less bridge holding the node address (idempotent; this kernel has no dummy links)."""
    if not link_exists(NODE_INTERFACE):
        run(["ip", "link", "add", NODE_INTERFACE, "type", "bridge"])
    run(["ip", "address", "replace", f"{NODE_ADDRESS}/32", "dev", NODE_INTERFACE])
    run(["ip", "link", "set", NODE_INTERFACE, "up"])


def remove_links(*, bridge_only: bool) -> None:
    """The CNI bridge, and unless `bridge_only` the node address (the API server may still use it)."""
    for name in (BRIDGE,) if bridge_only else (BRIDGE, NODE_INTERFACE):
        if link_exists(name):
            run(["ip", "link", "delete", name], check=False)


def strip_owned_rules(saved: str) -> str:
    """iptables-save output without the chains (and jumps to them) that the node's parts own."""
    kept = []
    for line in saved.splitlines():
        if line.startswith(":") and _OWNED_CHAIN.match(line[1:]):
            continue
        if line.startswith("-A "):
            fields = line.split()
            chain = fields[1]
            target = fields[fields.index("-j") + 1] if "-j" in fields else ""
            goto = fields[fields.index("-g") + 1] if "-g" in fields else ""
            if _OWNED_CHAIN.match(chain) or _OWNED_CHAIN.match(target) or _OWNED_CHAIN.match(goto):
                continue
            if "--match-set" in fields and _OWNED_SET.match(fields[fields.index("--match-set") + 1]):
                continue
        kept.append(line)
    return "\n".join(kept) + "\n"


def clean_netfilter() -> None:
    """Remove every owned chain and rule (iptables, both backends if present) and owned ipsets."""
    for save, restore in (("iptables-save", "iptables-restore"), ("iptables-legacy-save", "iptables-legacy-restore")):
        with contextlib.suppress(FileNotFoundError):
            saved = run([save], check=False).stdout
            if "KUBE-" in saved or "CNI-" in saved:
                run([restore], stdin=strip_owned_rules(saved), check=False)
    with contextlib.suppress(FileNotFoundError):
        names = run(["ipset", "list", "-n"], check=False).stdout.split()
        for name in names:
            if _OWNED_SET.match(name):
                run(["ipset", "destroy", name], check=False)
