"""The README's walkthrough for an existing cluster, followed word for word on the suite's cluster and real node.

The ```console commands of "Install on your own cluster", "Your first workflow", "Trigger it by webhook",
"Upgrade" and "Uninstall" are read from README.md (`towline_dev.consoleblocks`), so editing the README
changes what runs, and typed in order into one bash process (so `RUN=$(...)`, `&` and `$!` work as in a
terminal). Every command must succeed, and where the README shows what a command prints, the output must
be that, but for what differs from run to run (run names, durations, the user name).

Only what the README itself says stands for something of yours is substituted: `registry.example.com`
(a registry "host, and path if you use one": here a Distribution registry with htpasswd auth over HTTPS on
the node's address, `towline_dev.registry`, with a path), `USER` and `PASSWORD` (its user). `0.1.0` is the
version built. Where the README offers a choice, one path is followed; NOT_RUN says which blocks are left
out and why.

Prepared here, outside the README's text, because it assumes them:
- a working directory that is a copy of this checkout, its `dist/` holding the releases 0.1.0 and 0.2.0
  exactly as `make release` builds them (`towline_dev.releasecache`: built once per content, then reused);
- skopeo (Debian's package at the version versions.py pins), logged in to the registry (`skopeo login`,
  its auth file in a temporary REGISTRY_AUTH_FILE) and trusting its CA (/etc/containers/certs.d);
- helm trusting the registry's CA beside the system's (SSL_CERT_FILE, a bundle of both): the README logs
  helm in (`helm registry login`) and pushes and installs the chart as an OCI artifact;
- the pinned kubectl and helm on PATH, KUBECONFIG the cluster's admin context, HOME a fresh directory
  (the plugin goes to ~/.local) and ~/.local/bin on PATH, as the README asks;
- a node that holds no copy of the two images, so every pod pulls them from the registry with the pull
  secret the README creates; its containerd trusts the registry's CA and holds no credentials;
- no earlier release in `towline-system` (uninstalled, its pods gone), and neither namespace the README
  creates.
All of it is undone afterwards, failure or not: the node's images are loaded again, and the CRDs the
README's last block deletes are applied again for the rest of the session.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.integration.helm.registrysupport import registry_as_the_only_source
from tests.integration.helm.release import Cluster, chart_pods, uninstall
from tests.integration.support import wait_for

from towline_dev import REPO_ROOT
from towline_dev.consoleblocks import BashSession, Block, Command, Ran, console_blocks, substitute
from towline_dev.debpackages import ensure_debian_packages
from towline_dev.existing import ExistingCluster
from towline_dev.images import ensure_towline_images
from towline_dev.install import install_crds
from towline_dev.node.realnode import NodeCluster
from towline_dev.registry import LocalRegistry
from towline_dev.release import NAMESPACE, RELEASE
from towline_dev.releasecache import ensure_release
from towline_dev.versions import WALKTHROUGH_PACKAGES

pytestmark = [pytest.mark.integration, pytest.mark.local_only]

SECTIONS = ("Install on your own cluster", "Your first workflow", "Trigger it by webhook", "Upgrade", "Uninstall")
NOT_RUN = {
    "docker build": "From this checkout, with Docker: there is no Docker daemon here; the release's image "
                    "archives are copied with skopeo instead (\"From a release\")",
    "helm install towline charts/towline": "the chart directory, for images pulled without credentials; the "
                                           "release package with a private registry is installed instead",
    "helm template towline": "Applying the CRDs yourself (crds.enabled=false) instead of the release upgrading "
                             "them: tests/integration/helm/test_helm_upgrade_crds.py runs it",
    "kubectl label crd": "handing CRDs applied by hand to a release: test_helm_upgrade_crds.py and the upgrade "
                         "from the previous release run it",
    "helm install team-a": "Two releases on one cluster: one release per team instead of the walkthrough's one "
                           "for every namespace (beside which, the README says, the install is refused)",
}
VERSIONS = ("0.1.0", "0.2.0")
REGISTRY_PATH = "platform"
HELLO = "towline-hello"
COMMAND_TIMEOUT = 420.0
"""Longer than the README's longest `--timeout` (5m)."""
CERTS_DIR = Path("/etc/containers/certs.d")
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
CHECKS = {
    "skopeo copy": r"Writing manifest to image destination",
    "helm push": r"Pushed: \S+/charts/towline:\d+\.\d+\.\d+",
    "helm registry login": r"Login Succeeded",
    "helm test": r"TEST SUITE:\s+towline-test-operator\s.*Phase:\s+Succeeded",
    "kubectl towline --help": r"(?i)usage: kubectl[- ]towline",
}
"""What the README says in words that a command prints, by the start of the command."""
ROLLED_OUT = "kubectl -n towline-system rollout status deployment/towline-ingress"
_CLIENT_ENV = re.compile(r"^(PIP_\w+|LANG|LC_\w+|(?i:https?_proxy|no_proxy|all_proxy))$")


@dataclass(frozen=True)
class Walkthrough:
    cluster: Cluster
    registry: LocalRegistry
    repository: str
    """What `registry.example.com` stands for: the registry's host and path."""
    checkout: Path
    env: dict[str, str]
    user: str
    work: Path
    seconds: dict[str, float]


def _progress(message: str) -> None:
    print(f"[towline tests] {message}", file=sys.__stderr__, flush=True)


def walkthrough_blocks() -> list[Block]:
    """The README's blocks in those sections, less those of NOT_RUN (each of which must be there once)."""
    blocks = console_blocks((REPO_ROOT / "README.md").read_text(), SECTIONS)
    left_out = []
    for prefix in NOT_RUN:
        found = [block for block in blocks if any(c.text.startswith(prefix) for c in block.commands)]
        assert len(found) == 1, f"NOT_RUN's {prefix!r} should name one README block, found {len(found)}"
        left_out += found
    return [block for block in blocks if block not in left_out]


@pytest.fixture(scope="module")
def walkthrough(
    request: pytest.FixtureRequest, node_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Walkthrough]:
    if isinstance(node_cluster, ExistingCluster):
        pytest.skip("starts a registry on the local node's address and configures its containerd")
    real: NodeCluster = request.getfixturevalue("real_node_with_images")
    assert real.node is not None
    node, cluster, work = real.node, node_cluster, tmp_path_factory.mktemp("readme")
    seconds: dict[str, float] = {}
    ensure_debian_packages(WALKTHROUGH_PACKAGES, _progress, purpose="the README walkthrough test")
    checkout = work / "checkout"
    shutil.copytree(REPO_ROOT, checkout, ignore=shutil.ignore_patterns(
        ".git", "dist", "__pycache__", "*.egg-info", ".*_cache", "build"))
    (checkout / "dist").mkdir()
    for version in VERSIONS:
        began = time.monotonic()
        release = ensure_release(version, _progress)
        seconds[f"release {version} ({'built' if release.built_seconds else 'cached'})"] = time.monotonic() - began
        # Both releases side by side: their files named by version (images.txt and SHA256SUMS, named the same
        # in each, are not what the README's commands read).
        for built in release.directory.glob(f"*{version}*"):
            (checkout / "dist" / built.name).symlink_to(built)
    home, bin_dir = work / "home", work / "bin"
    home.mkdir()
    bin_dir.mkdir()
    for tool in ("kubectl", "helm"):
        (bin_dir / tool).symlink_to(cluster.binaries.path(tool))
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(cluster.kubectl("config", "view", "--raw", "--minify", "--flatten").stdout)
    kubeconfig.chmod(0o600)
    user = cluster.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout.strip()
    archives = ensure_towline_images(_progress)
    with registry_as_the_only_source(cluster, node, work / "registry", archives, _progress) as registry:
        certs, made = CERTS_DIR / registry.host, not CERTS_DIR.exists()
        env = {key: value for key, value in os.environ.items() if _CLIENT_ENV.match(key)}
        env |= {"HOME": str(home), "KUBECONFIG": str(kubeconfig), "REGISTRY_AUTH_FILE": str(work / "auth.json"),
                "PATH": f"{home}/.local/bin:{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "PIP_CACHE_DIR": str(Path.home() / ".cache" / "pip")}  # this machine's, not a fresh download
        repository = f"{registry.host}/{REGISTRY_PATH}"
        bundle = work / "ca-bundle.crt"
        bundle.write_text(Path(SYSTEM_CA_BUNDLE).read_text() + registry.ca_file.read_text())
        env["SSL_CERT_FILE"] = str(bundle)
        try:
            certs.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(registry.ca_file, certs / "ca.crt")
            login = subprocess.run(["skopeo", "login", "--username", registry.username, "--password-stdin",
                                    registry.host], input=registry.password, capture_output=True, text=True,
                                   env=env, timeout=60, check=False)
            assert login.returncode == 0, login.stderr
            # The README starts from a cluster without Towline: it creates both namespaces. (The session's own
            # chart objects create theirs again afterwards, `chart_left_to_helm`.)
            for namespace in (NAMESPACE, HELLO):
                cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true", timeout=180)
            yield Walkthrough(cluster, registry, repository, checkout, env, user, work, seconds)
        finally:
            # As README's "Uninstall" does it: the namespace first, while the archive still runs to release its
            # runs (a run not in the record yet holds the archive's finalizer; with no archive its deletion waits).
            cluster.kubectl("delete", "namespace", HELLO, "--ignore-not-found", "--wait=true", check=False,
                            timeout=120)
            uninstall(cluster, RELEASE, NAMESPACE)
            cluster.kubectl("delete", "secret", "regcred", "-n", NAMESPACE, "--ignore-not-found", check=False)
            install_crds(cluster)  # the README's last block deletes them; the session's other tests need them
            shutil.rmtree(CERTS_DIR if made else certs, ignore_errors=True)
            print(f"\nREADME walkthrough timings: {', '.join(f'{k} {v:.1f} s' for k, v in seconds.items())}")


_VARYING = (
    (re.compile(r"\bhello-towline-release-request-[0-9a-f]{16}\b"), "hello-towline-release-request-<hex>"),
    (re.compile(r"\bhello-towline-[a-z0-9]{5}\b"), "hello-towline-<run>"),
    (re.compile(r"\b(?:\d+m)?\d+(?:\.\d+)?s\b"), "<duration>"),
    (re.compile(r"\s+"), " "),
)


def normalized(lines: list[str] | tuple[str, ...]) -> list[str]:
    """The lines with what differs between runs replaced by a name for it (and runs of blanks by one)."""
    found = []
    for line in lines:
        text = line
        for pattern, name in _VARYING:
            text = pattern.sub(name, text)
        found.append(text.strip())
    return [line for line in found if line]


def _redacted(text: str, walk: Walkthrough) -> str:
    return text.replace(walk.registry.password, "<PASSWORD>")


def _failure(walk: Walkthrough, command: Command, ran: Ran, why: str) -> str:
    return _redacted(f"README.md line {command.line}: {why}\n$ {ran.command}\n--- exit {ran.returncode}, "
                     f"stdout:\n{ran.stdout}--- stderr:\n{ran.stderr}", walk)


def _check(walk: Walkthrough, command: Command, ran: Ran) -> None:
    assert ran.returncode == 0, _failure(walk, command, ran, "the command failed")
    if command.output:
        expected = normalized([line.replace("kubernetes-admin", walk.user) for line in command.output])
        assert normalized(ran.stdout.splitlines()) == expected, _failure(
            walk, command, ran, "the output is not what the README shows:\n  " + "\n  ".join(command.output))
    for prefix, pattern in CHECKS.items():
        if command.text.startswith(prefix):
            assert re.search(pattern, ran.stdout + ran.stderr, re.S), _failure(
                walk, command, ran, f"the output does not say what the README says ({pattern})")


def _assert_release_runs_from_the_registry(walk: Walkthrough, version: str) -> None:
    """Each of the release's pods runs the operator image of `version`, pulled from the registry."""
    image = f"{walk.repository}/towline:{version}"

    def replaced() -> list[dict[str, Any]] | None:
        # `rollout status` may finish before the old ReplicaSet's last pod is marked for deletion. The pod's
        # spec names the tag: its status names whichever tag the node knows the image by (0.1.0 and 0.2.0 are
        # one image, with one ID).
        pods = chart_pods(walk.cluster)
        images = [container["image"] for pod in pods for container in pod["spec"]["containers"]]
        seen = sorted(zip((p["metadata"]["name"] for p in pods), images, strict=True))
        if [seen] != last[-1:]:
            last.append(seen)
        # Two operators, two ingresses, the archive; each container started (the README waits for the operator's
        # and the ingress's rollouts only).
        started = all(status.get("imageID")
                      for pod in pods for status in pod["status"].get("containerStatuses") or [{}])
        return pods if len(pods) == 5 and set(images) == {image} and started else None

    last: list[list[tuple[str, str]]] = []
    try:
        pods = wait_for(f"the release's pods to be those of {version} alone", replaced, timeout=120)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}; the pods (name, image) seen: {last}") from None

    for pod in pods:
        (status,) = pod["status"]["containerStatuses"]
        assert status["imageID"].startswith(f"{walk.repository}/towline@sha256:"), status["imageID"]
        assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}], pod["metadata"]["name"]


def test_the_readme_walkthrough_runs_as_written(walkthrough: Walkthrough) -> None:
    walk = walkthrough
    placeholders = {"registry.example.com": walk.repository, "USER": walk.registry.username,
                    "PASSWORD": walk.registry.password}
    print("\nleft out: " + "; ".join(f"{prefix}: {why}" for prefix, why in NOT_RUN.items()))
    rolled_out = 0
    with BashSession(cwd=walk.checkout, env=walk.env, work=walk.work / "shell") as shell:
        for block in walkthrough_blocks():
            began = time.monotonic()
            for command in block.commands:
                ran = shell.run(substitute(command.text, placeholders), timeout=COMMAND_TIMEOUT)
                print(f"  {ran.seconds:6.1f} s  $ {_redacted(command.text.splitlines()[0], walk)}")
                _check(walk, command, ran)
                if command.text == ROLLED_OUT:
                    _assert_release_runs_from_the_registry(walk, VERSIONS[rolled_out])
                    rolled_out += 1
            key = f"walkthrough: {block.heading}"
            walk.seconds[key] = walk.seconds.get(key, 0.0) + time.monotonic() - began
    assert rolled_out == 2, "the install and the upgrade should each end with the ingress rolled out"
    # Every pod pulled its image from the registry (the node held no copy of either image): the layers of both
    # images, and the upgrade's tag (its layers were there by then: 0.1.0 and 0.2.0 are one image).
    prefix = f"/v2/{REGISTRY_PATH}/"
    fetched = {uri.removeprefix(prefix) for uri in walk.registry.fetched_by_containerd(
        walk.registry.username, ("GET", "HEAD")) if uri.startswith(prefix)}
    for name in ("towline", "towline-runner"):
        assert any(path.startswith(f"{name}/blobs/sha256:") for path in fetched), (name, sorted(fetched))
    assert "towline/manifests/0.2.0" in fetched, sorted(fetched)
    # The chart of both the install and the upgrade came from the registry too, as an OCI artifact helm pulled.
    charts = {uri.removeprefix(prefix) for uri in walk.registry.fetched_by_helm(walk.registry.username)
              if uri.startswith(prefix)}
    assert {f"charts/towline/manifests/{version}" for version in VERSIONS} <= charts, sorted(charts)
    assert not (walk.checkout / "hello-webhook.secret").exists()  # the Uninstall section removed it
    left = json.loads(walk.cluster.kubectl("get", "namespace", HELLO, "--ignore-not-found", "-o", "json").stdout
                      or "{}")
    assert left.get("status", {}).get("phase") in {None, "Terminating"}, left
