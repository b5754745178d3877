"""A graceful stop hands the Lease over once, even when a pass does not end or a stop arrives mid-pass."""

from __future__ import annotations

import asyncio

import pytest

from towline.k8s.client import KubeApi
from towline.k8s.objects import StepPodSettings
from towline.runtime import operator as operator_module
from towline.runtime.config import OperatorConfig
from towline.runtime.operator import Operator


class Recorder:
    """Stands in for the Lease's hand-over and the connection's close: counts them (no API server is asked)."""

    def __init__(self) -> None:
        self.released = 0
        self.closed = 0

    async def release(self) -> None:
        self.released += 1

    async def close(self) -> None:
        self.closed += 1


def operator_recording(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> Operator:
    config = OperatorConfig(namespace="towline-system", identity="a", service_account="towline-operator",
                            pod_settings=StepPodSettings())
    process = Operator(config=config, connection=KubeApi(object()))
    monkeypatch.setattr(process.shards, "release", recorder.release)
    monkeypatch.setattr(process.connection, "close", recorder.close)
    return process


def test_a_stop_asked_twice_hands_the_lease_over_once_and_ends_every_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal begins the stop and kopf's cleanup asks for it again (towline.runtime.wiring.serve)."""
    recorder = Recorder()

    async def scenario() -> list[bool]:
        process = operator_recording(recorder, monkeypatch)
        async def worker() -> None:
            await asyncio.Event().wait()

        process.tasks.append(asyncio.create_task(worker(), name="a-worker"))
        await asyncio.gather(process.stop(), process.stop())
        await process.stop()
        return [task.cancelled() for task in process.tasks]

    assert asyncio.run(scenario()) == [True]
    assert (recorder.released, recorder.closed) == (1, 1)


def test_a_task_that_will_not_end_does_not_keep_the_lease_from_its_hand_over(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    monkeypatch.setattr(operator_module, "STOP_GRACE_SECONDS", 0.05)

    async def scenario() -> tuple[bool, bool, int]:
        process = operator_recording(recorder, monkeypatch)
        went_on, let_go = asyncio.Event(), asyncio.Event()

        async def stubborn() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                went_on.set()  # swallows the stop's cancel, ends only when let go
                await let_go.wait()

        process.tasks.append(asyncio.create_task(stubborn(), name="stubborn"))
        await asyncio.sleep(0)
        await process.stop()
        outcome = (went_on.is_set(), process.tasks[0].done(), recorder.released)
        let_go.set()
        await process.tasks[0]
        return outcome

    assert asyncio.run(scenario()) == (True, False, 1)


def test_a_stop_cancelling_a_pass_that_lost_its_lease_ends_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass whose Lease lapsed is cancelled and waited for; a stop cancelling the worker meanwhile must end the
    worker, not be taken for the pass's own cancel (a worker going on would keep the stop from the Lease)."""
    recorder = Recorder()

    async def scenario() -> tuple[bool, bool]:
        process = operator_recording(recorder, monkeypatch)
        monkeypatch.setattr(process.shards, "holds", lambda namespace: False)
        monkeypatch.setattr(process.shards, "seconds_left", lambda namespace: 0.0)
        cancelled_once, let_go = asyncio.Event(), asyncio.Event()

        async def slow_to_end() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled_once.set()
                await let_go.wait()  # cleaning up after the cancel
                raise

        worker = asyncio.create_task(process._while_leading("team", slow_to_end()))
        await cancelled_once.wait()
        worker.cancel()  # the stop, while the pass is still ending
        await asyncio.sleep(0)
        let_go.set()
        await asyncio.wait({worker})
        return worker.cancelled(), worker.done()

    assert asyncio.run(scenario()) == (True, True)
