"""The Python distributions' build cache (`towline_dev.distcache`): built once per content, built again when any
source, the version, the distribution or the build tools' pins change. The build itself is `build_python`'s, which
the release tests run for real; here it is a stand-in that counts its calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from towline_dev import distcache


@pytest.fixture
def builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[tuple[str, str]]]:
    """A checkout of two source files, the cache under tmp_path; the checkout and the builds made: (version,
    project)."""
    root = tmp_path / "checkout"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("VALUE = 1\n")
    (root / "pyproject.toml").write_text('[project]\nname = "towline"\n')
    (root / "images").mkdir()
    (root / "images" / "constraints.txt").write_text("setuptools==80.0.0\n")
    made: list[tuple[str, str]] = []

    def build_python(source: Path, version: str, out: Path, project: str = ".") -> list[Path]:
        assert source == root
        made.append((version, project))
        out.mkdir(parents=True, exist_ok=True)
        built = [out / f"towline-{version}.tar.gz", out / f"towline-{version}-py3-none-any.whl"]
        for path in built:
            path.write_text(f"{version} {(root / 'pkg' / 'mod.py').read_text()}")
        return built

    monkeypatch.setattr(distcache, "cache_root", lambda: tmp_path / "cache")
    monkeypatch.setattr(distcache, "python_source_files", lambda where, project=".": ["pkg/mod.py", "pyproject.toml"])
    monkeypatch.setattr(distcache, "build_python", build_python)
    return root, made


def test_the_same_sources_are_built_once_and_handed_out_again(builds: tuple[Path, list[tuple[str, str]]],
                                                              tmp_path: Path) -> None:
    root, made = builds
    first = distcache.python_dists("0.1.0", root=root)
    again = distcache.python_dists("0.1.0", root=root)
    assert made == [("0.1.0", ".")]
    assert first == again and [path.name for path in first] == ["towline-0.1.0-py3-none-any.whl",
                                                                  "towline-0.1.0.tar.gz"]
    copied = distcache.copy_python_dists("0.1.0", tmp_path / "dist", root=root)
    assert made == [("0.1.0", ".")], "a copy builds nothing"
    assert [path.parent for path in copied] == [tmp_path / "dist"] * 2
    assert [path.read_text() for path in copied] == [path.read_text() for path in first]


def test_a_changed_source_a_version_a_distribution_or_a_pin_builds_again(
    builds: tuple[Path, list[tuple[str, str]]],
) -> None:
    root, made = builds
    distcache.python_dists("0.1.0", root=root)
    (root / "pkg" / "mod.py").write_text("VALUE = 2\n")
    changed = distcache.python_dists("0.1.0", root=root)
    assert changed[0].read_text() == "0.1.0 VALUE = 2\n", "the build of the changed source, not the cached one"
    distcache.python_dists("0.2.0", root=root)
    distcache.python_dists("0.2.0", "stepkit", root=root)
    (root / "images" / "constraints.txt").write_text("setuptools==80.1.0\n")
    distcache.python_dists("0.2.0", "stepkit", root=root)
    assert made == [("0.1.0", "."), ("0.1.0", "."), ("0.2.0", "."), ("0.2.0", "stepkit"), ("0.2.0", "stepkit")]


def test_a_build_that_fails_leaves_nothing_to_be_taken_for_it(builds: tuple[Path, list[tuple[str, str]]],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = builds

    def failing(source: Path, version: str, out: Path, project: str = ".") -> list[Path]:
        (out / "towline-0.1.0-py3-none-any.whl").write_text("half")
        raise RuntimeError("python -m build failed")

    monkeypatch.setattr(distcache, "build_python", failing)
    with pytest.raises(RuntimeError, match="python -m build failed"):
        distcache.python_dists("0.1.0", root=root)
    assert not [path for path in distcache.dists_cache().iterdir() if path.is_dir()]
