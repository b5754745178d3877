"""Namespaces hashed into shards, the shard Leases' names, the settings and the per-namespace write fence.

The electors against the real API server (several replicas, kills and pauses) are
tests/integration/test_operator_shards.py.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter

import pytest

from towline.k8s.client import KubeApi, WriteFenced
from towline.k8s.shards import ShardElectors, fair_share, namespace_of_path, shard_lease_name, shard_of
from towline.runtime.config import OperatorConfig, shard_settings


def test_a_namespace_s_shard_is_sha256_of_its_name_so_every_process_and_version_agrees() -> None:
    for namespace in ("team-a", "payments", "", "x" * 63):
        expected = int.from_bytes(hashlib.sha256(namespace.encode()).digest()[:8], "big") % 3
        assert shard_of(namespace, 3) == expected
    assert shard_of("team-a", 1) == 0
    # Fixed values: a change of the hash would move namespaces between shards across an upgrade.
    assert [shard_of(f"team-{i}", 3) for i in range(8)] == [0, 1, 0, 1, 2, 1, 0, 1]
    assert {shard_of(f"bench-{i}", 3) for i in range(30)} == {0, 1, 2}


def test_thirty_namespaces_spread_over_three_shards() -> None:
    counts = Counter(shard_of(f"shards-{i}", 3) for i in range(30))
    assert sorted(counts) == [0, 1, 2]
    assert max(counts.values()) - min(counts.values()) <= 6, counts


def test_one_shard_keeps_the_single_lease_s_name_for_upgrades() -> None:
    assert shard_lease_name("towline-operator", 0, 1) == "towline-operator"
    assert [shard_lease_name("towline-operator", i, 3) for i in range(3)] == [
        "towline-operator-shard-0-of-3", "towline-operator-shard-1-of-3", "towline-operator-shard-2-of-3"]


def test_a_replica_s_fair_share_is_the_shards_over_the_replicas_rounded_up() -> None:
    assert fair_share(3, 3) == 1
    assert fair_share(3, 2) == 2
    assert fair_share(1, 2) == 1
    assert fair_share(4, 1) == 4


def test_the_namespace_a_write_lands_in() -> None:
    assert namespace_of_path("/apis/towline.dev/v1alpha1/namespaces/team/workflowruns/r/status") == "team"
    assert namespace_of_path("/apis/batch/v1/namespaces/team/jobs") == "team"
    assert namespace_of_path("/apis/towline.dev/v1alpha1/clustersteptypes/x/status") == ""
    assert namespace_of_path("/api/v1/namespaces/team") == ""  # the Namespace object itself


def test_shard_settings_default_to_one_lease_and_name_the_chart_value_when_wrong() -> None:
    assert shard_settings({}) == (1, 1)
    assert shard_settings({"TOWLINE_SHARDS": "3", "TOWLINE_REPLICAS": "2"}) == (3, 2)
    with pytest.raises(ValueError, match=r"TOWLINE_SHARDS='0' must be a whole number from 1 to 64; set "
                                         r"operator.shards in the chart values"):
        shard_settings({"TOWLINE_SHARDS": "0"})
    with pytest.raises(ValueError, match=r"TOWLINE_SHARDS='three'.*operator.shards"):
        shard_settings({"TOWLINE_SHARDS": "three"})
    with pytest.raises(ValueError, match=r"TOWLINE_REPLICAS='-1'.*operator.replicas"):
        shard_settings({"TOWLINE_REPLICAS": "-1"})
    config = OperatorConfig.from_environment({"TOWLINE_SHARDS": "3", "TOWLINE_REPLICAS": "3",
                                              "TOWLINE_REQUIRE_ISOLATION": "false"})
    assert (config.shards, config.replicas, config.lease_name) == (3, 3, "towline-operator")


def test_writes_are_fenced_by_the_shard_of_the_namespace_they_land_in() -> None:
    """A replica holding shard 0 only may write to shard 0's namespaces, and nowhere else."""
    electors = ShardElectors(KubeApi(object()), namespace="towline-system", base_name="towline-operator",
                             identity="a", shards=3, replicas=3)
    held = next(f"team-{i}" for i in range(100) if shard_of(f"team-{i}", 3) == 0)
    other = next(f"team-{i}" for i in range(100) if shard_of(f"team-{i}", 3) == 1)
    electors.electors[0]._renewed_at = electors.electors[0]._clock()  # as after a renewal
    connection = KubeApi(object()).fenced(electors.may_write)
    assert electors.holds(held) and not electors.holds(other)
    assert electors.held() == [0]
    with pytest.raises(WriteFenced, match="does not hold the Lease"):
        asyncio.run(connection.request("POST", f"/apis/batch/v1/namespaces/{other}/jobs", body={}))
    assert electors.may_write(f"/apis/batch/v1/namespaces/{held}/jobs")
    assert not electors.may_write(f"/apis/batch/v1/namespaces/{other}/jobs")


def test_with_one_shard_every_namespace_and_cluster_scoped_write_follows_the_single_lease() -> None:
    electors = ShardElectors(KubeApi(object()), namespace="towline-system", base_name="towline-operator",
                             identity="a")
    assert [elector.name for elector in electors.electors] == ["towline-operator"]
    assert not electors.may_write("/apis/towline.dev/v1alpha1/clustersteptypes/x/status")
    electors.electors[0]._renewed_at = electors.electors[0]._clock()
    assert electors.may_write("/apis/towline.dev/v1alpha1/clustersteptypes/x/status")
    assert electors.may_write("/apis/batch/v1/namespaces/anything/jobs")
