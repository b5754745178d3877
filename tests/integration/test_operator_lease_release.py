"""A gracefully stopped operator (SIGTERM) gives its Lease up: the other replica takes over at once.

The pair runs with a 60 s Lease. Without the release the follower could take
the Lease only once it expired, 60 s after the leader's last renewal; with it,
the follower's acquireTime follows the leader's last renewal by about the time
the leader took to stop plus one retry period. The test compares the Lease's
own times (written by the replicas), not the test's clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from tests.integration.replicas import lease_of, replica_of
from tests.integration.support import wait_for

from towline_connectors.wire import parse_rfc3339
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

# Concurrent: the pair are copies of this worker's operator, on its own Lease.
pytestmark = pytest.mark.integration

LONG_LEASE = {"TOWLINE_LEASE_DURATION_SECONDS": "60", "TOWLINE_LEASE_RENEW_DEADLINE_SECONDS": "40",
              "TOWLINE_LEASE_RETRY_PERIOD_SECONDS": "1"}


@pytest.fixture
def long_lease_pair(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, tmp_path: Path,
) -> Iterator[tuple[OperatorProcess, ...]]:
    """Two replicas with a 60 s Lease in place of the session's operator."""
    towline_operator.stop()
    pair = tuple(replica_of(towline_operator, f"{towline_operator.identity}-long-{i}", tmp_path / f"replica-{i}.log",
                            **LONG_LEASE).start()
                 for i in range(2))
    yield pair
    for replica in pair:
        replica.stop()
    towline_operator.start()
    wait_for("the session's operator to take the Lease back",
             lambda: lease_of(towline_installed, towline_operator).get("holderIdentity") == towline_operator.identity,
             timeout=90)


def test_a_gracefully_stopped_leader_hands_the_lease_over_well_before_it_expires(
    long_lease_pair: tuple[OperatorProcess, ...], towline_installed: ControlPlane,
) -> None:
    cluster, either = towline_installed, long_lease_pair[0]  # both of the pair elect on one Lease
    identities = {replica.identity for replica in long_lease_pair}
    wait_for("a replica of the pair to hold the Lease",
             lambda: lease_of(cluster, either).get("holderIdentity") in identities, timeout=90)
    before = lease_of(cluster, either)
    leader = next(r for r in long_lease_pair if r.identity == before["holderIdentity"])
    follower = next(r for r in long_lease_pair if r is not leader)
    assert before["leaseDurationSeconds"] == 60

    leader.stop()  # SIGTERM: kopf's cleanup stops the operator
    wait_for("the follower to take the Lease",
             lambda: lease_of(cluster, either).get("holderIdentity") == follower.identity, timeout=120)

    after = lease_of(cluster, either)
    taken_after = parse_rfc3339(after["acquireTime"]) - parse_rfc3339(before["renewTime"])
    print(f"the follower took the released Lease {taken_after.total_seconds():.2f} s after the last renewal seen")
    # The leader renewed at or after `before`; an unreleased Lease is free only 60 s after that.
    assert taken_after < timedelta(seconds=30), f"the follower took the Lease {taken_after} after the last renewal"
    assert after["leaseTransitions"] == before.get("leaseTransitions", 0) + 1
    assert after["leaseDurationSeconds"] == 60
    assert "released the Lease as " + leader.identity in leader.log_text()
