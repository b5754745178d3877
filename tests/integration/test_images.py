"""The container images, built here without a daemon and inspected from their OCI archives.

The images are built once per change to their sources (towline_dev.images) and
checked as a cluster would receive them: the archive's name, the config's user
and entrypoint, every file of every layer, and the runner actually running a
step under runc with a read-only root, as uid 65532, without capabilities.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tarfile
from pathlib import Path

import pytest
from tests.integration.oci_run import UID, Bind, PrivateContainerd, image_process, run_container

from towline.k8s.objects import StepPodSettings
from towline_dev import REPO_ROOT
from towline_dev.binaries import cache_root
from towline_dev.debpackages import ensure_debian_packages
from towline_dev.images import RUNNER_IMAGE, TOWLINE_IMAGE, ensure_images
from towline_dev.ocilayout import (
    ANNOTATION_CONTAINERD_NAME,
    ANNOTATION_REF_NAME,
    OciImage,
    iter_layer_members,
    read_archive,
    unpack_rootfs,
)
from towline_dev.versions import IMAGE_TEST_PACKAGES

pytestmark = pytest.mark.integration

HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
PEM_BODY = re.compile(rb"-----BEGIN CERTIFICATE-----\s+(.{64})", re.S)
# A key itself (header then base64), not code that mentions the header, as cryptography's does.
PRIVATE_KEY = re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----\r?\n[A-Za-z0-9+/=]{40}")


def _progress(message: str) -> None:
    print(f"[towline images] {message}", file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def archives(request: pytest.FixtureRequest) -> dict[str, Path]:
    if os.geteuid() != 0:
        pytest.skip("the images are built with buildah's chroot isolation, which needs root here")
    if shutil.which("dpkg-query") is None:
        pytest.skip("the image tooling installs its pinned tools from Debian packages; this is not Debian")
    capture = request.config.pluginmanager.getplugin("capturemanager")

    def visible_progress(message: str) -> None:
        # A first build takes minutes: show it as it goes, not only if a test fails.
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            _progress(message)

    return ensure_images(visible_progress)


@pytest.fixture(scope="session")
def towline_image(archives: dict[str, Path]) -> OciImage:
    return read_archive(archives[TOWLINE_IMAGE])


@pytest.fixture(scope="session")
def runner_image(archives: dict[str, Path]) -> OciImage:
    return read_archive(archives[RUNNER_IMAGE])


def _rootfs(image: OciImage, factory: pytest.TempPathFactory) -> Path:
    rootfs = factory.mktemp("rootfs") / "rootfs"
    unpack_rootfs(image, rootfs)
    return rootfs


@pytest.fixture(scope="session")
def runner_rootfs(runner_image: OciImage, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ensure_debian_packages(IMAGE_TEST_PACKAGES, _progress, purpose="running the image tests")
    return _rootfs(runner_image, tmp_path_factory)


@pytest.fixture(scope="session")
def towline_rootfs(towline_image: OciImage, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ensure_debian_packages(IMAGE_TEST_PACKAGES, _progress, purpose="running the image tests")
    return _rootfs(towline_image, tmp_path_factory)


_ENTRIES: dict[Path, list[tuple[str, int, bool]]] = {}


def layer_entries(image: OciImage) -> list[tuple[str, int, bool]]:
    """Every entry of the image's layers, bottom layer first: (path, mode, whether a regular file). Read once per
    archive and process: a pass decompresses every layer (2.1 s of CPU for the operator image, 1.6 s for the
    runner's), and four tests list both images."""
    if image.archive not in _ENTRIES:
        _ENTRIES[image.archive] = [(member.name.lstrip("./"), member.mode, member.isfile())
                                   for _, _, member in iter_layer_members(image)]
    return _ENTRIES[image.archive]


def layer_paths(image: OciImage) -> set[str]:
    return {path for path, _, _ in layer_entries(image)}


def site_packages(paths: set[str]) -> set[str]:
    """Top-level names installed into the image's virtual environment."""
    found = set()
    for path in paths:
        match = re.match(r"opt/towline/lib/python3[.\d]*/site-packages/([^/]+)", path)
        if match:
            found.add(match.group(1))
    return found


def test_archives_name_their_image_for_containerd_and_skopeo(archives: dict[str, Path]) -> None:
    for reference, archive in archives.items():
        with tarfile.open(archive) as tar:
            member = tar.extractfile("index.json")
            assert member is not None
            annotations = json.loads(member.read())["manifests"][0]["annotations"]
        assert annotations[ANNOTATION_CONTAINERD_NAME] == reference
        assert annotations[ANNOTATION_REF_NAME] == reference
        assert read_archive(archive).manifest["layers"], f"{reference} has no layers"


def test_containerd_imports_the_archives_under_their_references(
    archives: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    ensure_debian_packages(IMAGE_TEST_PACKAGES, _progress, purpose="running the image tests")
    with PrivateContainerd(tmp_path_factory.mktemp("containerd")) as containerd:
        for archive in archives.values():
            imported = containerd.ctr("images", "import", str(archive))
            assert imported.returncode == 0, imported.stderr
        listed = containerd.ctr("images", "list", "--quiet")
    assert set(archives) <= set(listed.stdout.split())


def test_both_images_run_as_the_unprivileged_user(towline_image: OciImage, runner_image: OciImage) -> None:
    for image in (towline_image, runner_image):
        assert image.config["config"]["User"] == f"{UID}:{UID}"


def test_operator_image_runs_the_towline_command(towline_image: OciImage) -> None:
    assert towline_image.config["config"]["Entrypoint"] == ["towline"]
    assert towline_image.config["config"]["Cmd"] == ["operator"]


def test_runner_image_runs_the_job_builders_command(runner_image: OciImage) -> None:
    assert runner_image.config["config"]["Entrypoint"] == list(StepPodSettings().command)


def test_runner_image_holds_the_connectors_and_nothing_of_the_operator(
    towline_image: OciImage, runner_image: OciImage
) -> None:
    runner = site_packages(layer_paths(runner_image))
    operator = site_packages(layer_paths(towline_image))
    operator_only = {"kopf", "kubernetes_asyncio", "towline", "prometheus_client"}
    assert operator_only <= operator  # the check below can see these packages when they are there
    assert "towline_connectors" in runner
    assert not operator_only & runner, f"the runner image holds {sorted(operator_only & runner)}"


def test_neither_image_holds_the_synchronous_kubernetes_client(towline_image: OciImage, runner_image: OciImage) -> None:
    """The operator talks to the API server through kubernetes_asyncio only; the synchronous client (126 MB
    installed) is the tests' (devtools/pyproject.toml), and every node unpacks what an image holds."""
    for image in (towline_image, runner_image):
        assert "kubernetes" not in site_packages(layer_paths(image)), image.reference


def test_images_hold_no_build_tools_sources_or_caches(towline_image: OciImage, runner_image: OciImage) -> None:
    for image in (towline_image, runner_image):
        paths = layer_paths(image)
        installed = site_packages(paths)
        assert not {"pip", "setuptools"} & installed, f"{image.reference}: {sorted({'pip', 'setuptools'} & installed)}"
        leaked = [p for p in paths if p.startswith(("src/", "root/.cache", "tmp/wheels")) or "/.git/" in p]
        assert not leaked, f"{image.reference} holds {leaked[:5]}"


def test_images_hold_no_setuid_or_setgid_programs(towline_image: OciImage, runner_image: OciImage) -> None:
    for image in (towline_image, runner_image):
        file_mode_by_path: dict[str, int] = {}
        for path, mode, is_file in layer_entries(image):
            # An upper layer's entry wins; a directory's setgid bit only sets new files' group.
            file_mode_by_path[path] = mode if is_file else 0
        privileged = sorted(path for path, mode in file_mode_by_path.items() if mode & 0o6000)
        assert not privileged, f"{image.reference}: {privileged[:5]}"


def _host_only_certificates() -> list[bytes]:
    """Opening bytes of each CA certificate this machine added to its own trust store."""
    bodies: list[bytes] = []
    for certificate in sorted(HOST_CA_DIR.glob("*.crt")) if HOST_CA_DIR.is_dir() else []:
        bodies += [match.group(1) for match in PEM_BODY.finditer(certificate.read_bytes())]
    return bodies


def test_images_hold_no_machine_paths_keys_or_machine_certificates(
    towline_image: OciImage, runner_image: OciImage
) -> None:
    machine = [str(REPO_ROOT).encode(), str(cache_root()).encode(), str(Path.home() / ".cache").encode()]
    forbidden = [*machine, *_host_only_certificates()]
    for image in (towline_image, runner_image):
        config_text = json.dumps(image.config).encode()
        assert not [f for f in machine if f in config_text], f"{image.reference}: a machine path in its config"
        assert b"PIP_CERT" not in config_text
        for _, tar, member in iter_layer_members(image):
            if not member.isfile() or member.size > 20_000_000:
                continue
            handle = tar.extractfile(member)
            assert handle is not None
            content = handle.read()
            hits = [f for f in forbidden if f in content]
            assert not hits, f"{image.reference}: {member.name} holds {hits[0][:40]!r}"
            assert not PRIVATE_KEY.search(content), f"{image.reference}: {member.name} holds a private key"


def test_runner_runs_a_step_with_a_read_only_root(runner_image: OciImage, runner_rootfs: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    os.chown(results, UID, UID)
    argv, env = image_process(runner_image.config, None)
    step_env = {
        "TOWLINE_ACTION": "data.transform",
        "TOWLINE_INPUT": json.dumps({"data": {"a": 21}, "fields": {"double": "data.a * 2"}}),
        "TOWLINE_IDEMPOTENCY_KEY": "image-test",
        "TOWLINE_DEADLINE_SECONDS": "60",
        "TOWLINE_RESULT_PATH": "/results/result.json",
    }
    completed = run_container(
        runner_rootfs, tmp_path, argv=argv, env=[*env, *(f"{k}={v}" for k, v in step_env.items())],
        binds=[Bind(results, "/results", read_only=False)],
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads((results / "result.json").read_text())
    assert result["ok"] is True
    assert result["output"] == {"double": 42}
    assert [p.name for p in results.iterdir()] == ["result.json"]


def test_the_container_root_is_really_read_only(
    runner_image: OciImage, runner_rootfs: Path, tmp_path: Path
) -> None:
    """The run above proves something only if its root could not be written: try to."""
    _, env = image_process(runner_image.config, None)
    completed = run_container(
        runner_rootfs, tmp_path, env=env,
        argv=["python3", "-c", "import os; print(os.getuid()); open('/opt/towline/planted', 'w')"],
    )
    assert completed.returncode != 0
    assert completed.stdout.strip() == str(UID)
    assert "Read-only file system" in completed.stderr
    assert not (runner_rootfs / "opt" / "towline" / "planted").exists()


def test_operator_image_runs_its_command_with_a_read_only_root(
    towline_image: OciImage, towline_rootfs: Path, tmp_path: Path
) -> None:
    argv, env = image_process(towline_image.config, ["connectors"])
    completed = run_container(towline_rootfs, tmp_path, argv=argv, env=env)
    assert completed.returncode == 0, completed.stderr
    assert "data.transform" in completed.stdout
    # What `towline operator` loads before it reaches for a cluster.
    imports = run_container(towline_rootfs, tmp_path, env=env,
                            argv=["python3", "-c", "import kopf, towline.runtime.wiring; print('ok')"])
    assert (imports.returncode, imports.stdout.strip()) == (0, "ok"), imports.stderr


# What each image's processes import first: the operator and the ingress, a step.
ENTRY_MODULES = {
    TOWLINE_IMAGE: "kopf, towline.runtime.wiring, towline.triggers.ingress.server",
    RUNNER_IMAGE: "towline_connectors.runner, towline_connectors.registry",
}
CODE_FROM = re.compile(r"^# code object from '?(/opt/towline/[^']+?)'?$", re.M)
"""`python3 -v`'s line naming the file a module's code came from: its bytecode, or its source when the
bytecode was missing or stale."""


def test_the_images_python_loads_its_modules_from_bytecode(
    towline_image: OciImage, towline_rootfs: Path, runner_image: OciImage, runner_rootfs: Path, tmp_path: Path
) -> None:
    """Bytecode the interpreter finds stale is compiled again at every start and never kept (the root is
    read-only): about 0.6 s of CPU per operator start and 0.1 s per step when the image's bytecode was stamped
    with modification times its final layer does not keep (images/runner.Containerfile)."""
    for image, rootfs in ((towline_image, towline_rootfs), (runner_image, runner_rootfs)):
        _, env = image_process(image.config, None)
        completed = run_container(rootfs, tmp_path, env=env,
                                  argv=["python3", "-v", "-c", f"import {ENTRY_MODULES[image.reference]}"])
        assert completed.returncode == 0, completed.stderr[-2000:]
        loaded = CODE_FROM.findall(completed.stderr)
        assert len(loaded) > 50, f"{image.reference}: the check sees too few of the image's modules: {loaded}"
        from_source = [path for path in loaded if path.endswith(".py")]
        assert not from_source, (f"{image.reference} compiles {len(from_source)} of {len(loaded)} modules at every "
                                 f"start, e.g. {from_source[:3]}")

