"""Every YAML object README.md and docs/**/*.md show is one the API server takes, as kubectl reads it.

The ```yaml blocks are read by `towline_dev.docyaml`'s rules (whole objects as written; fragments, marked
`<!-- fragment: KIND at PATH -->`, put into that kind's smallest object; `<!-- not-applied: WHY -->` blocks
counted and named) and each is given to `kubectl apply --dry-run=server` (`kubectl create --dry-run=server`
for an object named by `generateName`, which the docs create) on the control plane with the chart's CRDs and
admission policies: the schema, its CEL rules and the policies judge it, nothing is stored. Objects keep the
namespaces they name (created for the test if missing, deleted afterwards); the others go to the test's
namespace. Only what the docs say stands for something of yours is replaced: `carol` (`requestedBy: carol`,
"must be you") by the user applying it, and `registry.example.com/steps` (a StepType's image "under
stepTypes.allowedImagePrefixes") by the prefix the test chart allows.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from towline_dev import REPO_ROOT
from towline_dev.controlplane import ControlPlane
from towline_dev.docyaml import DocYaml, documented_yaml, markdown_files
from towline_dev.release import STEP_TYPE_IMAGE_PREFIX

pytestmark = pytest.mark.integration

YOU = "carol"
"""The name the docs give the person applying a WorkflowRun (`requestedBy`, checked by admission policy)."""
STEP_IMAGES = "registry.example.com/steps"
"""Where the docs' step type images are: a prefix the chart's stepTypes.allowedImagePrefixes allows."""


@pytest.fixture
def named_namespaces(towline_installed: ControlPlane) -> Iterator[list[str]]:
    """The namespaces the documented objects name, each created for the test unless it exists."""
    named = sorted({str(d["metadata"]["namespace"]) for block in documented_yaml(REPO_ROOT)
                    for d in block.documents if "namespace" in d.get("metadata", {})})
    created = [name for name in named
               if towline_installed.kubectl("get", "namespace", name, check=False).returncode != 0]
    for name in created:
        towline_installed.kubectl("create", "namespace", name)
        towline_installed.kubectl("label", "namespace", name, "towline.dev/test=true")
    yield named
    for name in created:
        towline_installed.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _dry_run(plane: ControlPlane, block: DocYaml, namespace: str) -> str | None:
    """kubectl's complaint about the block, or None when the API server takes every object in it."""
    creates = any("generateName" in d.get("metadata", {}) and "name" not in d["metadata"] for d in block.documents)
    verb = ["create"] if creates else ["apply"]
    named = all("namespace" in d.get("metadata", {}) for d in block.documents)
    target = [] if named else ["-n", namespace]
    ran = plane.kubectl(*verb, "--dry-run=server", *target, "-f", "-", stdin=block.text, check=False)
    if ran.returncode != 0 or "Warning" in ran.stderr:
        where = f"{block.source} (fragment: {block.fragment})" if block.fragment else block.source
        return (f"{where}: kubectl {verb[0]} --dry-run=server refused it:\n{ran.stderr.strip()}\n"
                f"--- what it was given:\n{block.text}")
    return None


def test_every_documented_object_applies(
    towline_installed: ControlPlane, namespace: str, named_namespaces: list[str]
) -> None:
    user = towline_installed.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout.strip()
    blocks = documented_yaml(REPO_ROOT, {YOU: user, STEP_IMAGES: STEP_TYPE_IMAGE_PREFIX})
    applied = [block for block in blocks if block.not_applied is None]
    refused = [why for block in applied if (why := _dry_run(towline_installed, block, namespace))]
    objects = sum(len(block.documents) for block in applied)
    print(f"\napplied {objects} objects from {len(applied)} ```yaml blocks "
          f"({sum(1 for b in applied if b.fragment)} of them fragments) in namespaces {[namespace, *named_namespaces]}")
    for block in blocks:
        if block.not_applied is not None:
            print(f"  not applied: {block.source}: {block.not_applied}")
    assert not refused, f"{len(refused)} of {len(applied)} documented blocks refused:\n\n" + "\n\n".join(refused)
    # Every ```yaml fence of those files was read (a reader that missed blocks would pass on nothing).
    fences = sum(1 for path in markdown_files(REPO_ROOT) for line in path.read_text().splitlines()
                 if line.strip() in {"```yaml", "```yml"})
    assert len(blocks) == fences and objects >= len(applied) > 0, (len(blocks), fences, len(applied), objects)
