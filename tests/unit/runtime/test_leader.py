"""The Lease elector with a fake clock and an in-memory Lease store that has the API server's
optimistic concurrency (a replace with a stale resourceVersion is a 409). The same elector
against the real API server, with a paused leader, is tests/integration/test_operator_ha.py."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from towline.k8s.client import ApiError, Conflict, KubeApi, WriteFenced
from towline.k8s.leader import LeaderElector, LeaderTimings
from towline.runtime.config import leader_timings_from

TIMINGS = LeaderTimings(lease_seconds=15, renew_deadline=10, retry_period=2)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class LeaseStore:
    """Leases by path, with resourceVersions; `down` makes every call fail like an unreachable server."""

    def __init__(self, clock: Clock) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.down = False
        self.clock = clock
        self.delay_replace = 0.0

    def _check(self) -> None:
        if self.down:
            raise ApiError(503, "the server is currently unable to handle the request")

    async def get(self, path: str) -> dict[str, Any] | None:
        self._check()
        found = self.leases.get(path)
        return copy.deepcopy(found) if found else None

    async def create(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        self._check()
        name = f"{path}/{body['metadata']['name']}"
        if name in self.leases:
            return copy.deepcopy(self.leases[name]), False
        self.version += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self.version)
        self.leases[name] = body
        return copy.deepcopy(body), True

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check()
        self.clock.advance(self.delay_replace)
        if self.leases[path]["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]:
            raise Conflict(409, "the object has been modified")
        self.version += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self.version)
        self.leases[path] = body
        return copy.deepcopy(body)

    def holder(self) -> str:
        return str(next(iter(self.leases.values()))["spec"]["holderIdentity"])


def elector(store: LeaseStore, clock: Clock, identity: str) -> LeaderElector:
    return LeaderElector(store, namespace="towline-system", name="towline-operator",  # type: ignore[arg-type]
                         identity=identity, timings=TIMINGS, clock=clock)


def test_a_free_lease_is_acquired_and_held_while_renewed() -> None:
    clock = Clock()
    store = LeaseStore(clock)
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert asyncio.run(a.try_once()) is True
    assert asyncio.run(b.try_once()) is False
    for _ in range(10):
        clock.advance(2)
        assert asyncio.run(a.try_once()) is True
        assert asyncio.run(b.try_once()) is False
    assert store.holder() == "a"


def test_leadership_ends_at_the_renew_deadline_without_a_renewal() -> None:
    clock = Clock()
    store = LeaseStore(clock)
    a = elector(store, clock, "a")
    asyncio.run(a.try_once())
    clock.advance(9.9)
    assert a.is_leader
    clock.advance(0.2)
    assert not a.is_leader, "the deadline (10 s) comes before the Lease (15 s) expires for others"
    assert a.seconds_left() == 0.0


def test_a_paused_leader_resumes_as_a_follower_after_another_took_over() -> None:
    clock = Clock()
    store = LeaseStore(clock)
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    asyncio.run(a.try_once())
    clock.advance(16)  # a is stopped: it renews nothing while its Lease expires
    assert asyncio.run(b.try_once()) is True
    assert store.holder() == "b"
    # a continues: before its loop has run at all, it may no longer act.
    assert not a.is_leader
    assert asyncio.run(a.try_once()) is False
    assert a.lost_leadership.is_set()
    assert not a.became_leader.is_set()
    assert store.holder() == "b"


def test_the_deadline_counts_from_when_the_renewal_was_sent() -> None:
    clock = Clock()
    store = LeaseStore(clock)
    a = elector(store, clock, "a")
    asyncio.run(a.try_once())
    store.delay_replace = 6  # the renewal's answer takes 6 s
    clock.advance(2)
    asyncio.run(a.try_once())
    assert a.seconds_left() == pytest.approx(10 - 6)


def test_an_unreachable_server_keeps_the_leader_only_until_its_deadline() -> None:
    clock = Clock()
    store = LeaseStore(clock)
    a = elector(store, clock, "a")
    asyncio.run(a.try_once())
    store.down = True
    clock.advance(5)
    assert asyncio.run(a.try_once()) is True
    clock.advance(6)
    assert asyncio.run(a.try_once()) is False
    assert a.lost_leadership.is_set()


def test_the_election_loop_outlives_an_attempt_that_fails_in_an_unforeseen_way() -> None:
    """A failure that is no ApiError (a transport bug, a proxy's HTML) must not end the loop:
    an elector whose task died would never renew again, and no replica would ever lead."""
    clock = Clock()
    store = LeaseStore(clock)
    a = LeaderElector(store, namespace="towline-system", name="towline-operator",  # type: ignore[arg-type]
                      identity="a", timings=LeaderTimings(lease_seconds=15, renew_deadline=10, retry_period=0.01),
                      clock=clock)
    real_get = store.get

    async def broken_get(path: str) -> dict[str, Any] | None:
        raise RuntimeError("not JSON: <html>bad gateway</html>")

    async def scenario() -> None:
        task = asyncio.create_task(a.run())
        await asyncio.sleep(0.05)
        assert a.is_leader
        store.get = broken_get  # type: ignore[method-assign]
        clock.advance(11)
        await asyncio.sleep(0.05)
        assert not task.done(), "the loop goes on"
        assert not a.is_leader and a.lost_leadership.is_set()
        store.get = real_get  # type: ignore[method-assign]
        await asyncio.sleep(0.05)
        assert a.is_leader, "it leads again once the attempts succeed"
        task.cancel()

    asyncio.run(scenario())


def test_a_lost_race_for_the_lease_is_a_conflict_not_two_leaders() -> None:
    clock = Clock()
    store = LeaseStore(clock)
    asyncio.run(elector(store, clock, "a").try_once())
    clock.advance(16)
    b, c = elector(store, clock, "b"), elector(store, clock, "c")
    stale = asyncio.run(store.get("/apis/coordination.k8s.io/v1/namespaces/towline-system/leases/towline-operator"))
    assert stale is not None
    assert asyncio.run(b.try_once()) is True
    # c read the Lease before b's write and replaces with that resourceVersion: the store refuses.
    with pytest.raises(Conflict):
        asyncio.run(store.replace(
            "/apis/coordination.k8s.io/v1/namespaces/towline-system/leases/towline-operator", stale))
    assert asyncio.run(c.try_once()) is False
    assert store.holder() == "b"


def lease(store: LeaseStore) -> dict[str, Any]:
    spec: dict[str, Any] = next(iter(store.leases.values()))["spec"]
    return spec


def test_a_released_lease_is_taken_by_another_replica_at_once() -> None:
    clock = Clock()
    store = LeaseStore(clock)
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    asyncio.run(a.try_once())
    clock.advance(1)
    assert asyncio.run(b.try_once()) is False, "held and fresh: b waits"
    assert asyncio.run(a.release()) is True
    assert not a.is_leader
    assert a.lost_leadership.is_set()
    assert lease(store)["holderIdentity"] is None
    assert lease(store)["leaseDurationSeconds"] == 1
    # No time passes: without the release b would wait until a's 15 s Lease expired.
    assert asyncio.run(b.try_once()) is True
    assert lease(store)["holderIdentity"] == "b"
    assert lease(store)["leaseTransitions"] == 1
    assert lease(store)["leaseDurationSeconds"] == 15


def test_release_never_gives_up_a_lease_another_replica_holds() -> None:
    clock = Clock()
    store = LeaseStore(clock)
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    asyncio.run(a.try_once())
    clock.advance(16)  # a was paused; b took over
    assert asyncio.run(b.try_once()) is True
    assert asyncio.run(a.release()) is False
    assert lease(store)["holderIdentity"] == "b"
    assert asyncio.run(b.try_once()) is True


def test_a_release_the_server_refuses_still_ends_acting_and_the_lease_expires_as_usual() -> None:
    clock = Clock()
    store = LeaseStore(clock)
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    asyncio.run(a.try_once())
    store.down = True
    assert asyncio.run(a.release()) is False
    assert not a.is_leader
    store.down = False
    assert lease(store)["holderIdentity"] == "a"
    assert asyncio.run(b.try_once()) is False
    clock.advance(16)
    assert asyncio.run(b.try_once()) is True


@pytest.mark.parametrize(("timings", "words"), [
    (LeaderTimings(lease_seconds=10, renew_deadline=10, retry_period=2), "below the Lease duration"),
    (LeaderTimings(lease_seconds=15, renew_deadline=10, retry_period=10), "below the renew deadline"),
])
def test_timings_that_would_let_two_replicas_act_are_refused(timings: LeaderTimings, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        LeaderElector(None, namespace="n", name="l", identity="a", timings=timings)  # type: ignore[arg-type]


def test_timings_come_from_the_environment_and_bad_ones_name_the_variable() -> None:
    timings = leader_timings_from({"TOWLINE_LEASE_DURATION_SECONDS": "30", "TOWLINE_LEASE_RENEW_DEADLINE_SECONDS": "20",
                                   "TOWLINE_LEASE_RETRY_PERIOD_SECONDS": "4"})
    assert timings == LeaderTimings(30, 20, 4)
    with pytest.raises(ValueError, match="TOWLINE_LEASE_RETRY_PERIOD_SECONDS='soon' is not a number"):
        leader_timings_from({"TOWLINE_LEASE_RETRY_PERIOD_SECONDS": "soon"})
    with pytest.raises(ValueError, match=r"TOWLINE_LEASE_RENEW_DEADLINE_SECONDS.*below the Lease duration"):
        leader_timings_from({"TOWLINE_LEASE_RENEW_DEADLINE_SECONDS": "20"})


def test_a_fenced_connection_refuses_writes_before_they_leave_the_process() -> None:
    leading = [True]
    connection = KubeApi(object()).fenced(lambda path: leading[0])
    leading[0] = False
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        with pytest.raises(WriteFenced, match="does not hold the Lease"):
            asyncio.run(connection.request(method, "/api/v1/namespaces/team/configmaps/x", body={}))


def test_a_renewal_that_lands_after_the_deadline_counts_as_a_loss_and_a_new_acquisition(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The deadline passed while the renewal was on its way: passes were cancelled meanwhile, so the
    replica must go through lost and acquired again (whoever waits for a new leader requeues every key),
    not carry on as if it had led throughout."""
    clock = Clock()
    store = LeaseStore(clock)
    leader = elector(store, clock, "a")

    async def scenario() -> None:
        assert await leader.try_once()
        clock.advance(8)
        store.delay_replace = 3  # answered 11 s after the last renewal: past the 10 s deadline
        caplog.clear()
        with caplog.at_level("INFO"):
            assert await leader.try_once()
        assert leader.became_leader.is_set() and not leader.lost_leadership.is_set()

    asyncio.run(scenario())
    messages = [record.getMessage() for record in caplog.records]
    assert messages == ["lost leadership as a; stopping all actions", "acquired leadership as a"], messages
