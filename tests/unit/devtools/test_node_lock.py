"""A NodeCluster that never took the machine's node lock leaves the machine alone when stopped.

Interrupted while waiting for the lock (a test timeout, Ctrl-C), its stop() must not remove
the node address and bridge of the node that does hold it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from towline_dev.node import network, realnode


def test_stop_without_the_lock_touches_no_link_and_removes_only_its_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    removed: list[bool] = []
    monkeypatch.setattr(network, "remove_links", lambda *, bridge_only: removed.append(bridge_only))
    state = tmp_path / "cluster"
    state.mkdir()
    cluster = realnode.NodeCluster(state)

    cluster.stop()

    assert removed == [], "another node's address and bridge were removed"
    assert not state.exists()
