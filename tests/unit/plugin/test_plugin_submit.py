"""`run --param-file/--name/--label/--dry-run/-o`, `submit -f` and `resubmit`: what they read from files and
flags, the requester they set (always the caller), and the command lines they refuse in one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from towline.plugin import submitting
from towline.plugin.cli import build_parser, main
from towline.plugin.completion import candidates
from towline.plugin.manifests import UsageError, run_manifest

RUN = """apiVersion: towline.dev/v1alpha1
kind: WorkflowRun
metadata: {generateName: nightly-}
spec: {workflowRef: {name: nightly}, params: {n: 3}}
"""


def test_a_param_file_is_a_mapping_and_p_wins_over_it(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("env: staging\nthreshold_days: 30\n")
    (tmp_path / "p.json").write_text('{"env": "prod", "ids": [1, 2]}')
    assert submitting.param_file(str(tmp_path / "p.yaml")) == {"env": "staging", "threshold_days": 30}
    assert submitting.param_file(str(tmp_path / "p.json")) == {"env": "prod", "ids": [1, 2]}
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(UsageError, match=r"--param-file .*list\.yaml: write a mapping of param names"):
        submitting.param_file(str(tmp_path / "list.yaml"))
    with pytest.raises(UsageError, match=r"--param-file .*missing\.yaml: No such file"):
        submitting.param_file(str(tmp_path / "missing.yaml"))


def test_name_and_labels_go_into_the_manifest() -> None:
    body = submitting.named(run_manifest("nightly", {}, "carol"), "nightly-now", submitting.labels(["tier=gold"]))
    assert body["metadata"] == {"name": "nightly-now", "labels": {"tier": "gold"}}
    assert submitting.named(run_manifest("nightly", {}, "carol"), None, {})["metadata"] == \
        {"generateName": "nightly-"}
    with pytest.raises(UsageError, match="--label 'tier': write a label as KEY=VALUE"):
        submitting.labels(["tier"])


def test_submit_reads_every_document_and_sets_the_caller_as_requester(tmp_path: Path) -> None:
    (tmp_path / "runs.yaml").write_text(RUN + "---\n" + RUN.replace("n: 3", "n: 4"))
    documents = submitting.run_files([str(tmp_path / "runs.yaml")])
    assert [d["spec"]["params"]["n"] for d in documents] == [3, 4]
    assert submitting.as_caller(documents[0], "carol", "document 1")["spec"]["requestedBy"] == "carol"
    forged = {**documents[0], "spec": {**documents[0]["spec"], "requestedBy": "bob"}}
    with pytest.raises(UsageError, match=r"document 1: spec\.requestedBy is 'bob' but you are 'carol'; remove"):
        submitting.as_caller(forged, "carol", "document 1")


@pytest.mark.parametrize(("text", "says"), [
    ("kind: Workflow\nmetadata: {name: x}\n", "kind is 'Workflow'; submit creates WorkflowRuns only"),
    ("kind: WorkflowRun\nmetadata: {name: x}\nspec: {}\n", "spec.workflowRef.name is missing"),
    ("kind: WorkflowRun\nspec: {workflowRef: {name: w}}\n", "metadata.name or metadata.generateName is missing"),
    ("kind: [unclosed\n", "not YAML or JSON"),
    ("", "no WorkflowRun in it"),
])
def test_a_bad_run_file_names_the_document_and_the_field(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "run.yaml").write_text(text)
    with pytest.raises(UsageError, match=says.replace(".", r"\.").replace("[", r"\[")):
        submitting.run_files([str(tmp_path / "run.yaml")])


def test_resubmit_copies_workflow_and_given_params_never_the_requester_or_trigger() -> None:
    old = {"metadata": {"name": "nightly-x", "labels": {"tier": "gold"}},
           "spec": {"workflowRef": {"name": "nightly"}, "params": {"n": 3}, "requestedBy": "bob",
                    "trigger": {"type": "schedule"}}}
    body = submitting.resubmit_manifest(old, "carol")
    assert body["spec"] == {"workflowRef": {"name": "nightly"}, "params": {"n": 3}, "requestedBy": "carol"}
    assert body["metadata"] == {"generateName": "nightly-"}


@pytest.mark.parametrize(("argv", "says"), [
    (["run", "w", "--dry-run=server", "--wait"], "run --dry-run creates no run to follow or wait for"),
    (["resubmit", "r", "--dry-run", "client", "-f"], "resubmit --dry-run creates no run to follow"),
    (["run", "w", "-o", "json", "--follow"], "not with --follow"),
    (["run", "w", "--dry-run", "yes"], "argument --dry-run: invalid choice: 'yes'"),
    (["submit"], "the following arguments are required: -f/--filename"),
])
def test_a_bad_run_submit_or_resubmit_line_is_one_line_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err, err


def test_a_missing_param_file_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Read before any cluster call, so no kubeconfig is needed to see the mistake."""
    with pytest.raises(SystemExit) as exited:
        main(["--kubeconfig", str(tmp_path / "none"), "run", "w", "--param-file", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and "--param-file" in err and "No such file" in err, err


def test_the_new_verbs_and_flags_complete() -> None:
    assert sorted(candidates(build_parser(), ["res"])) == ["resubmit", "resume"]
    assert candidates(build_parser(), ["run", "w", "--dry-run", ""]) == ["client", "server"]
    assert candidates(build_parser(), ["run", "w", "--param-"]) == ["--param-file"]
    assert candidates(build_parser(), ["submit", "--dry-run", "s"]) == ["server"]
