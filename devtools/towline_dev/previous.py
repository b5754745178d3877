"""An earlier Towline, built from a commit of this repository's history: what upgrade tests start from.

`ensure_previous_release(commit, progress)` exports the commit's tree (`git archive`, into a
temporary directory), packages its chart (`helm package`, the pinned helm) and builds its two
images from its own Containerfiles and sources with this checkout's image build
(`towline_dev.images.build_archives`: the same pinned base and tools), named
`localhost/towline:prev` and `localhost/towline-runner:prev` so they sit beside the current
`:dev` images on a node. Everything is cached outside the repository under the commit's
full SHA (`<cache>/previous/<sha>/`), so only the first run builds; the checkout is never
touched. A commit the clone does not hold (a shallow clone) is an error saying so.

`python -m towline_dev.previous SHA` builds (once) and prints the artifacts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from towline_dev import REPO_ROOT
from towline_dev.binaries import _exclusive_lock, cache_root, find_binaries
from towline_dev.imagebuild import ImageBuildFailed, images_cache, published_build, write_build_manifest
from towline_dev.images import IMAGES, ImageSpec, build_archives, context_files
from towline_dev.ocilayout import read_archive
from towline_dev.packaging import CHART, manifest_digest, package_chart

Progress = Callable[[str], None]

TAG = "prev"
TOWLINE_IMAGE = f"localhost/towline:{TAG}"
RUNNER_IMAGE = f"localhost/towline-runner:{TAG}"
SPECS = tuple(ImageSpec(reference, spec.containerfile, spec.archive_name)
              for reference, spec in zip((TOWLINE_IMAGE, RUNNER_IMAGE), IMAGES, strict=True))
"""The current build's two images (operator and runner, same Containerfiles), under the `prev` tag."""
FORMAT = 1
"""Bump when what a cached build holds changes: older entries are then rebuilt."""


class CommitUnavailable(RuntimeError):  # noqa: N818 - reads as the condition it reports
    """The commit is not in this clone (or this is not a git checkout); the message says what to do."""


@dataclass(frozen=True)
class PreviousRelease:
    commit: str
    chart: Path
    """The commit's chart, `helm package`d with its own Chart.yaml version."""
    images: dict[str, Path]
    """Image reference (`...:prev`) -> OCI archive."""
    build_seconds: float
    """How long the first build took (read back from the cache afterwards)."""


def previous_cache() -> Path:
    return cache_root() / "previous"


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=300, check=False)


def require_commit(root: Path, commit: str) -> None:
    """Raise CommitUnavailable unless `commit` is a commit this clone holds."""
    if _git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0:
        return
    if _git(root, "rev-parse", "--git-dir").returncode != 0:
        raise CommitUnavailable(f"{root} is not a git checkout, so commit {commit} cannot be exported; "
                                "run this from a clone of the repository")
    shallow = _git(root, "rev-parse", "--is-shallow-repository").stdout.decode().strip() == "true"
    hint = ("this is a shallow clone: fetch the full history (`git fetch --unshallow`, or clone without "
            "--depth; in CI, a checkout with the whole history)") if shallow else (
            "fetch it (`git fetch origin`) or check the SHA")
    raise CommitUnavailable(f"commit {commit} is not in this clone: {hint}")


def export_tree(root: Path, commit: str, into: Path) -> Path:
    """The commit's files (`git archive`) under `into`; nothing in the checkout changes."""
    into.mkdir(parents=True, exist_ok=True)
    archive = into / "tree.tar"
    with archive.open("wb") as out:
        result = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", commit], stdout=out,
                                stderr=subprocess.PIPE, timeout=300, check=False)
    if result.returncode != 0:
        raise CommitUnavailable(f"git archive {commit} failed: {result.stderr.decode().strip()}")
    tree = into / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    archive.unlink()
    return tree


def archive_digest(archive: Path, reference: str) -> str:
    """The manifest digest of the one image in `archive`, once its blobs check out and it is named `reference`."""
    image = read_archive(archive)
    if image.reference != reference:
        raise ImageBuildFailed(f"{archive.name} names {image.reference!r}, not {reference!r}")
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None, f"{archive} has no index.json"  # read_archive read it
        return manifest_digest(json.loads(member.read()))


def _cached(target: Path) -> PreviousRelease | None:
    try:
        manifest = json.loads((target / "build.json").read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("format") != FORMAT:
        return None
    images = {spec.reference: target / spec.archive_name for spec in SPECS}
    chart = target / manifest["chart"]
    if not chart.is_file() or not all(path.is_file() for path in images.values()):
        return None
    return PreviousRelease(manifest["commit"], chart, images, float(manifest["seconds"]))


def ensure_previous_release(commit: str, progress: Progress, *, root: Path = REPO_ROOT) -> PreviousRelease:
    """The chart package and `:prev` images of `commit` (a full SHA), built once if the cache lacks them."""
    if len(commit) != 40:
        raise ValueError(f"pin the full 40-character SHA, not {commit!r}: a short one may become ambiguous")
    target = previous_cache() / commit
    found = _cached(target)
    if found is not None:
        return found
    require_commit(root, commit)
    previous_cache().mkdir(parents=True, exist_ok=True)
    # The image lock: the buildah store is shared with every other image build of this machine.
    with _exclusive_lock(images_cache() / "build.lock"):
        found = _cached(target)
        if found is not None:
            return found
        _build(root, commit, target, progress)
    built = _cached(target)
    assert built is not None, f"the build of {commit} left no complete cache entry in {target}"
    return built


def _build(root: Path, commit: str, target: Path, progress: Progress) -> None:
    started = time.monotonic()
    progress(f"Building the chart and images of commit {commit[:12]} into {target} (once per commit)")
    with published_build(target, prefix=f".{commit[:12]}-") as staging:
        with tempfile.TemporaryDirectory(prefix="towline-previous-") as scratch:
            tree = export_tree(root, commit, Path(scratch))
            version = str(yaml.safe_load((tree / CHART / "Chart.yaml").read_text())["version"])
            helm = find_binaries(progress=progress).path("helm")
            chart = package_chart(helm, tree / CHART, version, staging)
            log = staging / "build.log"
            build_archives(tree, context_files(tree), staging, progress, log, specs=SPECS)
        digests = {spec.reference: archive_digest(staging / spec.archive_name, spec.reference) for spec in SPECS}
        seconds = round(time.monotonic() - started, 1)
        write_build_manifest(staging, {"format": FORMAT, "commit": commit, "chart": chart.name,
                                       "version": version, "images": digests, "seconds": seconds})
    progress(f"Built commit {commit[:12]}'s chart and images in {time.monotonic() - started:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m towline_dev.previous", description=__doc__.splitlines()[0])
    parser.add_argument("commit", help="the full SHA of the commit to build")
    args = parser.parse_args(argv)

    def report(message: str) -> None:
        print(f"[towline previous] {message}", file=sys.stderr, flush=True)

    try:
        release = ensure_previous_release(args.commit, report)
    except CommitUnavailable as problem:
        print(f"towline_dev.previous: {problem}", file=sys.stderr)
        return 1
    print(f"chart\t{release.chart}")
    for reference, path in release.images.items():
        print(f"{reference}\t{path}\t{path.stat().st_size / 1e6:.0f} MB")
    print(f"first build\t{release.build_seconds:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
