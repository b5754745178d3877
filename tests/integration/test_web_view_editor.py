"""The visual editor in a real browser (headless Chromium) against the real API server, as alice.

alice writes Workflows in her namespace (towline-workflow-author) and may read two Secrets by name; she may not
read `payroll-token`. Through her own `kubectl towline ui` she builds the README's first workflow by clicking,
downloads it and kubectl takes it; every example downloads unchanged byte for byte, also after a round trip
through the graph; the admission policy's refusal of a Secret she may not read and a StepType input that breaks
its schema are shown on their fields before anything is applied; a draft survives a reload.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from selenium.common.exceptions import ElementNotInteractableException, StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select
from tests.integration.browsersupport import page_state, screenshot, wait_for_element
from tests.integration.browsersupport import until as until_shown
from tests.integration.support import apply, bind_role, wait_for

from towline_dev import REPO_ROOT
from towline_dev.browser import WebView, headless_chromium, web_view
from towline_dev.controlplane import ControlPlane
from towline_dev.kubeconfig import context_name
from towline_dev.release import STEP_TYPE_IMAGE_PREFIX

pytestmark = [pytest.mark.integration]

READABLE_SECRETS = ("release-webhook", "releases-slack")
EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.yaml"))


def readme_first_workflow() -> tuple[str, dict[str, Any]]:
    """The README's first workflow (Writing workflows): its text and its parse."""
    text = (REPO_ROOT / "README.md").read_text()
    found = re.search(r"```yaml\n(apiVersion: towline\.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: "
                      r"deploy-on-release\n.*?)```", text, re.DOTALL)
    assert found, "README.md's Writing workflows starts with the deploy-on-release Workflow"
    return found.group(1), yaml.safe_load(found.group(1))


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Any]:
    with headless_chromium(print, width=1700, height=1000) as driver:
        yield driver


@pytest.fixture
def author_namespace(towline_installed: ControlPlane, shown_namespace: str) -> str:
    cluster, namespace = towline_installed, shown_namespace
    bind_role(cluster, namespace, "towline-workflow-author", users=("alice",))
    apply(cluster, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": "read-two-secrets", "namespace": namespace},
                    "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                               "resourceNames": list(READABLE_SECRETS)}]})
    apply(cluster, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "read-two-secrets", "namespace": namespace},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-two-secrets"},
                    "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]})
    apply(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "StepType",
                    "metadata": {"name": "batch", "namespace": namespace},
                    "spec": {"image": f"{STEP_TYPE_IMAGE_PREFIX}/batch:dev",
                             "inputs": {"type": "object", "required": ["size"], "additionalProperties": False,
                                        "properties": {"size": {"type": "integer", "minimum": 1, "maximum": 50}}}}})
    return namespace


@pytest.fixture
def alice(towline_installed: ControlPlane, author_namespace: str) -> Iterator[WebView]:
    with web_view(towline_installed.kubeconfig, context_name("alice"), author_namespace) as view:
        yield view


def open_editor(driver: Any, view: WebView, path: str) -> None:
    driver.get(view.url(path))

    def ready(d: Any) -> bool:
        if d.find_elements(By.CSS_SELECTOR, 'body[data-editor-ready="true"]'):
            return True
        # A module Chromium dropped in flight (ERR_NETWORK_CHANGED: a pod's veth came or went on the node beside
        # the browser) leaves the page naming it with its button; a person presses it, and so does the test (the
        # page's own handling is test_a_module_that_does_not_arrive_is_named_with_a_way_to_load_the_editor_again).
        for again in d.find_elements(By.ID, "editor-reload"):
            again.click()
        return False

    until(driver, ready, f"the editor at {path}", 120)
    driver.execute_script("window.editorErrors = []; addEventListener('error', (e) => editorErrors.push(e.message)); "
                          "addEventListener('unhandledrejection', (e) => editorErrors.push(String(e.reason)));")


def until(driver: Any, holds: Any, what: str, timeout: float = 60) -> None:
    """Wait until `holds(driver)`; failing, also say what the editor's status line, problems and script said."""
    try:
        until_shown(driver, holds, what, timeout)
    except AssertionError as error:
        said = driver.execute_script(
            "const t = (s) => (document.querySelector(s) || {}).textContent || ''; return [t('#editor-status'), "
            "t('#editor-problems'), t('#editor-output'), (document.querySelector('#editor-yaml') || {}).value, "
            "window.editorErrors || []];")
        error.add_note(f"the editor said: {said!r}")
        raise


def again_if_redrawn(act: Any) -> Any:
    """Do `act` once more when the validation's answer redrew the element between finding and using it (an answer
    with new problems redraws the graph and the form; a person's next click finds the new element)."""
    for _ in range(4):
        try:
            return act()
        except (StaleElementReferenceException, ElementNotInteractableException):
            continue
    return act()


def typed(driver: Any, path: str, text: str) -> None:
    """Type into the field of `path` (what it held is replaced, as a person selects it and types)."""
    def type_once() -> None:
        box = wait_for_element(driver, f'[data-path="{path}"]', f"the field {path}", 30)
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(text)
    again_if_redrawn(type_once)


def drag_edge(driver: Any, source: str, target: str) -> None:
    """Draw an edge: from `source`'s handle onto `target`'s box (the target then needs the source)."""
    handle = driver.find_element(By.CSS_SELECTOR, f'#editor-graph g.node[data-step="{source}"] circle.handle')
    box = driver.find_element(By.CSS_SELECTOR, f'#editor-graph g.node[data-step="{target}"] rect')
    ActionChains(driver).click_and_hold(handle).move_to_element(box).release().perform()


def downloaded(driver: Any, directory: Path) -> bytes:
    """Press Download and read the file Chromium saved into `directory` (empty before).

    Chromium reserves the file's name with an empty file while the bytes go to a `.crdownload` beside it, then
    renames that over it: the download is done when no `.crdownload` is left and the file has bytes (no Workflow
    downloads empty; reading the placeholder once gave a round trip of nothing)."""
    directory.mkdir(parents=True)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(directory)})
    driver.find_element(By.CSS_SELECTOR, "#editor-download").click()

    def finished() -> list[Path]:
        files = list(directory.iterdir())
        saved = [p for p in files if p.suffix == ".yaml" and p.stat().st_size > 0]
        return [] if any(p.suffix == ".crdownload" for p in files) else saved

    wait_for("the downloaded file, complete", finished, timeout=30)
    (path,) = finished()
    return path.read_bytes()


def valid(driver: Any) -> None:
    until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#editor-valid"),
          "the validation as alice accepts the Workflow (dry run included)", 90)


def test_alice_builds_the_readmes_first_workflow_by_clicking_and_kubectl_takes_the_download(
    towline_installed: ControlPlane, author_namespace: str, alice: WebView, chromium: Any, tmp_path: Path,
) -> None:
    driver, (_, expected) = chromium, readme_first_workflow()
    alice.sign_in(driver)
    open_editor(driver, alice, "/editor")
    typed(driver, "metadata.name", "deploy-on-release")
    driver.find_element(By.CSS_SELECTOR, '[data-add-trigger="webhook"]').click()
    typed(driver, "spec.triggers[0].name", "release")
    Select(driver.find_element(By.CSS_SELECTOR, '[data-path="spec.triggers[0].webhook.verify.scheme"]')) \
        .select_by_value("standard-webhooks")
    typed(driver, "spec.triggers[0].webhook.verify.secretRef.name", "release-webhook")
    typed(driver, "spec.triggers[0].webhook.verify.secretRef.key", "signing-secret")

    driver.find_element(By.CSS_SELECTOR, '[data-add="http.request"]').click()
    typed(driver, "spec.steps[0].id", "fetch_release")
    typed(driver, "spec.steps[0].with.url", "https://releases.example.com/api/latest")
    driver.find_element(By.CSS_SELECTOR, '[data-add="approval"]').click()
    typed(driver, "spec.steps[1].id", "review")
    typed(driver, "spec.steps[1].approval.message", "Deploy ${{ steps.fetch_release.output.body.tag }}?")
    driver.find_element(By.CSS_SELECTOR, '[data-add="notify.slack"]').click()
    typed(driver, "spec.steps[2].id", "announce")
    typed(driver, "spec.steps[2].credentials.slack", "releases-slack")
    typed(driver, "spec.steps[2].with.text", "Released ${{ steps.fetch_release.output.body.tag }}")
    again_if_redrawn(lambda: drag_edge(driver, "fetch_release", "review"))
    again_if_redrawn(lambda: drag_edge(driver, "review", "announce"))
    until(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#editor-graph path.edge[data-edge]")) == 2,
          "the two edges drawn")
    valid(driver)
    screenshot(driver, "web-view-editor.png", tmp_path)

    text = downloaded(driver, tmp_path / "download")
    assert yaml.safe_load(text) == expected, text.decode()
    assert towline_installed.kubectl("get", "workflows.towline.dev", "-n", author_namespace, "-o", "name") \
        .stdout.strip() == "", "validating (a dry run) created nothing"
    (tmp_path / "workflow.yaml").write_bytes(text)
    accepted = towline_installed.kubectl("apply", "--dry-run=server", "-n", author_namespace, "-f",
                                         str(tmp_path / "workflow.yaml"), user="alice", check=False)
    assert accepted.returncode == 0 and "Warning" not in accepted.stderr, accepted.stderr


def test_each_example_downloads_unchanged_byte_for_byte_also_after_a_round_trip_through_the_graph(
    author_namespace: str, alice: WebView, chromium: Any, tmp_path: Path,
) -> None:
    driver = chromium
    alice.sign_in(driver)
    assert len(EXAMPLES) >= 5
    for example in EXAMPLES:
        open_editor(driver, alice, f"/editor?example={example.stem}")
        assert downloaded(driver, tmp_path / example.stem / "as-opened") == example.read_bytes(), example.name

        def drag_first_step() -> str:
            node = driver.find_element(By.CSS_SELECTOR, "#editor-graph g.node")
            before = str(node.get_attribute("transform"))
            ActionChains(driver).click_and_hold(node).move_by_offset(60, 40).release().perform()
            return before
        where = again_if_redrawn(drag_first_step)
        until(driver, lambda d, w=where: d.find_element(By.CSS_SELECTOR, "#editor-graph g.node")
              .get_attribute("transform") != w, f"{example.stem}: the first step moved")
        driver.find_element(By.CSS_SELECTOR, "#editor-yaml").send_keys(Keys.CONTROL, "z")
        until(driver, lambda d, w=where: d.find_element(By.CSS_SELECTOR, "#editor-graph g.node")
              .get_attribute("transform") == w, f"{example.stem}: the move undone")
        after = downloaded(driver, tmp_path / example.stem / "round-trip")
        assert list(yaml.safe_load_all(after)) == list(yaml.safe_load_all(example.read_bytes())), example.name
        assert after == example.read_bytes(), f"{example.name}: a move is view state, never written"
        driver.execute_script("localStorage.clear()")


def field_problem(driver: Any, prefix: str) -> str:
    """The text of the first problem shown in a field whose path starts with `prefix`."""
    for shown in driver.find_elements(By.CSS_SELECTOR, "#editor-form .field-error[data-problem]"):
        if str(shown.get_attribute("data-problem")).startswith(prefix) and shown.text:
            return str(shown.text)
    return ""


def test_a_secret_alice_may_not_read_and_a_step_type_input_off_its_schema_are_shown_on_their_fields(
    towline_installed: ControlPlane, author_namespace: str, alice: WebView, chromium: Any, tmp_path: Path,
) -> None:
    driver = chromium
    alice.sign_in(driver)
    open_editor(driver, alice, "/editor")
    typed(driver, "metadata.name", "payroll-export")
    driver.find_element(By.CSS_SELECTOR, '[data-add="notify.slack"]').click()
    typed(driver, "spec.steps[0].credentials.slack", "payroll-token")
    typed(driver, "spec.steps[0].with.text", "exported")
    until(driver, lambda d: field_problem(d, "spec.steps[0].credentials"),
          "the admission policy's refusal at the credentials field", 90)
    refusal = field_problem(driver, "spec.steps[0].credentials")
    assert "payroll-token" in refusal, refusal
    screenshot(driver, "web-view-editor-refusal.png", tmp_path)

    driver.find_element(By.CSS_SELECTOR, '[data-add="steptype/batch"]').click()
    typed(driver, "spec.steps[1].with.size", "500")
    until(driver, lambda d: field_problem(d, "spec.steps[1].with"), "the StepType's schema refusal at its input", 90)
    assert towline_installed.kubectl("get", "workflows.towline.dev", "-n", author_namespace, "-o", "name") \
        .stdout.strip() == "", f"nothing was applied; {page_state(driver)}"


def test_a_module_that_does_not_arrive_is_named_with_a_way_to_load_the_editor_again(
    author_namespace: str, alice: WebView, chromium: Any,
) -> None:
    """A module of the editor the browser cannot fetch (a server too busy to answer, a file missing) makes the
    import fail: the page names the file and offers to load the editor again, instead of "Loading…" for ever."""
    driver = chromium
    alice.sign_in(driver)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/static/vendor/yaml*"]})
    driver.get(alice.url("/editor"))
    failed = wait_for_element(driver, "#editor-load-failed", "the editor's word that it could not load", 60)
    assert "/static/vendor/yaml" in failed.text, failed.text
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
    driver.find_element(By.CSS_SELECTOR, "#editor-reload").click()
    wait_for_element(driver, 'body[data-editor-ready="true"]', "the editor, loaded again", 60)
    assert not driver.find_elements(By.CSS_SELECTOR, "#editor-load-failed")


def test_a_draft_survives_a_reload(author_namespace: str, alice: WebView, chromium: Any) -> None:
    driver = chromium
    alice.sign_in(driver)
    open_editor(driver, alice, "/editor")
    driver.find_element(By.CSS_SELECTOR, '[data-add="http.request"]').click()
    typed(driver, "spec.steps[0].with.url", "https://example.com/kept")
    until(driver, lambda d: "https://example.com/kept" in d.find_element(By.CSS_SELECTOR, "#editor-yaml")
          .get_attribute("value"), "the YAML follows the form")
    driver.refresh()
    wait_for_element(driver, "#editor-draft", "the restored draft's notice", 60)
    assert "https://example.com/kept" in driver.find_element(By.CSS_SELECTOR, "#editor-yaml").get_attribute("value")
    assert driver.find_elements(By.CSS_SELECTOR, '#editor-graph g.node[data-step="request"]')


def test_a_live_workflow_argo_cd_manages_opens_unchanged_offers_no_apply_and_its_text_never_becomes_markup(
    towline_installed: ControlPlane, author_namespace: str, alice: WebView, chromium: Any, tmp_path: Path,
) -> None:
    """Whoever wrote the Workflow chose its strings: markup in them stays text in the forms and the YAML."""
    driver, marker = chromium, '<img src="x" id="injected"><script>document.title="owned"</script>'
    apply(towline_installed, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "synced", "namespace": author_namespace,
                     "annotations": {"argocd.argoproj.io/tracking-id": "team:towline.dev/Workflow:synced"}},
        "spec": {"params": [{"name": "note", "type": "string", "description": marker}],
                 "steps": [{"id": "say", "action": "data.transform",
                            "with": {"data": {"text": marker}, "fields": {"said": "data.text"}}}]}})
    alice.sign_in(driver)
    open_editor(driver, alice, "/editor/synced")
    assert "managed by Argo CD: commit the YAML to git" in driver.find_element(By.CSS_SELECTOR, "#editor-no-apply").text
    assert not driver.find_elements(By.CSS_SELECTOR, "#editor-apply"), "no Apply for a Workflow Argo CD syncs"
    live = towline_installed.kubectl("get", "workflows.towline.dev", "synced", "-n", author_namespace, "-o", "yaml")
    assert yaml.safe_load(downloaded(driver, tmp_path / "live"))["spec"] == yaml.safe_load(live.stdout)["spec"]
    driver.find_element(By.CSS_SELECTOR, "#editor-diff-live").click()
    wait_for_element(driver, "#editor-same", "no difference from the live Workflow", 30)
    typed(driver, "spec.params[0].name", "remark")
    driver.find_element(By.CSS_SELECTOR, "#editor-diff-live").click()
    until(driver, lambda d: "+    name: remark" in "".join(e.text for e in d.find_elements(
        By.CSS_SELECTOR, "#editor-diff")), "the diff against the live Workflow shows the renamed param")
    again_if_redrawn(lambda: driver.find_element(By.CSS_SELECTOR, '#editor-graph g.node[data-step="say"]').click())
    wait_for_element(driver, '[data-path="spec.steps[0].with.data"]', "the step's form")
    assert marker in driver.find_element(By.CSS_SELECTOR, "#editor-yaml").get_attribute("value")
    assert not driver.find_elements(By.CSS_SELECTOR, "#injected") and driver.title != "owned"


def test_with_apply_allowed_alice_applies_her_edit_as_herself_and_the_live_workflow_follows(
    towline_installed: ControlPlane, author_namespace: str, chromium: Any,
) -> None:
    cluster, driver = towline_installed, chromium
    apply(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                    "metadata": {"name": "nightly", "namespace": author_namespace},
                    "spec": {"steps": [{"id": "one", "action": "data.transform",
                                        "with": {"data": {}, "fields": {"one": "1"}}}]}})
    with web_view(cluster.kubeconfig, context_name("alice"), author_namespace, "--allow-apply") as view:
        view.sign_in(driver)
        open_editor(driver, view, "/editor/nightly")
        driver.find_element(By.CSS_SELECTOR, '[data-add="approval"]').click()
        typed(driver, "spec.steps[1].approval.message", "Go?")
        valid(driver)
        driver.find_element(By.CSS_SELECTOR, "#editor-apply").click()
        until(driver, lambda d: "applied as you" in d.find_element(By.CSS_SELECTOR, "#editor-output").text,
              "the apply's answer")
    live = yaml.safe_load(cluster.kubectl("get", "workflows.towline.dev", "nightly", "-n", author_namespace,
                                          "-o", "yaml", "--show-managed-fields").stdout)
    assert live["spec"]["steps"][1] == {"id": "approve", "approval": {"message": "Go?"}}
    assert "towline-editor" in {m["manager"] for m in live["metadata"]["managedFields"]}


def test_the_keyboard_moves_between_steps_deletes_one_and_undo_brings_it_back(
    author_namespace: str, alice: WebView, chromium: Any,
) -> None:
    driver = chromium
    alice.sign_in(driver)
    open_editor(driver, alice, "/editor?example=hello-towline")
    first = wait_for_element(driver, "#editor-graph g.node", "the example's first step")
    steps = [n.get_attribute("data-step") for n in driver.find_elements(By.CSS_SELECTOR, "#editor-graph g.node")]
    first.send_keys(Keys.ARROW_DOWN)
    focused = driver.switch_to.active_element.get_attribute("data-step")
    assert focused in steps and focused != steps[0], (focused, steps)
    driver.switch_to.active_element.send_keys(Keys.DELETE)
    until(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, f'#editor-graph g.node[data-step="{focused}"]'),
          f"{focused} deleted with the Delete key")
    assert f"id: {focused}" not in driver.find_element(By.CSS_SELECTOR, "#editor-yaml").get_attribute("value")
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.CONTROL, "z")
    until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f'#editor-graph g.node[data-step="{focused}"]'),
          f"{focused} back after Ctrl+Z")
    example = REPO_ROOT / "examples" / "hello-towline.yaml"
    assert driver.find_element(By.CSS_SELECTOR, "#editor-yaml").get_attribute("value") == example.read_text()

    # Diff against a file of the author's checkout: the same file shows no difference.
    driver.find_element(By.CSS_SELECTOR, "#editor-upload").send_keys(str(example))
    wait_for_element(driver, "#editor-same", "no difference from the checkout's file", 30)
