"""Two operator replicas: one Lease holder acts, the other takes over when it dies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.replicas import lease_holder, replica_of
from tests.integration.support import apply, get, list_objects, start_run, wait_for, wait_for_phase

from towline.engine.naming import STEP_JOB_PREFIX
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

# Concurrent: the replicas are copies of this worker's operator, on its own Lease and namespaces.
pytestmark = pytest.mark.integration


@pytest.fixture
def second_replica(towline_operator: OperatorProcess, tmp_path: Path) -> Iterator[OperatorProcess]:
    replica = replica_of(towline_operator, f"{towline_operator.identity}-1", tmp_path / "replica.log").start()
    yield replica
    replica.stop()
    if towline_operator.process is None or towline_operator.process.poll() is not None:
        towline_operator.start()


def test_only_the_lease_holder_acts_and_the_other_replica_takes_over(
    towline_operator: OperatorProcess, second_replica: OperatorProcess, towline_installed: ControlPlane,
    team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    steps = [{"id": f"s{i}", "action": "data.transform", "with": {"data": {}, "fields": {"i": str(i)}},
              **({"needs": [f"s{i - 1}"]} if i else {})} for i in range(3)]
    apply(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                    "metadata": {"name": "chain", "namespace": ns}, "spec": {"steps": steps}})
    first_holder = wait_for("a Lease holder", lambda: lease_holder(cluster, towline_operator))
    start_run(cluster, ns, "chain", "ha-1")
    assert wait_for_phase(cluster, ns, "ha-1", {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"
    jobs = list_objects(cluster, "jobs", ns, "towline.dev/run=ha-1")
    assert sorted(j["metadata"]["name"] for j in jobs) == [f"{STEP_JOB_PREFIX}ha-1-s{i}-1" for i in range(3)]
    assert lease_holder(cluster, towline_operator) == first_holder, "leadership is stable while the holder lives"

    leader = towline_operator if first_holder == towline_operator.identity else second_replica
    follower = second_replica if leader is towline_operator else towline_operator
    leader.kill()
    start_run(cluster, ns, "chain", "ha-2")
    wait_for("the other replica to take the Lease",
             lambda: lease_holder(cluster, towline_operator) == follower.identity, timeout=60)
    assert wait_for_phase(cluster, ns, "ha-2", {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"


SHORT_LEASE = {"TOWLINE_LEASE_DURATION_SECONDS": "6", "TOWLINE_LEASE_RENEW_DEADLINE_SECONDS": "4",
               "TOWLINE_LEASE_RETRY_PERIOD_SECONDS": "1"}


@pytest.fixture
def short_lease_pair(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, tmp_path: Path,
) -> Iterator[tuple[OperatorProcess, ...]]:
    """Two replicas with a 6 s Lease (renew deadline 4 s) in place of the session's operator."""
    towline_operator.stop()
    pair = tuple(replica_of(towline_operator, f"{towline_operator.identity}-short-{i}",
                            tmp_path / f"replica-{i}.log", **SHORT_LEASE).start()
                 for i in range(2))
    yield pair
    for replica in pair:
        replica.resume()
        replica.stop()
    towline_operator.start()
    # The next test expects the session's operator to lead; the pair's Lease lapses within 6 s.
    wait_for("the session's operator to take the Lease back",
             lambda: lease_holder(towline_installed, towline_operator) == towline_operator.identity, timeout=60)


def test_a_paused_leader_is_replaced_and_does_not_act_when_it_continues(
    short_lease_pair: tuple[OperatorProcess, ...], towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    steps = [{"id": f"s{i}", "action": "data.transform", "with": {"data": {}, "fields": {"i": str(i)}},
              **({"needs": [f"s{i - 1}"]} if i else {})} for i in range(3)]
    apply(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                    "metadata": {"name": "chain", "namespace": ns}, "spec": {"steps": steps}})
    identities = {replica.identity for replica in short_lease_pair}
    either = short_lease_pair[0]  # both of the pair elect on the same Lease
    holder = wait_for("a Lease holder",
                      lambda: lease_holder(cluster, either) in identities and lease_holder(cluster, either))
    leader = next(r for r in short_lease_pair if r.identity == holder)
    follower = next(r for r in short_lease_pair if r is not leader)

    # Paused just as a run arrives: the leader may be in the middle of its first pass.
    start_run(cluster, ns, "chain", "paused")
    leader.pause()
    wait_for("the follower to take the Lease", lambda: lease_holder(cluster, either) == follower.identity, timeout=60)
    assert wait_for_phase(cluster, ns, "paused", {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"
    finished = get(cluster, "workflowrun", "paused", ns)
    assert finished is not None

    leader.resume()
    wait_for("the continued replica to step down",
             lambda: f"lost leadership as {leader.identity}" in leader.log_text(), timeout=30)
    start_run(cluster, ns, "chain", "after")
    assert wait_for_phase(cluster, ns, "after", {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"

    for run in ("paused", "after"):
        jobs = list_objects(cluster, "jobs", ns, f"towline.dev/run={run}")
        assert sorted(j["metadata"]["name"] for j in jobs) == [f"{STEP_JOB_PREFIX}{run}-s{i}-1" for i in range(3)]
    again = get(cluster, "workflowrun", "paused", ns)
    assert again is not None
    assert again["metadata"]["resourceVersion"] == finished["metadata"]["resourceVersion"], "no later status write"
    assert lease_holder(cluster, either) == follower.identity
    resumed_log = leader.log_text().split(f"lost leadership as {leader.identity}", 1)[1]
    assert "acquired leadership" not in resumed_log
