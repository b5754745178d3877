"""The editor's text checks: bounded YAML, problems at field paths, YAML normalised for a diff, GitOps owners."""

from __future__ import annotations

import time

import pytest

from towline.plugin.ui.editorcheck import (
    MAX_YAML_BYTES,
    MAX_YAML_NODES,
    Problem,
    YamlRefused,
    document_problems,
    load_document,
    managed_by,
    normalised,
    refusal_problems,
    secret_paths,
    spec_path,
    unified_diff,
)

WORKFLOW = {
    "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "deploy", "namespace": "team"},
    "spec": {
        "triggers": [{"name": "push", "webhook": {"verify": {"scheme": "standard-webhooks",
                                                             "secretRef": {"name": "hook-key", "key": "k"}}}}],
        "steps": [
            {"id": "call", "action": "http.request", "with": {"url": "https://api.example.com/"}},
            {"id": "tell", "action": "notify.slack", "credentials": {"slack": "x"}, "with": {"text": "hi"}},
        ],
        "finally": [{"id": "bye", "action": "notify.slack", "credentials": {"slack": "x", "other": "y"}}],
    },
}


def billion_laughs(levels: int = 9) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        previous = chr(ord("a") + level - 1)
        name = chr(ord("a") + level)
        lines.append(f"{name}: &{name} [{','.join(['*' + previous] * 9)}]")
    return "\n".join(lines) + "\n"


def test_a_workflow_reads_as_its_document() -> None:
    text = "apiVersion: towline.dev/v1alpha1\nkind: Workflow\nmetadata: {name: deploy}\nspec:\n  steps: []\n"
    assert load_document(text) == {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                                   "metadata": {"name": "deploy"}, "spec": {"steps": []}}


def test_a_parse_error_names_its_line() -> None:
    with pytest.raises(YamlRefused, match=r"line 3, column \d+: mapping values are not allowed"):
        load_document("kind: Workflow\nspec:\n  steps: x: y\n")


def test_a_billion_laughs_is_refused_quickly_naming_the_aliases() -> None:
    started = time.perf_counter()
    with pytest.raises(YamlRefused, match=f"more than {MAX_YAML_NODES} values.*aliases"):
        load_document(billion_laughs())
    assert time.perf_counter() - started < 2.0, "refused after composing, before any expansion"


def test_an_alias_that_contains_itself_is_refused() -> None:
    with pytest.raises(YamlRefused, match="contains it"):
        load_document("a: &a [1, *a]\n")


def test_deep_nesting_and_long_text_and_several_documents_are_refused() -> None:
    with pytest.raises(YamlRefused, match="deeper than 64"):
        load_document("[" * 200 + "]" * 200)
    with pytest.raises(YamlRefused, match="longer than 1024 KiB"):
        load_document("a: " + "x" * MAX_YAML_BYTES)
    with pytest.raises(YamlRefused, match="more than one YAML document"):
        load_document("a: 1\n---\nb: 2\n")
    with pytest.raises(YamlRefused, match="empty"):
        load_document("# nothing\n")


def test_python_tags_are_not_constructed() -> None:
    with pytest.raises(YamlRefused, match="python/object"):
        load_document("!!python/object/apply:os.system ['true']\n")


def test_a_document_that_is_no_workflow_is_named_at_its_fields() -> None:
    problems = document_problems({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})
    assert [p.path for p in problems] == ["apiVersion", "kind", "metadata.name", "spec"]
    assert document_problems(WORKFLOW) == []
    assert document_problems(["a"])[0].path == ""


def test_the_offline_validators_fields_become_document_paths() -> None:
    assert spec_path("steps[1].with.url") == "spec.steps[1].with.url"
    assert spec_path("spec.triggers[0]") == "spec.triggers[0]"
    assert spec_path("") == "spec"


def test_a_schema_refusal_puts_each_cause_on_its_field() -> None:
    body = {"kind": "Status", "reason": "Invalid", "details": {"causes": [
        {"reason": "FieldValueInvalid", "message": "Invalid value: 0: must be at least 1",
         "field": "spec.steps[0].timeoutSeconds"},
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.steps[1].id"},
    ]}}
    problems = refusal_problems(422, 'Workflow.towline.dev "deploy" is invalid: [...]', body, WORKFLOW)
    assert problems == [
        Problem("spec.steps[0].timeoutSeconds", "Invalid value: 0: must be at least 1", "schema"),
        Problem("spec.steps[1].id", "Required value", "schema"),
    ]


def test_the_credentials_policys_refusal_lands_on_every_field_naming_the_secret() -> None:
    message = ("admission webhook denied: ValidatingAdmissionPolicy 'towline-workflow-credentials' denied request: "
               "alice may not get Secret x in namespace team, which this Workflow names (...)")
    problems = refusal_problems(403, message, {"kind": "Status", "reason": "Forbidden"}, WORKFLOW)
    assert [p.path for p in problems] == ["spec.steps[1].credentials.slack", "spec.finally[0].credentials.slack"]
    assert all(p.message == message and p.source == "admission" for p in problems), "the message is kept whole"
    # As the API server sends it: the policy's message also as a cause without a field.
    body = {"kind": "Status", "reason": "Forbidden", "details": {"causes": [{"message": message, "field": ""}]}}
    assert refusal_problems(403, message, body, WORKFLOW) == problems


def test_a_refusal_naming_a_field_in_its_words_lands_there_and_one_naming_none_at_the_top() -> None:
    named = refusal_problems(403, "spec.steps[0].with.url: images outside the allowed prefixes", {}, WORKFLOW)
    assert named == [Problem("spec.steps[0].with.url", "spec.steps[0].with.url: images outside the allowed "
                                                       "prefixes", "admission")]
    plain = refusal_problems(403, 'workflows.towline.dev "deploy" is forbidden: User "bob" cannot patch', {}, WORKFLOW)
    assert plain == [Problem("", 'workflows.towline.dev "deploy" is forbidden: User "bob" cannot patch',
                             "admission")]


def test_secret_paths_follow_every_field_that_names_a_secret() -> None:
    assert secret_paths(WORKFLOW, "hook-key") == ["spec.triggers[0].webhook.verify.secretRef.name"]
    assert secret_paths(WORKFLOW, "y") == ["spec.finally[0].credentials.other"]
    assert secret_paths(WORKFLOW, "nobody") == []


def test_normalised_yaml_is_the_same_for_the_same_document_however_it_was_written() -> None:
    flow = load_document("kind: Workflow\nmetadata: {name: a, labels: {x: 'y'}}\nspec: {steps: [{id: s}]}\n")
    block = load_document("kind: Workflow\nmetadata:\n  name: a\n  labels:\n    x: y  # a comment\n"
                          "spec:\n  steps:\n  - id: s\n")
    assert normalised(flow) == normalised(block)
    shared = load_document("a: &x {k: 1}\nb: *x\n")
    assert "&" not in normalised(shared) and "*" not in normalised(shared), "aliases are written out"


def test_a_diff_shows_only_what_changed() -> None:
    before = normalised({"kind": "Workflow", "spec": {"steps": [{"id": "a"}]}})
    after = normalised({"kind": "Workflow", "spec": {"steps": [{"id": "b"}]}})
    diff = unified_diff(before, after, before_name="live", after_name="editor")
    assert "-  - id: a\n" in diff and "+  - id: b\n" in diff and "kind: Workflow" in diff
    assert unified_diff(before, before, before_name="live", after_name="editor") == ""


def test_argo_cd_and_flux_are_recognised_by_what_they_write() -> None:
    argocd = {"labels": {"app.kubernetes.io/instance": "team-apps"},
              "annotations": {"argocd.argoproj.io/tracking-id": "team-apps:towline.dev/Workflow:team/deploy"}}
    assert managed_by(argocd) == "argocd"
    assert managed_by({"labels": {"kustomize.toolkit.fluxcd.io/name": "apps"}}) == "flux"
    assert managed_by({"labels": {"helm.toolkit.fluxcd.io/name": "apps"}}) == "flux"
    assert managed_by({"labels": {"app.kubernetes.io/instance": "my-release"}}) is None, "Helm sets it too"
    assert managed_by({}) is None
