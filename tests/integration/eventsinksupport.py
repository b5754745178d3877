"""The operator with its events sink set, for the tests that receive Towline's CloudEvents (in Python or in Go).

The sink's dead letters are one ConfigMap in the operator's namespace of the whole cluster, which the concurrent
suite's workers share: a sink test on another worker would take this one's replay (its operator acts on the ConfigMap's
annotation) or find letters it did not cause. So the tests with a sink take turns (a lock file of this machine), and
each starts with no dead letters."""

from __future__ import annotations

import asyncio
import fcntl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.integration.replicas import in_place_of

from towline.k8s.client import CONFIG_MAPS, KubeApi
from towline.k8s.deadletters import DEAD_LETTERS_CONFIG_MAP, REPLAY_ANNOTATION
from towline_dev.install import OperatorProcess

SINK_TURN = Path(tempfile.gettempdir()) / "towline-test-events-sink.lock"


def empty_dead_letters(operator: OperatorProcess) -> None:
    """No events-sink dead letters and no replay asked for, written as the operator (which may update its store)."""
    async def main() -> None:
        api = await KubeApi.connect(str(operator.kubeconfig))
        path = CONFIG_MAPS.path(operator.namespace, DEAD_LETTERS_CONFIG_MAP)
        try:
            config_map = await api.get(path)
            if config_map is not None:
                config_map["data"] = {}
                (config_map["metadata"].get("annotations") or {}).pop(REPLAY_ANNOTATION, None)
                await api.replace(path, config_map)
        finally:
            await api.close()
    asyncio.run(main())


@contextmanager
def operator_with_sink(session_operator: OperatorProcess, tmp_path: Path, url: str, secret: str,
                       **settings: str) -> Iterator[OperatorProcess]:
    """The session operator restarted with events.sink set (its signing secret in a file, as the chart mounts it),
    once no other test's operator has one, with no dead letters kept."""
    secret_file = tmp_path / "signing-secret"
    secret_file.write_text(secret)
    env = {"TOWLINE_EVENTS_SINK_URL": url, "TOWLINE_EVENTS_SECRET_FILE": str(secret_file),
           "TOWLINE_EVENTS_MAX_ATTEMPTS": "3", **settings}
    with SINK_TURN.open("w") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        empty_dead_letters(session_operator)
        with in_place_of(session_operator, tmp_path, settings=env,
                         kept_log=f"operator-events-{tmp_path.name}.log") as sinking:
            yield sinking
