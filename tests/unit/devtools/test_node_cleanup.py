"""Which leftovers a new node may remove: only those inside a marked node state directory."""

from __future__ import annotations

import json
from pathlib import Path

from towline_dev.node.cleanup import STATE_MARKER, _bundle_netns, _node_state_dir


def test_a_bundle_inside_a_marked_state_directory_is_the_nodes(tmp_path: Path) -> None:
    (tmp_path / STATE_MARKER).write_text("")
    bundle = tmp_path / "containerd" / "state" / "io.containerd.runtime.v2.task" / "k8s.io" / "abc"
    assert _node_state_dir(bundle) == tmp_path


def test_a_bundle_of_another_containerd_is_left_alone(tmp_path: Path) -> None:
    bundle = tmp_path / "run" / "containerd" / "io.containerd.runtime.v2.task" / "k8s.io" / "abc"
    assert _node_state_dir(bundle) is None


def test_the_sandbox_network_namespace_is_read_from_the_bundle(tmp_path: Path) -> None:
    spec = {"linux": {"namespaces": [
        {"type": "pid"}, {"type": "network", "path": "/var/run/netns/cni-1234"}, {"type": "ipc"},
    ]}}
    (tmp_path / "config.json").write_text(json.dumps(spec))
    assert _bundle_netns(tmp_path) == ["/var/run/netns/cni-1234"]
    assert _bundle_netns(tmp_path / "missing") == []
