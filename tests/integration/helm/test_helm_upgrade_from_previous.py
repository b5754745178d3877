"""An upgrade from the previous chart and operator to this checkout's, with runs in flight, done as
README.md's "Upgrade" section says: the previous chart installed its CRDs from its crds/, which no release
manages, so `helm upgrade` refuses them naming the two commands that hand them to the release; after those,
`helm upgrade` upgrades the CRDs with the release (crds.enabled).

The previous release is built from PREVIOUS_COMMIT of this repository (`towline_dev.previous`: its
chart packaged, its images built and tagged `:prev`, cached by commit) and installed with Helm on
the session's real node. Under its operator one run waits at an approval and another has a step
running (its HTTP call held open by the test's server). After the upgrade the new operator finishes
both: every step ran exactly once, and what the old operator wrote in the runs' status is kept.
Fixtures: conftest.py in this directory.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.helm.release import Cluster, chart_pods, container_env, deployment, on, uninstall
from tests.integration.pluginsupport import towline
from tests.integration.support import (
    ScriptedServer,
    apply,
    bind_role,
    get,
    list_objects,
    start_run,
    step_status,
    wait_for,
    wait_for_phase,
)

from towline.archive import load_private_key, public_key_pem
from towline.k8s.labels import LABEL_RUN, LABEL_STEP
from towline_dev.chartcrds import TEMPLATE_PATH
from towline_dev.images import RUNNER_IMAGE, TOWLINE_IMAGE
from towline_dev.node.layout import POD_CIDR, SERVICE_CIDR
from towline_dev.node.realnode import NodeCluster
from towline_dev.packaging import package_chart
from towline_dev.previous import PreviousRelease, ensure_previous_release
from towline_dev.release import (
    CHART,
    CRD_SELECTOR,
    NAMESPACE,
    RELEASE,
    adopt_crds,
    api_server_egress,
    name_prefix,
    set_args,
    wait_rolled_out,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

PREVIOUS_COMMIT = "6d0e67dfb1b1e95effe463f289f19d0447d6f792"
"""The last commit before the install-anywhere work ("Code steps: one sandbox call for both kinds"):
the next one (4ec4693) closed the chart's values schema, added pull secrets and scheduling for every
pod and moved the ingress values into one section; then came `make release` and the lean runner image
as the default. So this is the chart layout and operator that a release cut before that work shipped."""

RUNS_NAMESPACE = "towline-upgrade"


def _progress(message: str) -> None:
    print(f"[towline tests] {message}", file=sys.__stderr__, flush=True)


@dataclass
class Timings:
    seconds: dict[str, float]

    def record(self, what: str, started: float) -> None:
        self.seconds[what] = round(time.monotonic() - started, 1)
        _progress(f"upgrade test: {what} took {self.seconds[what]:.1f} s")


@pytest.fixture(scope="module")
def previous(node_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[PreviousRelease]:
    """The previous release built (once per commit) and its `:prev` images in the node's containerd;
    removed from the node afterwards, so no later test can run them by accident."""
    if request.getfixturevalue("existing_cluster") is not None:
        pytest.skip("loads the previous release's images into the local real node's containerd")
    real: NodeCluster = request.getfixturevalue("real_node")
    assert real.node is not None
    started = time.monotonic()
    release = ensure_previous_release(PREVIOUS_COMMIT, _progress)
    _progress(f"previous release ready in {time.monotonic() - started:.1f} s "
              f"(its first build took {release.build_seconds:.0f} s)")
    loaded: list[str] = []
    try:
        for reference, archive in release.images.items():
            real.node.load_image(archive)
            loaded.append(reference)
        yield release
    finally:
        present = set(real.node.images())
        for reference in loaded:
            if reference in present:
                real.node.remove_image(reference)
        left = set(real.node.images()) & set(loaded)
        assert not left, f"the previous release's images are still on the node: {sorted(left)}"


def _gated(namespace: str) -> dict[str, Any]:
    """A check, an approval bob gives, then the change: paused at the approval during the upgrade."""
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "gated", "namespace": namespace},
            "spec": {"steps": [
                {"id": "check", "action": "data.transform",
                 "with": {"data": {"version": "2.4.1"}, "fields": {"version": "data.version"}}},
                {"id": "review", "needs": ["check"],
                 "approval": {"message": "Deploy ${{ steps.check.output.version }}?",
                              "approvers": {"users": ["bob"]}, "fourEyes": True, "expiresAfter": "1h"}},
                {"id": "deploy", "needs": ["review"], "action": "data.transform",
                 "with": {"data": {"v": "${{ steps.check.output.version }}"}, "fields": {"deployed": "data.v"}}},
            ]}}


def _slow(namespace: str, api: str) -> dict[str, Any]:
    """An HTTP call the test holds open across the upgrade, then a step that uses its answer."""
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "slow", "namespace": namespace},
            "spec": {"steps": [
                {"id": "fetch", "action": "http.request", "timeoutSeconds": 900,
                 "with": {"url": f"{api}/build", "select": "response.body", "timeoutSeconds": 840}},
                {"id": "publish", "needs": ["fetch"], "action": "data.transform",
                 "with": {"data": {"b": "${{ steps.fetch.output.build }}"}, "fields": {"published": "data.b"}}},
            ]}}


def _step_jobs(cluster: Cluster, namespace: str, run: str) -> dict[str, list[str]]:
    """Each step's Jobs (by name) of `run`."""
    jobs: dict[str, list[str]] = {}
    for job in list_objects(cluster, "jobs", namespace, f"{LABEL_RUN}={run}"):
        jobs.setdefault(job["metadata"]["labels"][LABEL_STEP], []).append(job["metadata"]["name"])
    return jobs


def _step_images(cluster: Cluster, namespace: str, run: str) -> dict[str, set[str]]:
    """The images each step's pods ran."""
    images: dict[str, set[str]] = {}
    for pod in list_objects(cluster, "pods", namespace, f"{LABEL_RUN}={run}"):
        step = pod["metadata"]["labels"][LABEL_STEP]
        images.setdefault(step, set()).update(c["image"] for c in pod["spec"]["containers"])
    return images


def _run(cluster: Cluster, name: str) -> dict[str, Any]:
    found = get(cluster, "workflowruns.towline.dev", name, RUNS_NAMESPACE)
    assert found is not None, f"run {name} is gone"
    return found


def _approve(cluster: Cluster, approval: str, user: str) -> subprocess.CompletedProcess[str]:
    """`user` approves through the API server, where the chart's admission policy decides who may."""
    patch = {"spec": {"decision": "Approved", "decidedBy": user}}
    return cluster.kubectl("patch", "approval", approval, "-n", RUNS_NAMESPACE, "--type", "merge",
                           "-p", json.dumps(patch), user=user, check=False)


def test_upgrade_from_the_previous_release_finishes_the_runs_in_flight(
    node_cluster: Cluster, previous: PreviousRelease, tmp_path: Path,
) -> None:
    cluster, timings = node_cluster, Timings({})
    chart_version = str(yaml.safe_load((CHART / "Chart.yaml").read_text())["version"])
    new_chart = package_chart(cluster.binaries.path("helm"), CHART, chart_version, tmp_path)
    local_values = {"egress.podCIDRs": json.dumps([POD_CIDR]), "egress.serviceCIDRs": json.dumps([SERVICE_CIDR]),
                    **api_server_egress(cluster)}
    previous_images = {"image.repository": "localhost/towline", "image.tag": "prev",
                       "runner.image": "localhost/towline-runner:prev"}
    hold = threading.Event()
    uninstall(cluster, RELEASE, NAMESPACE)
    try:
        with ScriptedServer() as api:
            build = api.script("/build", (200, {"build": "b-17"}, {}), hold=hold)

            # The previous release, as a user installed it: Helm created its CRDs (so another field manager
            # owns them), then the chart with the local node's values.
            started = time.monotonic()
            crds = on(cluster, "show", "crds", str(previous.chart))
            assert crds.returncode == 0 and "CustomResourceDefinition" in crds.stdout, crds.stderr
            cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=helm", "-f", "-",
                            stdin=crds.stdout)
            # As on a cluster where only that chart ever installed them: no release's ownership on them.
            cluster.kubectl("annotate", "crd", "-l", CRD_SELECTOR, "meta.helm.sh/release-name-",
                            "meta.helm.sh/release-namespace-", "helm.sh/resource-policy-")
            cluster.kubectl("label", "crd", "-l", CRD_SELECTOR, "app.kubernetes.io/managed-by-")
            cluster.kubectl("create", "namespace", NAMESPACE, check=False)
            cluster.kubectl("label", "namespace", NAMESPACE, "--overwrite",
                            "pod-security.kubernetes.io/enforce=restricted")
            installed = on(cluster, "install", RELEASE, str(previous.chart), "--namespace", NAMESPACE,
                           *set_args({**previous_images, **local_values}))
            assert installed.returncode == 0, installed.stdout + installed.stderr
            wait_rolled_out(cluster)
            timings.record("install of the previous release (helm install, rollout)", started)
            assert deployment(cluster)["spec"]["template"]["spec"]["containers"][0]["image"] == \
                "localhost/towline:prev"

            # Runs in flight under the previous operator.
            started = time.monotonic()
            cluster.kubectl("create", "namespace", RUNS_NAMESPACE, check=False)
            bind_role(cluster, RUNS_NAMESPACE, "towline-runner", users=("carol",))
            bind_role(cluster, RUNS_NAMESPACE, "towline-approver", users=("bob", "carol"))
            apply(cluster, _gated(RUNS_NAMESPACE))
            apply(cluster, _slow(RUNS_NAMESPACE, api.url))
            start_run(cluster, RUNS_NAMESPACE, "gated", "gated-1", user="carol")
            start_run(cluster, RUNS_NAMESPACE, "slow", "slow-1", user="carol")
            waiting = wait_for_phase(cluster, RUNS_NAMESPACE, "gated-1", {"AwaitingApproval"}, timeout=300)
            approval = step_status(waiting, "review")["approvalName"]
            wait_for("the held step to call the test's server", lambda: build.requests, timeout=300)
            running = wait_for("the held step to show Running", lambda: (
                r if step_status(r := _run(cluster, "slow-1"), "fetch")["phase"] == "Running" else None), timeout=60)
            timings.record("runs in flight under the previous operator", started)
            before = {"gated-1": _run(cluster, "gated-1")["status"], "slow-1": running["status"]}
            assert step_status({"status": before["gated-1"]}, "check")["phase"] == "Succeeded", before["gated-1"]
            started_steps = {s["id"] for s in running["status"]["steps"] if s["phase"] != "Pending"}
            assert started_steps == {"fetch"}, running["status"]

            # The upgrade, as README.md's "Upgrade" section does it from a release package, with this
            # checkout's images (their tags were set at the install, so the new ones are set). The CRDs the previous
            # chart installed belong to no release: the upgrade refuses them, saying how to hand them over.
            started = time.monotonic()
            repository, tag = TOWLINE_IMAGE.rsplit(":", 1)
            assert repository == previous_images["image.repository"]
            upgrade = ("upgrade", RELEASE, str(new_chart), "-n", NAMESPACE, "--reset-then-reuse-values",
                       *set_args({"image.tag": tag, "runner.image": RUNNER_IMAGE}))
            refused = on(cluster, *upgrade)
            assert refused.returncode != 0 and "no Helm release manages it" in refused.stderr, refused.stderr
            assert deployment(cluster)["spec"]["template"]["spec"]["containers"][0]["image"] == \
                "localhost/towline:prev", "a refused upgrade changed the release"
            adopt_crds(cluster)  # README's `kubectl label crd ...` and `kubectl annotate crd ...`
            upgraded = on(cluster, *upgrade)
            assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
            # The release now upgrades the CRDs itself: they are the new chart's, kept on uninstall.
            rendered = on(cluster, "template", RELEASE, str(new_chart), "--show-only", TEMPLATE_PATH)
            assert rendered.returncode == 0, rendered.stderr
            for crd in (d for d in yaml.safe_load_all(rendered.stdout) if d):
                live = json.loads(cluster.kubectl("get", "crd", crd["metadata"]["name"], "-o", "json").stdout)
                schemas = [[v["schema"] for v in d["spec"]["versions"]] for d in (live, crd)]
                assert schemas[0] == schemas[1], crd["metadata"]["name"]
                assert live["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep", live["metadata"]
            wait_rolled_out(cluster)
            wait_for("only the new operator's pods to be left", lambda: all(
                p["spec"]["containers"][0]["image"] == TOWLINE_IMAGE
                for p in chart_pods(cluster, "app.kubernetes.io/component=operator")), timeout=120)
            timings.record("upgrade (refused, CRDs handed to the release, helm upgrade, rollout)", started)
            env = container_env(deployment(cluster))
            assert env["TOWLINE_RUNNER_IMAGE"] == RUNNER_IMAGE
            # What the install set and the upgrade did not name is kept (--reset-then-reuse-values).
            assert env["TOWLINE_CLUSTER_CIDRS"] == f"{POD_CIDR},{SERVICE_CIDR}"
            for name, status in before.items():
                assert _run(cluster, name)["status"]["phase"] == status["phase"], name

            # The new operator finishes both runs.
            started = time.monotonic()
            hold.set()
            # The new chart's admission policy guards the Approval the previous operator created.
            refused = _approve(cluster, approval, "carol")
            assert refused.returncode != 0 and "not an allowed approver" in refused.stderr, refused.stderr
            approved = _approve(cluster, approval, "bob")
            assert approved.returncode == 0, approved.stderr
            done = {name: wait_for_phase(cluster, RUNS_NAMESPACE, name, {"Succeeded", "Failed", "Cancelled"},
                                         timeout=300) for name in ("gated-1", "slow-1")}
            timings.record("runs finishing under the new operator", started)
            jobs = {name: _step_jobs(cluster, RUNS_NAMESPACE, name) for name in done}
            images = {name: _step_images(cluster, RUNS_NAMESPACE, name) for name in done}

            # The archive came with the upgrade (on by default): the runs the previous operator started are
            # held, written when they end, and their namespace's chain verifies with the release's public key.
            started = time.monotonic()
            archived = wait_for("both runs in the archive", lambda: (
                names if set(done) <= (names := _archived_runs(cluster)) else None), timeout=180)
            # The aggregated API answers 503 while the API server has not yet seen the archive's pod ready again
            # (an archive restarted under load): asked again then; any other answer is the verdict.
            verified = wait_for("the archive's verdict on the chain", lambda: (
                result if "service unavailable" not in (result := _verify_archive(cluster, tmp_path)).stderr
                else None), timeout=120)
            timings.record("runs in flight archived and verified", started)
    finally:
        hold.set()
        uninstall(cluster, RELEASE, NAMESPACE)
        cluster.kubectl("delete", "namespace", RUNS_NAMESPACE, "--wait=false", check=False)

    for run in done.values():
        assert run["status"]["phase"] == "Succeeded", json.dumps(run["status"], indent=1)[:4000]
    gated, slow = done["gated-1"], done["slow-1"]
    assert step_status(gated, "check")["output"] == {"version": "2.4.1"}
    assert step_status(gated, "review")["decidedBy"] == "bob"
    assert step_status(gated, "deploy")["output"] == {"deployed": "2.4.1"}
    assert step_status(slow, "fetch")["output"] == {"build": "b-17"}
    assert step_status(slow, "publish")["output"] == {"published": "b-17"}

    # The steps before the upgrade ran the previous runner image, those after it this checkout's.
    previous_runner = previous_images["runner.image"]
    assert images == {"gated-1": {"check": {previous_runner}, "deploy": {RUNNER_IMAGE}},
                      "slow-1": {"fetch": {previous_runner}, "publish": {RUNNER_IMAGE}}}, images

    # No step ran twice: one request to the server, one Job and one attempt per step.
    assert len(build.requests) == 1, build.requests
    for name, run in done.items():
        assert all(len(names) == 1 for names in jobs[name].values()), jobs
        for step in run["status"]["steps"]:
            gate = "approval" in _spec_step(run, step["id"])
            assert step["attempt"] == (0 if gate else 1), step
            assert [h["attempt"] for h in step.get("history") or []] == ([] if gate else [1]), step

    # What the previous operator wrote is kept: the finished step as it was, the held step's attempt,
    # the run's start and the Workflow it copied.
    for name, run in done.items():
        old, new = before[name], run["status"]
        assert new["startedAt"] == old["startedAt"] and new["workflowSpec"] == old["workflowSpec"], name
        for step in old["steps"]:
            now = step_status(run, step["id"])
            if step["phase"] in {"Succeeded", "Failed", "Skipped"}:
                assert _as_read(now) == _as_read(step), (name, step["id"])
            elif step["phase"] == "Running":
                kept = ("attempt", "jobName", "startedAt", "idempotencyKey", "approvalName", "expiresAt")
                assert {k: now.get(k) for k in kept} == {k: step.get(k) for k in kept}, (name, step["id"])
    assert archived == set(done), archived
    assert verified.returncode == 0 and f"{RUNS_NAMESPACE}: verified " in verified.stdout, \
        verified.stdout + verified.stderr
    _progress(f"upgrade test timings: {json.dumps(timings.seconds)}")


def _archived_runs(cluster: Cluster) -> set[str]:
    """The runs of RUNS_NAMESPACE the archive serves (its aggregated API, as an admin reads it)."""
    listed = cluster.kubectl("get", "archivedruns.archive.towline.dev", "-n", RUNS_NAMESPACE, "-o", "json",
                             check=False)
    if listed.returncode != 0:
        return set()
    return {item["metadata"]["name"] for item in json.loads(listed.stdout)["items"]}


def _verify_archive(cluster: Cluster, work: Path) -> subprocess.CompletedProcess[str]:
    """`kubectl towline verify --archive` with the public key of the release's signing key (docs/archive.md)."""
    secret = get(cluster, "secret", f"{name_prefix(RELEASE)}-archive-signing-key", NAMESPACE)
    assert secret is not None, "the archive's signing key Secret is missing"
    private = load_private_key(base64.b64decode(secret["data"]["signing-key.pem"]))
    (work / "archive-public.pem").write_bytes(public_key_pem(private))
    return towline(cluster, RUNS_NAMESPACE, "verify", "--archive", RUNS_NAMESPACE,
                   "--key", str(work / "archive-public.pem"), user="admin")


def _spec_step(run: dict[str, Any], step_id: str) -> dict[str, Any]:
    for step in run["status"]["workflowSpec"]["steps"]:
        if step["id"] == step_id:
            return dict(step)
    raise AssertionError(f"{step_id} is not in the run's copy of its Workflow")


EMPTY_DEFAULTS = {"attemptGroup": 0, "credentialsUsed": [], "history": [], "pausedForCredentials": False}
"""The step entry's fields a new operator leaves off the wire at their default (docs/api.md, WorkflowRun)."""


def _as_read(step: dict[str, Any]) -> dict[str, Any]:
    """A step entry as a reader takes it: a field left out is at its default, so both writings compare equal."""
    return {**EMPTY_DEFAULTS, **step}
