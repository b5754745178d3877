"""`helm install` of charts/towline, as the README's install section runs it, into a local cluster.

The values are the README's (`image.repository`, `image.tag`, `runner.image`),
pointing at the images the local node has loaded (`towline_dev.images`), the
example step types' image prefix (`stepTypes.allowedImagePrefixes`), plus
`networkPolicy.apiServer` narrowed to where this cluster's API server really is,
as the README tells users to set it. Runs only the pinned helm and kubectl.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from towline_dev import REPO_ROOT
from towline_dev.controlplane import ControlPlane
from towline_dev.images import RUNNER_IMAGE, TOWLINE_IMAGE

CHART = REPO_ROOT / "charts" / "towline"
RELEASE = "towline"
NAMESPACE = "towline-system"
STEP_TYPE_IMAGE_PREFIX = "localhost/towline-steps"
"""Where the example step types' images live on the local node: the chart value stepTypes.allowedImagePrefixes
the local installs set, so the examples (and nothing from another registry) may run as step types. Written
without its final `/` on purpose: the chart and the operator treat a prefix as ending at a `/`, so
`localhost/towline-steps-evil/...` is not under it (tests/integration/attacks check that it is refused)."""


class ReleaseFailed(RuntimeError):  # noqa: N818 - reads as the condition it reports
    """helm refused the install, or a Deployment of the release did not roll out; says why."""


def local_image_values() -> dict[str, str]:
    """The README's image values, for the images `towline_dev.images` builds and the node loads."""
    repository, tag = TOWLINE_IMAGE.rsplit(":", 1)
    return {"image.repository": repository, "image.tag": tag, "runner.image": RUNNER_IMAGE}


def example_step_type_values() -> dict[str, str]:
    """stepTypes.allowedImagePrefixes for the example step types' local images (and nothing else)."""
    return {"stepTypes.allowedImagePrefixes": json.dumps([STEP_TYPE_IMAGE_PREFIX])}


def set_args(values: dict[str, str]) -> list[str]:
    """`--set` (or `--set-json` for values written as JSON: lists, numbers, booleans) per value."""
    args: list[str] = []
    for key, value in values.items():
        if value[:1] in "[{" or value in {"true", "false"} or value.lstrip("-").isdigit():
            args += ["--set-json", f"{key}={value}"]
        else:
            args += ["--set-string", f"{key}={value}"]
    return args


def api_server_egress(cluster: ControlPlane) -> dict[str, str]:
    """networkPolicy.apiServer narrowed to where this cluster's API server really is (what pods reach
    behind the `kubernetes` Service), as the README tells users to set it; {} (the chart's defaults)
    when it publishes no address, as an API server advertised on loopback does."""
    slices = json.loads(cluster.kubectl("get", "endpointslices", "-n", "default", "-l",
                                        "kubernetes.io/service-name=kubernetes", "-o", "json").stdout)["items"]
    addresses = sorted({a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]})
    ports = sorted({p["port"] for s in slices for p in s.get("ports") or []})
    if not (addresses and ports):
        return {}
    cidrs = [f"{a}/128" if ":" in a else f"{a}/32" for a in addresses]
    return {"networkPolicy.apiServer.cidrs": json.dumps(cidrs), "networkPolicy.apiServer.ports": json.dumps(ports)}


def install_args(values: dict[str, str]) -> list[str]:
    """helm's arguments after the program: the README's `helm install` with `values`."""
    return ["install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace", *set_args(values)]


def printable(argv: list[str]) -> str:
    """`argv` as a command to paste into a shell, one option per line like the README writes it."""
    words = [shlex.quote(word) for word in argv]
    lines = [" ".join(words[:6])]
    index = 6
    while index < len(words):
        take = 2 if words[index].startswith("--set") else 1
        lines.append(" ".join(words[index:index + take]))
        index += take
    return " \\\n    ".join(lines)


CRD_SELECTOR = "app.kubernetes.io/part-of=towline"
"""The label every Towline CRD carries, generated or rendered by the chart."""


def adopt_crds(cluster: ControlPlane, release: str = RELEASE, namespace: str = NAMESPACE) -> None:
    """Let `release` manage the Towline CRDs already on the cluster (applied with kubectl, or by a chart from
    its crds/), as README.md's "Upgrade" says: the ownership label and annotations Helm looks for."""
    cluster.kubectl("label", "crd", "-l", CRD_SELECTOR, "app.kubernetes.io/managed-by=Helm", "--overwrite")
    cluster.kubectl("annotate", "crd", "-l", CRD_SELECTOR, f"meta.helm.sh/release-name={release}",
                    f"meta.helm.sh/release-namespace={namespace}", "--overwrite")


def install_release(cluster: ControlPlane, values: dict[str, str], *, helm: Path | None = None) -> list[str]:
    """`helm install` with `values`, then wait until every Deployment of the release rolled out.

    Returns the helm argv that ran (without the kubeconfig option), to show people.
    """
    program = helm or cluster.binaries.path("helm")
    argv = [str(program), *install_args(values)]
    result = subprocess.run([*argv, "--kubeconfig", str(cluster.kubeconfig)], capture_output=True, text=True,
                            timeout=300, check=False)
    if result.returncode != 0:
        raise ReleaseFailed(f"helm install failed:\n{result.stdout}{result.stderr}")
    wait_rolled_out(cluster)
    return argv


def name_prefix(release: str) -> str:
    """What the chart names `release`'s objects after (its towline.fullname, without overrides):
    the release name if it contains "towline" (towline-operator), else <release>-towline."""
    return release if "towline" in release else f"{release}-towline"


def wait_rolled_out(cluster: ControlPlane, namespace: str = NAMESPACE, timeout_seconds: int = 300, *,
                    release: str = RELEASE) -> None:
    """Every Deployment of the release rolled out: its new pods Ready as real containers."""
    names = cluster.kubectl("get", "deployments", "-n", namespace, "-l", f"app.kubernetes.io/instance={release}",
                            "-o", "name").stdout.split()
    if f"deployment.apps/{name_prefix(release)}-operator" not in names:
        raise ReleaseFailed(f"the release has no operator Deployment in {namespace}: {names}")
    for name in names:
        rollout = cluster.kubectl("rollout", "status", name, "-n", namespace, f"--timeout={timeout_seconds}s",
                                  check=False, timeout=timeout_seconds + 20)
        if rollout.returncode != 0:
            raise ReleaseFailed(f"{name} did not roll out:\n{rollout.stdout}{rollout.stderr}"
                                f"{describe(cluster, namespace)}")


def describe(cluster: ControlPlane, namespace: str) -> str:
    """The namespace's pods, the last log lines of those not Ready (what a failed rollout's container said), and
    the latest events, for an error message."""
    pods = cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
    listed = cluster.kubectl("get", "pods", "-n", namespace, "-o", "json", check=False)
    logs = []
    for pod in (json.loads(listed.stdout).get("items", []) if listed.returncode == 0 else []):
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (pod.get("status") or {}).get("conditions") or [])
        if not ready:
            name = pod["metadata"]["name"]
            tail = cluster.kubectl("logs", name, "-n", namespace, "--all-containers", "--tail=30", check=False)
            logs.append(f"--- {name} (not Ready), last log lines ---\n{tail.stdout[-3000:]}{tail.stderr[-500:]}")
    events = cluster.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False).stdout
    return f"\n{pods}\n" + "\n".join(logs) + f"\n{events[-4000:]}"


INGRESS_SERVICE_ACCOUNT = "towline-ingress"
"""The chart's `ingress.serviceAccount.name`."""


def grant_signing_secrets(
    cluster: ControlPlane, namespace: str, secrets: list[str], *, ingress_namespace: str = NAMESPACE
) -> None:
    """What a namespace owner does to opt in: the ingress may `get` exactly these Secrets here."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "towline-webhook-secrets", "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": secrets}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "towline-webhook-secrets", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "towline-webhook-secrets"},
        "subjects": [{"kind": "ServiceAccount", "name": INGRESS_SERVICE_ACCOUNT, "namespace": ingress_namespace}],
    }
    for document in (role, binding):
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(document))
