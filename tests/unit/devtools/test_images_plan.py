"""The image cache key and the build commands: what decides a rebuild, and how the build runs."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from towline_dev import imagebuild
from towline_dev.imagebuild import (
    BuildahStore,
    ImageBuildFailed,
    bud_command,
    import_base_commands,
    mmdebstrap_command,
    run_logged,
)
from towline_dev.images import (
    CONTEXT_PATHS,
    IMAGES,
    REPO_ROOT,
    content_key,
    context_files,
    pinned_inputs,
)
from towline_dev.versions import IMAGE_BASE_PACKAGES


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the files a build reads, to change without touching the repository."""
    root = tmp_path / "repo"
    for relative in context_files(REPO_ROOT):
        destination = root / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / relative, destination)
    return root


def key_of(root: Path) -> str:
    return content_key(root, context_files(root), pinned_inputs())


def test_context_holds_the_containerfiles_the_sources_and_the_project_metadata() -> None:
    files = context_files(REPO_ROOT)
    for spec in IMAGES:
        assert spec.containerfile in files
    assert {"pyproject.toml", "README.md", "images/constraints.txt", "images/runner-requirements.txt"} <= set(files)
    assert "operator/towline/cli.py" in files
    assert "connectors/towline_connectors/runner.py" in files
    assert not [f for f in files if f.startswith(("devtools/", "tests/", "charts/", ".git"))]


def test_the_key_is_stable_for_an_unchanged_tree(checkout: Path) -> None:
    assert key_of(checkout) == key_of(checkout)
    assert key_of(checkout) == key_of(REPO_ROOT)


@pytest.mark.parametrize(
    "relative",
    ["connectors/towline_connectors/runner.py", "operator/towline/cli.py", "images/runner.Containerfile",
     "images/constraints.txt", "pyproject.toml", "README.md"],
)
def test_changing_any_input_changes_the_key(checkout: Path, relative: str) -> None:
    before = key_of(checkout)
    with (checkout / relative).open("a") as handle:
        handle.write("\n# changed\n")
    assert key_of(checkout) != before


def test_a_new_source_file_changes_the_key(checkout: Path) -> None:
    before = key_of(checkout)
    (checkout / "connectors" / "towline_connectors" / "extra.py").write_text("X = 1\n")
    assert key_of(checkout) != before


def test_caches_and_build_debris_do_not_change_the_key(checkout: Path) -> None:
    before = key_of(checkout)
    package = checkout / "connectors" / "towline_connectors"
    (package / "__pycache__").mkdir(exist_ok=True)
    (package / "__pycache__" / "runner.cpython-311.pyc").write_bytes(b"\0")
    (checkout / "operator" / "towline.egg-info").mkdir()
    (checkout / "operator" / "towline.egg-info" / "PKG-INFO").write_text("x")
    (checkout / "operator" / ".mypy_cache").mkdir()
    (checkout / "operator" / ".mypy_cache" / "x.json").write_text("{}")
    assert key_of(checkout) == before


def test_a_pinned_version_change_changes_the_key(checkout: Path) -> None:
    files = context_files(checkout)
    pins = pinned_inputs()
    changed = {**pins, "tools": {**pins["tools"], "buildah": "0.0.0"}}  # type: ignore[dict-item]
    assert content_key(checkout, files, pins) != content_key(checkout, files, changed)


def test_a_tree_without_the_sources_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    with pytest.raises(FileNotFoundError, match="not a Towline checkout"):
        context_files(tmp_path)


def test_context_paths_are_what_the_containerfiles_copy() -> None:
    copied: set[str] = set()
    for spec in IMAGES:
        for line in (REPO_ROOT / spec.containerfile).read_text().splitlines():
            if line.startswith("COPY ") and "--from=" not in line:
                copied.update(part.split("/")[0] for part in line.split()[1:-1])
    assert copied == set(CONTEXT_PATHS)


def test_images_are_built_by_buildah_from_the_containerfile_against_the_local_base(tmp_path: Path) -> None:
    store = BuildahStore(tmp_path / "store")
    command = bud_command(store, containerfile=tmp_path / "ctx" / "images" / "runner.Containerfile",
                          context=tmp_path / "ctx", base="localhost/towline-base:abc",
                          reference="localhost/towline-runner:dev", ca_bundle=None)
    assert command[:7] == ["buildah", "--root", str(tmp_path / "store" / "storage"),
                           "--runroot", str(tmp_path / "store" / "run"), "--storage-driver", "overlay"]
    assert command[command.index("--isolation") + 1] == "chroot"
    assert "--pull=never" in command
    assert command[command.index("--build-arg") + 1] == "BASE=localhost/towline-base:abc"
    assert command[command.index("--file") + 1] == str(tmp_path / "ctx" / "images" / "runner.Containerfile")
    assert command[-1] == str(tmp_path / "ctx")
    assert "--secret" not in command


def test_the_machine_ca_bundle_is_a_build_secret_not_a_build_arg(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    command = bud_command(BuildahStore(tmp_path), containerfile=tmp_path / "f", context=tmp_path,
                          base="b", reference="r", ca_bundle=bundle)
    assert command[command.index("--secret") + 1] == f"id=pip-ca,src={bundle}"
    assert not [arg for arg in command if str(bundle) in arg and not arg.startswith("id=pip-ca,")]


def test_the_store_keeps_pip_cache_and_state_under_the_cache_directory(tmp_path: Path) -> None:
    store = BuildahStore(tmp_path / "store")
    assert store.env()["TMPDIR"] == str(tmp_path / "store" / "tmp")
    assert all(str(tmp_path / "store") in arg for arg in store.global_args()[1::2][:2])


def test_the_base_is_minimal_debian_with_python_and_its_security_updates(tmp_path: Path) -> None:
    command = mmdebstrap_command(tmp_path / "base.tar")
    assert "--variant=essential" in command
    assert "--include=" + ",".join(IMAGE_BASE_PACKAGES) in command
    assert any(arg.endswith("-security main") for arg in command)
    assert str(tmp_path / "base.tar") in command


def test_the_base_key_follows_the_package_list(monkeypatch: pytest.MonkeyPatch) -> None:
    before = imagebuild.base_key()
    monkeypatch.setattr(imagebuild, "IMAGE_BASE_PACKAGES", (*IMAGE_BASE_PACKAGES, "curl"))
    assert imagebuild.base_key() != before


def test_the_base_import_names_the_image_and_removes_its_work_container(tmp_path: Path) -> None:
    commands = import_base_commands(BuildahStore(tmp_path), tmp_path / "base.tar", "localhost/towline-base:k", "c")
    assert [c[7] for c in commands] == ["from", "add", "config", "commit"]
    assert commands[-1][-2:] == ["c", "localhost/towline-base:k"]
    assert "--rm" in commands[-1]


def _script(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_build_output_steps_become_progress_lines(tmp_path: Path) -> None:
    lines: list[str] = []
    output = run_logged(_script("print('[1/2] STEP 3/7: COPY a b'); print('noise')"), lines.append, "img",
                        log=tmp_path / "log")
    assert lines == ["img: [1/2] STEP 3/7: COPY a b"]
    assert "noise" in output
    assert "noise" in (tmp_path / "log").read_text()


def test_a_failed_download_step_is_retried_then_succeeds(tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    code = f"import pathlib, sys; m = pathlib.Path({str(marker)!r}); sys.exit(0 if m.exists() else m.touch() or 1)"
    lines: list[str] = []
    run_logged(_script(code), lines.append, "base rootfs", attempts=3, retry_delay=0)
    assert len(lines) == 1 and "retrying" in lines[0] and "attempt 2/3" in lines[0]


def test_a_failure_that_persists_raises_with_the_output_tail() -> None:
    lines: list[str] = []
    with pytest.raises(ImageBuildFailed, match="E: no route to the mirror"):
        run_logged(_script("print('E: no route to the mirror'); raise SystemExit(25)"), lines.append, "base",
                   attempts=2, retry_delay=0)
    assert len(lines) == 1


def test_a_change_to_the_base_changes_the_image_key(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = key_of(checkout)
    monkeypatch.setattr(imagebuild, "DPKG_EXCLUDES", (*imagebuild.DPKG_EXCLUDES, "path-exclude=/usr/share/zoneinfo/*"))
    assert key_of(checkout) != before


def test_a_published_build_replaces_the_entry_only_when_it_completes(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "key1"
    target.mkdir(parents=True)
    (target / "old").write_text("previous build")
    with pytest.raises(RuntimeError), imagebuild.published_build(target, prefix="key1-") as staging:
        (staging / "half").write_text("x")
        raise RuntimeError("the build failed half-way")
    assert [p.name for p in target.iterdir()] == ["old"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["key1"], "the staging directory was left behind"
    with imagebuild.published_build(target, prefix="key1-") as staging:
        imagebuild.write_build_manifest(staging, {"key": "key1"})
    assert sorted(p.name for p in target.iterdir()) == ["build.json"]
    assert oct(target.stat().st_mode & 0o777) == "0o755"
