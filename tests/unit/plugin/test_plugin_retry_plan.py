"""`kubectl towline retry --workflow-changed` and `retry -p`: what they ask for, checked before anything is created,
as the operator would refuse it (the same functions decide)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from towline.plugin.cli import main
from towline.plugin.manifests import UsageError
from towline.plugin.retryplan import plan_retry

STEPS: list[dict[str, Any]] = [
    {"id": "fetch", "action": "http.request", "with": {"url": "https://crm.example/${{ params.region }}"}},
    {"id": "shape", "action": "data.transform", "needs": ["fetch"], "with": {"data": {}, "fields": {"n": "1"}}},
    {"id": "push", "action": "http.request", "needs": ["shape"], "with": {"url": "https://tasks.example/"}},
]
PARAMS = [{"name": "region", "type": "string", "default": "eu"}, {"name": "env", "type": "string"}]


def workflow(steps: list[dict[str, Any]], generation: int = 2) -> dict[str, Any]:
    return {"metadata": {"name": "sync", "generation": generation, "uid": "wf-uid"},
            "spec": {"params": PARAMS, "steps": steps}}


def failed_run() -> dict[str, Any]:
    return {"metadata": {"name": "sync-x7k2p"}, "spec": {"workflowRef": {"name": "sync"}},
            "status": {"phase": "Failed", "params": {"region": "eu", "env": "staging"},
                       "workflowSpec": {"generation": 1, "uid": "wf-uid", "steps": STEPS},
                       "steps": [{"id": "fetch", "phase": "Succeeded"}, {"id": "shape", "phase": "Succeeded"},
                                 {"id": "push", "phase": "Failed"}]}}


def fixed() -> list[dict[str, Any]]:
    steps = copy.deepcopy(STEPS)
    steps[2]["with"]["url"] = "https://tasks.example/v2"
    return steps


def test_fixed_in_git_reuses_the_unchanged_succeeded_steps() -> None:
    plan = plan_retry(failed_run(), workflow(fixed()), {}, workflow_changed=True)
    assert plan.reuse == ["fetch", "shape"] and plan.rerun == {}


def test_fixed_in_git_is_refused_naming_a_succeeded_step_that_changed() -> None:
    steps = fixed()
    steps[1]["needs"] = []
    with pytest.raises(UsageError, match=r"step\(s\) shape succeeded in run sync-x7k2p but differ in workflow sync "
                                         r"now \(generation 2"):
        plan_retry(failed_run(), workflow(steps), {}, workflow_changed=True)


def test_a_changed_workflow_without_the_flag_says_to_add_it() -> None:
    with pytest.raises(UsageError, match="add --workflow-changed"):
        plan_retry(failed_run(), workflow(fixed()), {"env": "prod"}, workflow_changed=False)


def test_a_changed_param_reruns_the_steps_that_read_it_and_those_after_them() -> None:
    plan = plan_retry(failed_run(), workflow(STEPS, generation=1), {"region": "us"}, workflow_changed=False)
    assert plan.reuse == [] and plan.rerun == {"fetch": ["region"], "shape": []}
    plan = plan_retry(failed_run(), workflow(STEPS, generation=1), {"env": "prod"}, workflow_changed=False)
    assert plan.reuse == ["fetch", "shape"]


def test_a_param_the_workflow_does_not_allow_is_refused_naming_the_flag() -> None:
    with pytest.raises(UsageError, match=r"-p colour: spec\.params\.colour: the workflow declares no such param"):
        plan_retry(failed_run(), workflow(STEPS, generation=1), {"colour": "red"}, workflow_changed=False)
    with pytest.raises(UsageError, match=r"-p region: spec\.params region: expected string, got int"):
        plan_retry(failed_run(), workflow(STEPS, generation=1), {"region": 3}, workflow_changed=False)


def test_a_bad_param_flag_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["retry", "sync-x7k2p", "-p", "novalue"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and "novalue" in err
