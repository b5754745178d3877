"""The side-by-side benchmark gives Argo Workflows the same DAG shapes Towline runs, and reads process CPU right."""

from __future__ import annotations

import os
from pathlib import Path

from tests.bench.argoload import argo_workflow
from tests.bench.scaleload import chain, fan_out_in
from tests.bench.simcluster import cpu_seconds


def _dependencies(shape_manifest: dict[str, object]) -> dict[str, list[str]]:
    (dag,) = [t for t in shape_manifest["spec"]["templates"] if "dag" in t]  # type: ignore[index, attr-defined]
    return {task["name"]: task.get("dependencies", []) for task in dag["dag"]["tasks"]}


def test_a_chain_is_a_dag_of_one_dependency_each() -> None:
    assert _dependencies(argo_workflow(chain(3), "ns", "c")) == {"s0": [], "s1": ["s0"], "s2": ["s1"]}


def test_a_fan_out_in_joins_every_middle_step() -> None:
    shape = fan_out_in(4)
    found = _dependencies(argo_workflow(shape, "ns", "f"))
    assert len(found) == shape.steps == 6
    assert found["join"] == ["m0", "m1", "m2", "m3"]
    assert all(found[f"m{i}"] == ["start"] for i in range(4))


def test_every_task_is_the_one_container_template() -> None:
    manifest = argo_workflow(chain(2), "ns", "c")
    templates = {t["name"]: t for t in manifest["spec"]["templates"]}
    assert set(templates) == {"dag", "step"}
    assert "container" in templates["step"]
    assert {task["template"] for task in templates["dag"]["dag"]["tasks"]} == {"step"}


def test_cpu_seconds_reads_this_process() -> None:
    spent = cpu_seconds(os.getpid())
    times = os.times()
    assert 0 < spent <= times.user + times.system + 0.05
    assert Path(f"/proc/{os.getpid()}/stat").is_file()
