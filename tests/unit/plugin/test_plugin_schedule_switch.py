"""`kubectl towline schedule suspend|resume WORKFLOW [TRIGGER]` before any cluster call: which triggers it names,
which suspend annotations its field manager already holds, the GitOps marks it warns about, the command lines it
refuses in one line, its completion, and `workflows show` naming a suspended trigger."""

from __future__ import annotations

from typing import Any

import pytest
from test_plugin_workflows_view import NOW, workflow

from towline.api.schedulesuspend import FIELD_MANAGER
from towline.plugin.cli import build_parser, main
from towline.plugin.completion import candidates
from towline.plugin.manifests import UsageError
from towline.plugin.schedules import chosen_triggers, gitops_marks, owned_keys
from towline.plugin.workflowviews import workflow_detail


def test_no_trigger_means_every_schedule_trigger_and_a_webhook_is_never_one() -> None:
    assert chosen_triggers(workflow("report"), None) == ["weekdays"]
    assert chosen_triggers(workflow("report"), "weekdays") == ["weekdays"]
    with pytest.raises(UsageError, match=r"TRIGGER crm_event is not a schedule trigger; .* weekdays"):
        chosen_triggers(workflow("report"), "crm_event")
    with pytest.raises(UsageError, match="TRIGGER nightly is not a trigger of it"):
        chosen_triggers(workflow("report"), "nightly")


def test_a_workflow_without_schedules_is_refused_naming_it() -> None:
    body = workflow("hooks")
    body["spec"]["triggers"] = body["spec"]["triggers"][1:]
    with pytest.raises(UsageError, match="workflow hooks has no schedule trigger"):
        chosen_triggers(body, None)


def test_only_the_annotations_its_own_manager_applied_count_as_its_own() -> None:
    body = workflow("report")
    body["metadata"]["managedFields"] = [
        {"manager": FIELD_MANAGER, "operation": "Apply", "fieldsV1": {"f:metadata": {"f:annotations": {
            "f:suspend.towline.dev/weekdays": {}}}}},
        {"manager": "argocd-controller", "operation": "Apply", "fieldsV1": {"f:metadata": {"f:annotations": {
            "f:suspend.towline.dev/monthly": {}}}}},
    ]
    assert owned_keys(body) == {"suspend.towline.dev/weekdays"}


def test_argo_cd_and_flux_marks_are_found() -> None:
    body: dict[str, Any] = workflow("report")
    assert gitops_marks(body) == []
    body["metadata"]["labels"] = {"kustomize.toolkit.fluxcd.io/name": "apps"}
    body["metadata"]["annotations"] = {"argocd.argoproj.io/tracking-id": "apps:towline.dev/Workflow:team/report"}
    assert gitops_marks(body) == ["argocd.argoproj.io/tracking-id", "kustomize.toolkit.fluxcd.io/name"]


def test_show_names_a_suspended_trigger_and_how_to_resume_it() -> None:
    body = workflow("report")
    body["metadata"]["annotations"] = {"suspend.towline.dev/weekdays": "true"}
    assert "weekdays: schedule 0 8 * * 1-5 (Europe/Berlin, Forbid); suspended (kubectl towline schedule resume " \
           "report weekdays)" in workflow_detail(body, NOW)


@pytest.mark.parametrize(("argv", "says"), [
    (["schedule", "pause", "report"], "argument suspend|resume: invalid choice: 'pause'"),
    (["schedule", "suspend"], "the following arguments are required: WORKFLOW"),
    (["schedule", "suspend", "a", "b", "c"], "unrecognized arguments: c"),
])
def test_a_bad_schedule_line_is_one_line_exit_2(argv: list[str], says: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and says in err and err.count("\n") == 1


def test_schedule_and_stop_complete() -> None:
    assert candidates(build_parser(), ["schedule", "s"]) == ["suspend"]
    assert candidates(build_parser(), ["schedule", "r"]) == ["resume"]
    assert candidates(build_parser(), ["sto"]) == ["stop"]
