"""`make release`'s checks: the version, the changelog, the versioned copies, the chart's images, the sums."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

from towline_dev.images import RUNNER_IMAGE, TOWLINE_IMAGE
from towline_dev.ocilayout import ANNOTATION_CONTAINERD_NAME, ANNOTATION_REF_NAME, read_archive, write_archive
from towline_dev.packaging import (
    EDITOR_SCHEMA,
    STEP_KIT,
    PackagingFailed,
    changelog_heading,
    changelog_problem,
    copy_editor_schema,
    editor_schema_problem,
    images_text,
    manifest_digest,
    packaged_chart_problem,
    pyproject_with_version,
    python_source_files,
    release_images,
    rendered_images,
    rendered_images_problem,
    retag_archive,
    sha256sums_text,
    step_kit_pinned,
    version_problem,
)

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("version", ["0.1.0", "1.0.0", "10.20.30", "1.2.0-rc.1", "1.2.0-rc1", "2.0.0-alpha",
                                     "2.0.0-beta.2"])
def test_semantic_versions_are_accepted(version: str) -> None:
    assert version_problem(version) is None


@pytest.mark.parametrize("version", ["1.2", "v1.2.3", "1.2.3.4", "01.2.3", "1.2.x", "1.2.3-", " 1.2.3", "latest"])
def test_a_version_that_is_not_semver_is_refused_naming_the_variable(version: str) -> None:
    problem = version_problem(version)
    assert problem is not None
    assert problem.startswith(f"VERSION={version} is not a semantic version")


def test_a_missing_version_says_how_to_give_one() -> None:
    assert version_problem("") == (
        "VERSION is not set: run `make release VERSION=x.y.z` (e.g. VERSION=0.2.0 or VERSION=0.2.0-rc.1)")


def test_build_metadata_is_refused_because_an_image_tag_cannot_hold_it() -> None:
    problem = version_problem("1.2.3+build.5")
    assert problem is not None and "VERSION=1.2.3+build.5" in problem and "image tag" in problem


@pytest.mark.parametrize("version", ["1.2.3-snapshot", "1.2.3-rc.01", "1.2.3-rc.1.2"])
def test_a_prerelease_the_python_version_cannot_say_is_refused(version: str) -> None:
    problem = version_problem(version)
    assert problem is not None and "alpha, beta or rc" in problem


CHANGELOG = """# Changelog

## [0.2.0] - 2026-01-15

### Fixed
- something

## [0.1.0] - unreleased

### Added
- everything
"""


def test_the_changelog_section_of_the_version_is_found() -> None:
    assert changelog_heading(CHANGELOG, "0.1.0") == "## [0.1.0] - unreleased"
    assert changelog_problem(CHANGELOG, "0.2.0") is None


def test_a_version_without_a_changelog_section_is_refused_saying_what_to_add() -> None:
    assert changelog_problem(CHANGELOG, "0.3.0") == (
        "CHANGELOG.md has no section for 0.3.0: add `## [0.3.0] - YYYY-MM-DD` saying what changed "
        "(Added, Changed, Fixed, ...), then run the release again")


def test_a_section_of_a_longer_version_or_a_mention_is_not_the_versions_section() -> None:
    text = "## [0.1.0-rc.1] - 2026-01-01\n\nSee ## [0.1.0] later.\n### [0.1.0]\n"
    assert changelog_heading(text, "0.1.0") is None


def test_a_missing_changelog_is_refused() -> None:
    problem = changelog_problem(None, "0.1.0")
    assert problem is not None and problem.startswith("CHANGELOG.md is missing")


def test_the_repositorys_changelog_has_the_first_release() -> None:
    assert changelog_heading((REPO_ROOT / "CHANGELOG.md").read_text(), "0.1.0") is not None


def test_the_python_version_is_set_in_the_copy_and_nothing_else_changes() -> None:
    original = (REPO_ROOT / "pyproject.toml").read_text()
    rewritten = pyproject_with_version(original, "1.2.0-rc.1")
    parsed, before = tomllib.loads(rewritten), tomllib.loads(original)
    assert parsed["project"]["version"] == "1.2.0-rc.1"
    parsed["project"]["version"] = before["project"]["version"]
    assert parsed == before
    assert len(rewritten.splitlines()) == len(original.splitlines())


def test_a_version_line_outside_the_project_table_is_left_alone() -> None:
    text = '[tool.x]\nversion = "9"\n\n[project]\nname = "towline"\nversion = "0.1.0"\n\n[tool.y]\nversion = "8"\n'
    rewritten = pyproject_with_version(text, "0.2.0")
    assert rewritten == text.replace('version = "0.1.0"', 'version = "0.2.0"')


def test_a_dynamic_version_cannot_be_set() -> None:
    with pytest.raises(PackagingFailed, match="no static"):
        pyproject_with_version('[project]\nname = "towline"\ndynamic = ["version"]\n', "0.2.0")


def test_the_operators_distribution_pins_the_step_kit_at_the_release_version() -> None:
    text = (REPO_ROOT / "pyproject.toml").read_text()
    rewritten = step_kit_pinned(pyproject_with_version(text, "0.2.0"), "0.2.0")
    project = tomllib.loads(rewritten)["project"]
    assert "towline-step==0.2.0" in project["dependencies"] and project["version"] == "0.2.0"
    packages = tomllib.loads(rewritten)["tool"]["setuptools"]["packages"]["find"]
    assert "stepkit" not in packages["where"] and not [name for name in packages["include"] if "step" in name]


def test_an_operator_pyproject_without_the_step_kit_pin_is_refused() -> None:
    with pytest.raises(PackagingFailed, match=re.escape('one "towline-step==..." pin')):
        step_kit_pinned('[project]\nname = "towline"\nversion = "1"\ndependencies = ["towline-step>=1"]\n', "1")


def test_the_python_sources_are_the_packages_pyproject_and_readme_without_build_debris() -> None:
    files = python_source_files(REPO_ROOT)
    assert {"pyproject.toml", "README.md", "operator/towline/plugin/cli.py"} <= set(files)
    # Not stepkit/: the operator's distribution depends on towline-step rather than carrying towline_step.
    # examples/: the top-level Workflows, data files for the web view's editor.
    assert {name.split("/", 1)[0] for name in files} == {"pyproject.toml", "README.md", "operator", "connectors",
                                                         "examples"}
    assert not [name for name in files if "egg-info" in name or "__pycache__" in name]


def test_the_step_kits_sources_are_its_directory_alone() -> None:
    files = python_source_files(REPO_ROOT, STEP_KIT)
    assert {"stepkit/pyproject.toml", "stepkit/README.md", "stepkit/towline_step/protocol.py"} <= set(files)
    assert all(name.startswith("stepkit/") for name in files), files
    assert not [name for name in files if "egg-info" in name or "__pycache__" in name]


@pytest.mark.parametrize(("chart", "wrong"), [
    ({"version": "0.1.0", "appVersion": "0.2.0"}, "version is '0.1.0'"),
    ({"version": "0.2.0", "appVersion": "0.1.0"}, "appVersion is '0.1.0'"),
    ({"version": "0.2.0"}, "appVersion is 'None'"),
])
def test_a_packaged_chart_of_another_version_is_refused(chart: dict[str, Any], wrong: str) -> None:
    problem = packaged_chart_problem(chart, "0.2.0")
    assert problem is not None and wrong in problem
    assert packaged_chart_problem({"version": "0.2.0", "appVersion": "0.2.0"}, "0.2.0") is None


def test_the_release_images_are_named_from_the_charts_repository() -> None:
    images = release_images({"image": {"repository": "ghcr.io/towline/towline"}}, "0.2.0")
    assert [(i.reference, i.built_as, i.archive_name) for i in images] == [
        ("ghcr.io/towline/towline:0.2.0", TOWLINE_IMAGE, "towline-0.2.0.oci.tar"),
        ("ghcr.io/towline/towline-runner:0.2.0", RUNNER_IMAGE, "towline-runner-0.2.0.oci.tar"),
    ]


def deployment(name: str, image: str, env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    container = {"name": "main", "image": image, "env": env or []}
    return {"kind": "Deployment", "metadata": {"name": name},
            "spec": {"template": {"spec": {"containers": [container]}}}}


def rendered(operator: str, runner: str, test_pod: str) -> list[dict[str, Any]]:
    return [
        {"kind": "ConfigMap", "metadata": {"name": "x"}},
        deployment("towline-operator", operator, [{"name": "TOWLINE_RUNNER_IMAGE", "value": runner}]),
        {"kind": "Pod", "metadata": {"name": "towline-test"},
         "spec": {"containers": [{"name": "t", "image": test_pod}]}},
    ]


def test_every_image_the_rendered_chart_runs_is_found_with_where_it_is_set() -> None:
    found = rendered_images(rendered("r/towline:1", "r/towline-runner:1", "r/towline:1"))
    assert found == {
        "Deployment towline-operator, container main": "r/towline:1",
        "Deployment towline-operator, container main, TOWLINE_RUNNER_IMAGE": "r/towline-runner:1",
        "Pod towline-test, container t": "r/towline:1",
    }


def test_a_chart_whose_default_images_are_the_releases_passes() -> None:
    images = release_images({"image": {"repository": "r/towline"}}, "1")
    for runner in ("r/towline:1", "r/towline-runner:1"):
        assert rendered_images_problem(rendered_images(rendered("r/towline:1", runner, "r/towline:1")), images) is None


def test_a_chart_running_an_image_of_another_version_is_refused_naming_where() -> None:
    images = release_images({"image": {"repository": "r/towline"}}, "1")
    problem = rendered_images_problem(rendered_images(rendered("r/towline:1", "r/towline:0.9", "r/towline:1")), images)
    assert problem is not None
    assert "Deployment towline-operator, container main, TOWLINE_RUNNER_IMAGE: r/towline:0.9" in problem


def test_a_chart_that_sets_no_runner_image_is_refused() -> None:
    images = release_images({"image": {"repository": "r/towline"}}, "1")
    problem = rendered_images_problem({"Deployment a, container main": "r/towline:1"}, images)
    assert problem is not None and "TOWLINE_RUNNER_IMAGE" in problem


def test_images_txt_gives_each_reference_its_digest() -> None:
    text = images_text({"r/towline:1": "sha256:" + "a" * 64, "r/towline-runner:1": "sha256:" + "b" * 64})
    assert text == f"r/towline:1 sha256:{'a' * 64}\nr/towline-runner:1 sha256:{'b' * 64}\n"


def test_sha256sums_are_in_the_form_sha256sum_checks() -> None:
    text = sha256sums_text({"towline-1.tgz": "1" * 64, "images.txt": "2" * 64})
    assert text == f"{'2' * 64}  images.txt\n{'1' * 64}  towline-1.tgz\n"


def test_the_digest_is_the_one_manifest_the_index_points_to() -> None:
    index = {"schemaVersion": 2, "manifests": [{"digest": "sha256:" + "c" * 64, "size": 1}]}
    assert manifest_digest(index) == "sha256:" + "c" * 64
    with pytest.raises(PackagingFailed, match="found 2"):
        manifest_digest({"manifests": [index["manifests"][0]] * 2})


def small_archive(directory: Path, reference: str) -> Path:
    """A one-layer OCI archive named `reference`, as towline_dev.images writes them."""
    layout = directory / "layout"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> dict[str, Any]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"digest": "sha256:" + digest, "size": len(data)}

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    layer = put(gzip.compress(raw.getvalue(), mtime=0))
    config = put(json.dumps({"config": {}, "rootfs": {"type": "layers", "diff_ids": []}}).encode())
    manifest = put(json.dumps({
        "schemaVersion": 2,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **layer}],
    }).encode())
    index = {"schemaVersion": 2,
             "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest}]}
    (layout / "index.json").write_text(json.dumps(index))
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    write_archive(layout, directory / "built.oci.tar", reference)
    return directory / "built.oci.tar"


def test_retagging_names_the_release_and_keeps_the_built_images_digest(tmp_path: Path) -> None:
    built = small_archive(tmp_path, "localhost/towline:dev")
    (tmp_path / "dist").mkdir()
    target = tmp_path / "dist" / "towline-1.oci.tar"
    digest = retag_archive(built, target, "ghcr.io/towline/towline:1")
    with tarfile.open(built) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        built_index = json.loads(member.read())
    with tarfile.open(target) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        annotations = json.loads(member.read())["manifests"][0]["annotations"]
    assert digest == built_index["manifests"][0]["digest"]
    assert annotations[ANNOTATION_REF_NAME] == annotations[ANNOTATION_CONTAINERD_NAME] == "ghcr.io/towline/towline:1"
    assert read_archive(target).manifest == read_archive(built).manifest
    assert sorted(path.name for path in target.parent.iterdir()) == ["towline-1.oci.tar"]


def test_the_release_carries_the_checkouts_editor_schema(tmp_path: Path) -> None:
    copied = copy_editor_schema(REPO_ROOT, tmp_path)
    assert copied == tmp_path / "workflow.schema.json"
    assert copied.read_bytes() == (REPO_ROOT / EDITOR_SCHEMA).read_bytes()
    assert json.loads(copied.read_text())["title"] == "Towline Workflow (towline.dev/v1alpha1)"


def test_a_missing_or_stale_editor_schema_is_refused_saying_to_run_make_schemas(tmp_path: Path) -> None:
    assert editor_schema_problem("{}\n", "{}\n") is None
    assert "is missing: run `make schemas`" in (editor_schema_problem(None, "{}\n") or "")
    assert "not what the models generate: run `make schemas`" in (editor_schema_problem("{}\n", "[]\n") or "")
    (tmp_path / "schemas").mkdir()
    (tmp_path / EDITOR_SCHEMA).write_text("{}\n")
    with pytest.raises(PackagingFailed, match="make schemas"):
        copy_editor_schema(tmp_path, tmp_path)
