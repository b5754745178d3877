"""`helm install` of the packaged chart from a private registry, as a platform team runs it: every
image pulled by the node from a registry that demands a password, each pod with the pull secret
the chart gives it.

The registry (`towline_dev.registry`: Distribution with htpasswd auth, over HTTPS with a CA of its
own) listens on the node's address; the node's containerd trusts its CA and holds no credentials,
so it pulls only with what the kubelet hands it from a pod's `imagePullSecrets`. Both images are
pushed there (`crane push`) as `.../towline-private/towline:<chart version>` and `...-runner:<...>`,
and the node's own copies of them are removed for the module, so what runs was pulled from the
registry, layers included. The chart is `helm package`d as `make release` packages it, pushed to
the same registry as an OCI artifact (`helm push`, after `helm registry login`) and installed from
`oci://.../charts/towline --version <chart version>`, as README's "Install on your own cluster" does,
with only `image.repository` pointing at the registry: the tags are the package's appVersion, the
runner image the chart's default beside the operator's.

Pull secrets: `regcred` in the release namespace (`imagePullSecrets`: operator, ingress, the
`helm test` pod), `regcred-steps` only in the workflow namespace (`stepPods.imagePullSecrets`:
step pods), so a step pod pulls only if the operator gave it that secret. `image.pullPolicy:
Always` makes every chart pod pull with its own secret, even when the node has the image.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import time
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.helm.registrysupport import registry_as_the_only_source
from tests.integration.helm.release import Cluster, chart_pods, on, uninstall
from tests.integration.support import bind_role, start_run, step_status, wait_for, wait_for_phase

from towline.k8s.labels import LABEL_STEP
from towline_dev import REPO_ROOT
from towline_dev.existing import ExistingCluster
from towline_dev.images import RUNNER_IMAGE, TOWLINE_IMAGE, ensure_towline_images
from towline_dev.node import cleanup
from towline_dev.node.realnode import NodeCluster, RealNode
from towline_dev.ocilayout import read_archive
from towline_dev.packaging import CHART, package_chart
from towline_dev.registry import LocalRegistry, PushedImage, pull_secret
from towline_dev.release import NAMESPACE, RELEASE, api_server_egress, set_args, wait_rolled_out

pytestmark = [pytest.mark.integration, pytest.mark.local_only]

WORKFLOWS = "towline-private-steps"
RELEASE_SECRET = "regcred"
STEP_SECRET = "regcred-steps"
PULL_FAILURES = {"ErrImagePull", "ImagePullBackOff"}


@dataclass(frozen=True)
class PrivateRelease:
    cluster: Cluster
    registry: LocalRegistry
    operator: PushedImage
    runner: PushedImage
    archives: dict[str, Path]
    """Each pushed image's OCI archive, by its reference in the registry."""
    held: frozenset[str]
    """Blobs the node held once its copies of the two images were gone, through its other images (a shared
    base layer) or an unpacked snapshot a container still stands on: containerd never fetches them."""
    seconds: dict[str, float]


@pytest.fixture(scope="module")
def private_release(
    request: pytest.FixtureRequest, node_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrivateRelease]:
    if isinstance(node_cluster, ExistingCluster):
        pytest.skip("starts a registry on the local node's address and configures its containerd")
    real: NodeCluster = request.getfixturevalue("real_node_with_images")
    assert real.node is not None
    node, cluster, work = real.node, node_cluster, tmp_path_factory.mktemp("private-registry")
    seconds: dict[str, float] = {}
    began = time.monotonic()
    version = yaml.safe_load((REPO_ROOT / CHART / "Chart.yaml").read_text())["version"]
    package = package_chart(cluster.binaries.path("helm"), REPO_ROOT / CHART, version, work / "dist")
    seconds["helm package"] = time.monotonic() - began
    archives = ensure_towline_images(_progress)
    began = time.monotonic()
    with registry_as_the_only_source(cluster, node, work / "registry", archives, _progress) as registry:
        seconds["registry start, node images removed"] = time.monotonic() - began
        began = time.monotonic()
        operator = registry.push(archives[TOWLINE_IMAGE], "towline-private/towline", version)
        runner = registry.push(archives[RUNNER_IMAGE], "towline-private/towline-runner", version)
        seconds["crane push of both images"] = time.monotonic() - began
        try:
            held = frozenset(cleanup.ctr(node.paths, "content", "ls", "-q", check=True).stdout.split()) | \
                _unpacked_layers(node, archives[TOWLINE_IMAGE], archives[RUNNER_IMAGE])
            print(f"\nblobs of the pushed images the node still holds (through its other images): "
                  f"{_holders(node, held & _blobs(archives[TOWLINE_IMAGE], archives[RUNNER_IMAGE]))}")
            for namespace in (NAMESPACE, WORKFLOWS):
                cluster.kubectl("create", "namespace", namespace, check=False)
            cluster.kubectl("label", "namespace", NAMESPACE, "--overwrite",
                            "pod-security.kubernetes.io/enforce=restricted")
            cluster.kubectl("apply", "-f", "-", stdin=json.dumps(
                pull_secret(RELEASE_SECRET, NAMESPACE, registry.docker_config())))
            cluster.kubectl("apply", "-f", "-", stdin=json.dumps(
                pull_secret(STEP_SECRET, WORKFLOWS, registry.docker_config())))
            values = {
                "image.repository": operator.repository,
                "image.pullPolicy": "Always",
                "imagePullSecrets": json.dumps([{"name": RELEASE_SECRET}]),
                "stepPods.imagePullSecrets": json.dumps([{"name": STEP_SECRET}]),
                **api_server_egress(cluster),
            }
            began = time.monotonic()
            chart = _push_chart(cluster, registry, package, work / "helm-registry.json")
            seconds["helm registry login, helm push of the chart"] = time.monotonic() - began
            began = time.monotonic()
            result = on(cluster, "install", RELEASE, chart, "--version", str(version), "--namespace", NAMESPACE,
                        "--ca-file", str(registry.ca_file), "--registry-config", str(work / "helm-registry.json"),
                        *set_args(values))
            assert result.returncode == 0, result.stdout + result.stderr
            # The chart came from the registry: helm fetched its manifest there, authenticated.
            assert f"/v2/towline-private/charts/towline/manifests/{version}" in \
                registry.fetched_by_helm(registry.username), registry.log_text()[-2000:]
            wait_rolled_out(cluster)
            seconds["helm install to rolled out (pulls included)"] = time.monotonic() - began
            pushed = {operator.reference: archives[TOWLINE_IMAGE], runner.reference: archives[RUNNER_IMAGE]}
            yield PrivateRelease(cluster, registry, operator, runner, pushed, held, seconds)
        finally:
            uninstall(cluster, RELEASE, NAMESPACE)
            cluster.kubectl("delete", "namespace", WORKFLOWS, "--wait=true", check=False, timeout=120)
            cluster.kubectl("delete", "secret", RELEASE_SECRET, "-n", NAMESPACE, "--ignore-not-found", check=False)
            print(f"\nprivate registry timings: {', '.join(f'{k} {v:.1f} s' for k, v in seconds.items())}")


def _progress(message: str) -> None:
    # A first run builds the registry and crane (minutes): say so on the terminal.
    print(f"[towline tests] {message}", file=sys.__stderr__, flush=True)


def _unpacked_layers(node: RealNode, *archives: Path) -> set[str]:
    """Layers of the archives' images that containerd need not fetch: their unpacked snapshot is still there.

    A snapshot outlives the image that made it while a container (of an earlier test's pod that the kubelet
    has not yet removed) stands on it, and containerd's unpacker skips fetching every layer at or below the
    highest chain ID it finds (OCI image spec: ChainID(L0) = DiffID(L0), ChainID(Ln) = sha256(ChainID(Ln-1)
    + " " + DiffID(Ln)))."""
    listed = cleanup.ctr(node.paths, "snapshots", "ls", check=True).stdout.splitlines()[1:]
    snapshots = {line.split()[0] for line in listed if line.strip()}
    unpacked: set[str] = set()
    for archive in archives:
        image = read_archive(archive)
        chain = ""
        chains = []
        for diff_id in image.config["rootfs"]["diff_ids"]:
            chain = diff_id if not chain else "sha256:" + hashlib.sha256(f"{chain} {diff_id}".encode()).hexdigest()
            chains.append(chain)
        present = [index for index, chain_id in enumerate(chains) if chain_id in snapshots]
        if present:
            unpacked |= {layer["digest"] for layer in image.layers[: max(present) + 1]}
    return unpacked


def _blobs(*archives: Path) -> set[str]:
    images = [read_archive(archive) for archive in archives]
    return {digest for image in images
            for digest in (image.manifest["config"]["digest"], *(layer["digest"] for layer in image.layers))}


def _holders(node: RealNode, digests: AbstractSet[str]) -> dict[str, list[str]]:
    """Which of the node's images hold each of `digests` (config or layer), by their manifests."""
    holders: dict[str, list[str]] = {digest: [] for digest in digests}
    for line in cleanup.ctr(node.paths, "images", "ls").stdout.splitlines()[1:]:
        name, _, target = line.split()[:3]
        manifest = json.loads(cleanup.ctr(node.paths, "content", "get", target, check=True).stdout)
        layers = [layer["digest"] for layer in manifest.get("layers", [])]
        for digest in {manifest.get("config", {}).get("digest"), *layers} & holders.keys():
            holders[digest].append(name)
    return holders


def _pod_pulls(cluster: Cluster, namespace: str, pod: str) -> list[str]:
    """The kubelet's `Pulled` event messages for `pod`."""
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "--field-selector",
                                        f"involvedObject.name={pod},reason=Pulled", "-o", "json").stdout)["items"]
    return [event["message"] for event in events]


def _assert_fetched_from_the_registry(release: PrivateRelease, image: PushedImage) -> None:
    """The node fetched the image's manifest, its config and every layer it did not hold through another
    image, from the registry, authenticated as the pull secret's user."""
    registry = release.registry
    fetched = registry.fetched_by_containerd(registry.username)
    name = image.repository.split("/", 1)[1]
    assert f"/v2/{name}/manifests/{image.digest}" in fetched, sorted(fetched)
    pushed = read_archive(release.archives[image.reference])
    assert pushed.manifest["config"]["digest"] not in release.held  # the image's own: always fetched
    needed = _blobs(release.archives[image.reference]) - release.held
    blobs = {uri.rsplit("/", 1)[1] for uri in fetched if uri.startswith(f"/v2/{name}/blobs/")}
    assert needed <= blobs, f"{name}: not fetched from the registry: {sorted(needed - blobs)}"


def _container_image(pod: dict[str, Any]) -> tuple[str, str]:
    (status,) = pod["status"]["containerStatuses"]
    return status["image"], status["imageID"]


def _push_chart(cluster: Cluster, registry: LocalRegistry, package: Path, config: Path) -> str:
    """README's `helm registry login` and `helm push`, to `towline-private/charts`; the chart's oci:// reference."""
    login = on(cluster, "registry", "login", registry.host, "--username", registry.username, "--password",
               registry.password, "--ca-file", str(registry.ca_file), "--registry-config", str(config))
    assert login.returncode == 0, login.stdout + login.stderr
    # Without the login, the registry refuses the push: it takes no anonymous writes.
    anonymous = on(cluster, "push", str(package), f"oci://{registry.host}/towline-private/charts",
                   "--ca-file", str(registry.ca_file), "--registry-config", str(config.with_suffix(".none")))
    assert anonymous.returncode != 0, anonymous.stdout + anonymous.stderr
    pushed = on(cluster, "push", str(package), f"oci://{registry.host}/towline-private/charts",
                "--ca-file", str(registry.ca_file), "--registry-config", str(config))
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert f"Pushed: {registry.host}/towline-private/charts/towline:" in pushed.stdout + pushed.stderr
    return f"oci://{registry.host}/towline-private/charts/towline"


def test_a_pod_without_the_pull_secret_cannot_pull_from_the_registry(private_release: PrivateRelease) -> None:
    """The negative control: the node holds no credentials of its own. The operator's pods have pulled
    this very image already, yet a pod without the secret cannot use it (with the default pull policy):
    Kubernetes 1.35 makes the kubelet pull again, as this pod, an image it pulled with a pull secret."""
    cluster, image = private_release.cluster, private_release.operator
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-pull-secret", "namespace": NAMESPACE},
           "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "c", "image": image.reference, "command": ["true"],
                                    "securityContext": {"allowPrivilegeEscalation": False,
                                                        "capabilities": {"drop": ["ALL"]}}}]}}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    try:
        def refused() -> dict[str, Any] | None:
            found = json.loads(cluster.kubectl("get", "pod", "no-pull-secret", "-n", NAMESPACE, "-o", "json").stdout)
            statuses = found["status"].get("containerStatuses") or [{}]
            waiting = statuses[0].get("state", {}).get("waiting") or {}
            return waiting if waiting.get("reason") in PULL_FAILURES else None

        waiting = wait_for("the kubelet to fail pulling without a pull secret", refused, timeout=120)
        events = json.loads(cluster.kubectl("get", "events", "-n", NAMESPACE, "--field-selector",
                                            "involvedObject.name=no-pull-secret,reason=Failed", "-o", "json").stdout)
        messages = " ".join([waiting.get("message", ""), *(e["message"] for e in events["items"])])
        print(f"\nwithout a pull secret, the kubelet reports: {messages}")
        assert re.search(r"401 Unauthorized|unauthorized", messages, re.I), messages
        assert image.reference in messages, messages
    finally:
        cluster.kubectl("delete", "pod", "no-pull-secret", "-n", NAMESPACE, "--wait=false", check=False)


def test_operator_and_ingress_run_the_pushed_image_pulled_with_the_release_pull_secret(
    private_release: PrivateRelease,
) -> None:
    cluster, image = private_release.cluster, private_release.operator
    pods = chart_pods(cluster)
    components = sorted(p["metadata"]["labels"]["app.kubernetes.io/component"] for p in pods)
    assert components == ["archive", "ingress", "ingress", "operator", "operator"], components
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["spec"]["imagePullSecrets"] == [{"name": RELEASE_SECRET}], name
        assert _container_image(pod) == (image.reference, f"{image.repository}@{image.digest}"), name
        assert any(image.reference in message for message in _pod_pulls(cluster, NAMESPACE, name)), name
    _assert_fetched_from_the_registry(private_release, image)
    # The runner image the operator gives step Jobs is the chart's default beside its own image.
    operator_pod = next(p for p in pods if p["metadata"]["labels"]["app.kubernetes.io/component"] == "operator")
    (container,) = operator_pod["spec"]["containers"]
    env = {variable["name"]: variable.get("value") for variable in container["env"]}
    assert env["TOWLINE_RUNNER_IMAGE"] == private_release.runner.reference
    assert env["TOWLINE_STEP_IMAGE_PULL_SECRETS"] == STEP_SECRET


def test_a_run_pulls_its_step_image_from_the_registry_with_the_step_pods_secret(
    private_release: PrivateRelease,
) -> None:
    cluster, image = private_release.cluster, private_release.runner
    bind_role(cluster, WORKFLOWS, "towline-runner", users=("carol",))
    workflow = {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                "metadata": {"name": "from-the-registry", "namespace": WORKFLOWS},
                "spec": {"steps": [{"id": "shape", "action": "data.transform",
                                    "with": {"data": {"n": 20}, "fields": {"n": "data.n + 1"}}}]}}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(workflow))
    run = start_run(cluster, WORKFLOWS, "from-the-registry", user="carol")
    done = wait_for_phase(cluster, WORKFLOWS, run, {"Succeeded", "Failed"}, timeout=300)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert step_status(done, "shape")["output"] == {"n": 21}
    (pod,) = json.loads(cluster.kubectl("get", "pods", "-n", WORKFLOWS, "-l", LABEL_STEP, "-o", "json").stdout)["items"]
    assert pod["spec"]["imagePullSecrets"] == [{"name": STEP_SECRET}]
    assert _container_image(pod) == (image.reference, f"{image.repository}@{image.digest}")
    pulls = _pod_pulls(cluster, WORKFLOWS, pod["metadata"]["name"])
    assert any(f'Successfully pulled image "{image.reference}"' in message for message in pulls), pulls
    _assert_fetched_from_the_registry(private_release, image)


def test_helm_test_passes_its_pod_pulling_with_the_release_pull_secret(private_release: PrivateRelease) -> None:
    cluster = private_release.cluster
    hooks = [d for d in yaml.safe_load_all(on(cluster, "get", "hooks", RELEASE, "-n", NAMESPACE).stdout) if d]
    (test_pod,) = [d for d in hooks if d["kind"] == "Pod"]
    assert test_pod["spec"]["imagePullSecrets"] == [{"name": RELEASE_SECRET}]
    assert test_pod["spec"]["containers"][0]["image"] == private_release.operator.reference
    result = on(cluster, "test", RELEASE, "-n", NAMESPACE, "--timeout", "5m")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"TEST SUITE:\s+towline-test-operator\s.*Phase:\s+Succeeded", result.stdout, re.S), result.stdout
    pulls = _pod_pulls(cluster, NAMESPACE, "towline-test-operator")
    assert any(private_release.operator.reference in message for message in pulls), pulls
