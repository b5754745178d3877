"""The example step types' images: what decides a rebuild, and how the Go program is compiled."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from towline_dev import stepimages
from towline_dev.imagebuild import ImageBuildFailed, content_key
from towline_dev.images import REPO_ROOT, context_files
from towline_dev.stepimages import (
    GREETER,
    STEP_IMAGES,
    TCP_PROBE,
    available,
    go_build_command,
    go_env,
    pinned_inputs,
    source_files,
)

GO = "/opt/go/bin/go"
GO_EXAMPLE = Path(TCP_PROBE.context)


@pytest.fixture(autouse=True)
def fixed_go_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key's Go version without running Go (the unit tests need nothing but Python)."""
    monkeypatch.setattr(stepimages, "go_version", lambda go: ("go1.99.0", "amd64"))


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the Go example, to change without touching the repository."""
    root = tmp_path / "repo"
    for relative in source_files(TCP_PROBE):
        destination = root / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / relative, destination)
    return root


def key_of(root: Path) -> str:
    return content_key(root, source_files(TCP_PROBE, root), pinned_inputs(TCP_PROBE, GO))


def test_the_go_image_reads_its_sources_and_containerfile_only() -> None:
    files = source_files(TCP_PROBE)
    assert TCP_PROBE.containerfile in files
    assert (GO_EXAMPLE / "go.mod").as_posix() in files
    assert (GO_EXAMPLE / "main.go").as_posix() in files
    assert not [f for f in files if f.endswith(("_test.go", ".md"))], "tests and docs are not image inputs"
    assert all(f.startswith(TCP_PROBE.context + "/") for f in files)


def test_the_key_is_stable_for_an_unchanged_tree(checkout: Path) -> None:
    assert key_of(checkout) == key_of(checkout) == key_of(REPO_ROOT)


@pytest.mark.parametrize("name", ["main.go", "go.mod", "Containerfile"])
def test_changing_a_go_input_changes_the_key(checkout: Path, name: str) -> None:
    before = key_of(checkout)
    with (checkout / GO_EXAMPLE / name).open("a") as handle:
        handle.write("\n// changed\n")
    assert key_of(checkout) != before


def test_a_new_go_file_changes_the_key(checkout: Path) -> None:
    before = key_of(checkout)
    (checkout / GO_EXAMPLE / "extra.go").write_text("package main\n")
    assert key_of(checkout) != before


def test_a_binary_built_in_place_tests_and_docs_do_not_change_the_key(checkout: Path) -> None:
    before = key_of(checkout)
    assert TCP_PROBE.go_binary is not None
    (checkout / GO_EXAMPLE / TCP_PROBE.go_binary).write_bytes(b"\x7fELF")
    (checkout / GO_EXAMPLE / "more_test.go").write_text("package main\n")
    (checkout / GO_EXAMPLE / "NOTES.md").write_text("notes\n")
    assert key_of(checkout) == before


def test_another_go_toolchain_changes_the_key(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = key_of(checkout)
    monkeypatch.setattr(stepimages, "go_version", lambda go: ("go1.99.1", "amd64"))
    assert key_of(checkout) != before
    monkeypatch.setattr(stepimages, "go_version", lambda go: ("go1.99.0", "arm64"))
    assert key_of(checkout) != before


def test_a_go_image_without_go_says_what_to_install() -> None:
    with pytest.raises(ImageBuildFailed, match="Go is not installed"):
        pinned_inputs(TCP_PROBE, None)


def test_the_python_example_follows_the_runners_base_and_go_does_not_matter() -> None:
    pins = pinned_inputs(GREETER, None)
    assert "base" in pins and "go" not in pins
    assert "base" not in pinned_inputs(TCP_PROBE, GO)


def test_the_python_example_is_built_only_once_its_sources_are_in_the_tree(tmp_path: Path) -> None:
    for source in GREETER.sources:
        path = tmp_path / source
        if source.endswith((".Containerfile", ".dockerignore", ".txt", ".toml", ".md")):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x\n")
    assert not available(GREETER, tmp_path)
    (tmp_path / "stepkit" / "towline_step").mkdir(parents=True)
    (tmp_path / "stepkit" / "towline_step" / "__init__.py").write_text("")
    assert not available(GREETER, tmp_path)
    (tmp_path / "examples" / "step-types" / "greeter-python" / "greeter").mkdir(parents=True)
    (tmp_path / "examples" / "step-types" / "greeter-python" / "greeter" / "__main__.py").write_text("")
    assert available(GREETER, tmp_path)
    assert {"stepkit/towline_step/__init__.py", "stepkit/pyproject.toml"} <= set(source_files(GREETER, tmp_path))


def test_the_go_build_is_static_stripped_and_offline(tmp_path: Path) -> None:
    command = go_build_command(GO, tmp_path / "src", tmp_path / "src" / "tcp-probe")
    assert command[:4] == [GO, "-C", str(tmp_path / "src"), "build"]
    assert "-trimpath" in command and "-ldflags=-s -w" in command
    env = go_env({"PATH": "/usr/bin", "GOFLAGS": "-tags=debug", "GOARCH": "arm64", "CGO_CFLAGS": "-O0"}, tmp_path)
    assert env["CGO_ENABLED"] == "0"
    assert env["GOPROXY"] == "off" and env["GOTOOLCHAIN"] == "local"
    assert env["GOFLAGS"] == "-buildvcs=false"
    assert "GOARCH" not in env and "CGO_CFLAGS" not in env, "the caller's Go settings would escape the key"
    assert env["GOCACHE"].startswith(str(tmp_path)) and env["GOMODCACHE"].startswith(str(tmp_path))
    assert env["PATH"] == "/usr/bin"


def test_the_go_build_cache_is_outside_the_repository(tmp_path: Path) -> None:
    env = go_env({}, stepimages.images_cache())
    assert not Path(env["GOCACHE"]).is_relative_to(REPO_ROOT)


def test_the_operator_images_do_not_rebuild_for_a_step_type_image_change() -> None:
    files = context_files(REPO_ROOT)
    assert GREETER.containerfile not in files
    # Of examples/ only the top-level Workflows the operator's wheel ships for the editor, never a step type's files.
    examples = [f for f in files if f.startswith("examples/")]
    assert examples and all(f.count("/") == 1 and f.endswith(".yaml") for f in examples), examples


def test_each_step_image_has_its_own_reference_and_archive() -> None:
    assert len({spec.reference for spec in STEP_IMAGES}) == len({spec.archive_name for spec in STEP_IMAGES}) == 2
    assert all(spec.reference.startswith("localhost/towline-steps/") for spec in STEP_IMAGES)


def test_the_step_image_containerfiles_run_as_the_unprivileged_user() -> None:
    for spec in STEP_IMAGES:
        lines = (REPO_ROOT / spec.containerfile).read_text().splitlines()
        assert "USER 65532:65532" in lines, spec.containerfile


def test_a_tree_without_the_examples_builds_nothing(tmp_path: Path) -> None:
    lines: list[str] = []
    assert stepimages.ensure_step_type_images(lines.append, tmp_path) == {}
    assert lines == []
