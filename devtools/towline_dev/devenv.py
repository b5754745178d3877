"""`towline-dev` (what `make dev` runs): a local cluster with a real node, the chart, and a demo run.

Needs root (the real node). In order: the pinned binaries and the two images
(built the first time, printing progress), a control plane with a real node and
the images loaded into its containerd, `helm install` of charts/towline exactly as
the README's install section runs it (the local images; `networkPolicy.apiServer`
narrowed to this API server), so the operator and the webhook ingress run as
containers; the examples applied; the demo API in the test-host network namespace;
the demo workflow and a run by carol, whose first step runs as a container and
which then waits for bob's approval. It prints how to go on, stays up until Ctrl-C
(or SIGTERM), then stops everything, leaving nothing behind.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from towline_dev import REPO_ROOT
from towline_dev.cli import (
    cluster_main,
    default_home,
    export_lines,
    progress,
    start_dev_cluster,
    stop_dev_cluster,
    stop_on_signals,
)
from towline_dev.controlplane import ControlPlane
from towline_dev.demo import (
    DEMO_NAMESPACE,
    DEMO_WORKFLOW,
    EXAMPLES_NAMESPACE,
    create_demo_webhook_secret,
    demo_api_endpoint,
    demo_run,
    demo_workflow,
    grant_demo_roles,
    ingress_url,
    send_command,
)
from towline_dev.node.probehosts import ProbeHosts
from towline_dev.node.realnode import NodeCluster
from towline_dev.processes import wait_for
from towline_dev.release import (
    NAMESPACE,
    ReleaseFailed,
    api_server_egress,
    example_step_type_values,
    install_release,
    local_image_values,
    printable,
)

READY_LINE = "Ctrl-C stops everything and leaves nothing behind."
"""The last line `towline-dev` prints once everything is up (tests wait for it)."""


def wait_for_approval_gate(plane: ControlPlane, run: str, timeout: float = 300) -> dict[str, Any]:
    """The demo run once it waits at its approval (its first step ran as a container); raises if it ended."""
    found: dict[str, Any] = {}

    def at_gate() -> bool:
        found.update(json.loads(plane.kubectl("get", "workflowrun", run, "-n", DEMO_NAMESPACE, "-o", "json").stdout))
        phase = (found.get("status") or {}).get("phase")
        if phase in {"Succeeded", "Failed", "Cancelled"}:
            raise RuntimeError(f"the demo run {run} ended {phase} before its approval: {found['status']}")
        return phase == "AwaitingApproval"

    wait_for(at_gate, timeout=timeout, interval=0.5, what=f"the demo run {run} to reach its approval")
    return found


def approval_name(run: dict[str, Any]) -> str:
    name: str = next(s["approvalName"] for s in run["status"]["steps"] if s.get("approvalName"))
    return name


def _walkthrough(cluster: NodeCluster, state: dict[str, Any], *, started: float, helm: list[str], run: str,
                 approval: str, webhook_command: str, demo_log: Path) -> str:
    assert cluster.plane is not None
    exports = export_lines(state).replace("\n", "\n  ").rstrip()
    patch = '{"spec":{"decision":"Approved","decidedBy":"bob"}}'
    return f"""
Towline is running ({time.monotonic() - started:.0f} s): the chart was installed with

  {printable(["helm", *helm[1:]]).replace(chr(10), chr(10) + "  ")}

and the operator and the webhook ingress run as containers on the local node. The demo
run {run} (started by carol) ran its first step as a container, which called the
demo API at {demo_api_endpoint()}, and now waits for an approval. In another shell:

  {exports}
  kubectl -n {DEMO_NAMESPACE} get workflows,workflowruns,jobs,pods,approvals
  kubectl towline -n {DEMO_NAMESPACE} status {run}
  kubectl -n {EXAMPLES_NAMESPACE} get workflows          # the examples, validated (Ready)

carol started the run, so four-eyes forbids her; alice is not an approver; bob is.
Try alice (and carol) to watch the API server refuse, then approve as bob:

  kubectl --context alice -n {DEMO_NAMESPACE} patch approval {approval} --type merge \\
      -p '{patch.replace("bob", "alice")}'
  kubectl --context bob -n {DEMO_NAMESPACE} patch approval {approval} --type merge \\
      -p '{patch}'
  kubectl towline -n {DEMO_NAMESPACE} status {run}      # deploy and summary ran: Succeeded

(or `kubectl towline --context bob -n {DEMO_NAMESPACE} approve {approval}`). Start another
run as carol with `kubectl towline --context carol -n {DEMO_NAMESPACE} run {DEMO_WORKFLOW}`.

Send a signed webhook delivery (Standard Webhooks) to the Helm-installed ingress; it
starts a run that waits for bob like the first one. Send it twice with the same
--id and the second answer names the same run:

  {webhook_command}

Logs: kubectl -n {NAMESPACE} logs deployment/towline-operator (and deployment/towline-ingress);
a step's: kubectl -n {DEMO_NAMESPACE} logs job/{run}-check-1; the demo API's: {demo_log}
{READY_LINE}
"""


def _start_demo(cluster: NodeCluster) -> tuple[list[str], str, str, str]:
    """The release, the examples, the demo API and the demo run at its gate; what the walkthrough names."""
    plane = cluster.plane
    assert plane is not None
    progress("helm install towline charts/towline (the operator and the webhook ingress, as containers)")
    helm = install_release(plane, {**local_image_values(), **example_step_type_values(), **api_server_egress(plane)})
    for namespace in (DEMO_NAMESPACE, EXAMPLES_NAMESPACE):
        plane.kubectl("create", "namespace", namespace, check=False)
    grant_demo_roles(plane)
    secret_file = create_demo_webhook_secret(plane, cluster.state_dir / "demo-webhook.secret")
    plane.kubectl("apply", "-n", EXAMPLES_NAMESPACE, "-f", str(REPO_ROOT / "examples"))
    plane.kubectl("apply", "-f", "-", stdin=json.dumps(demo_workflow()))
    run = plane.kubectl("create", "-f", "-", "-o", "jsonpath={.metadata.name}", stdin=json.dumps(demo_run()),
                        user="carol").stdout.strip()
    progress(f"demo run {run}: its first step runs as a container and calls the demo API")
    approval = approval_name(wait_for_approval_gate(plane, run))
    webhook_command = send_command(ingress_url(plane, NAMESPACE), secret_file)
    return helm, run, approval, webhook_command


def dev_main(argv: list[str]) -> int:
    if argv[:1] == ["cluster"]:
        return cluster_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="towline-dev", description="make dev: Towline on a local cluster with a real node (needs root); "
        "`towline-dev cluster up|down|env` for the cluster alone")
    parser.add_argument("--home", type=Path, default=None, help=f"state directory (default: {default_home()})")
    args = parser.parse_args(argv)
    home: Path = args.home or default_home()
    started = time.monotonic()
    stop_on_signals()
    cluster: NodeCluster | None = None
    hosts: ProbeHosts | None = None
    failed = False
    try:
        launched = start_dev_cluster(home)
        if launched is None:
            return 1
        cluster, state = launched
        assert cluster.plane is not None and cluster.node is not None
        # Assigned before it starts: a start cut short (Ctrl-C) still has its namespace removed below.
        hosts = ProbeHosts([demo_api_endpoint()], cluster.plane.logs_dir, server="towline_dev.demoapi")
        hosts.start()
        helm, run, approval, webhook_command = _start_demo(cluster)
        demo_log = cluster.plane.logs_dir / f"testhost-{demo_api_endpoint().replace(':', '_')}.log"
        print(_walkthrough(cluster, state, started=started, helm=helm, run=run, approval=approval,
                           webhook_command=webhook_command, demo_log=demo_log), flush=True)
        while cluster.plane.is_running() and cluster.node.is_running():
            time.sleep(0.5)
        print("error: a component of the local cluster exited", file=sys.stderr)
        failed = True
    except KeyboardInterrupt:
        return 0
    except (ReleaseFailed, RuntimeError, TimeoutError, subprocess.CalledProcessError) as error:
        detail = getattr(error, "stderr", "") or ""
        print(f"error: {error}\n{detail}".rstrip(), file=sys.stderr)
        failed = True
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        if hosts is not None:
            hosts.stop()
        if cluster is not None:
            if failed:
                _keep_logs(cluster, home / "failed-logs")
            stop_dev_cluster(cluster, home)
    return 1


def _keep_logs(cluster: NodeCluster, destination: Path) -> None:
    """The component and pod logs, copied out before `stop()` removes the state directory."""
    shutil.rmtree(destination, ignore_errors=True)
    if cluster.plane is not None:
        cluster.plane.copy_logs(destination / "control-plane")
    if cluster.node is not None:
        cluster.node.copy_logs(destination / "node")
    print(f"the logs are kept in {destination}", file=sys.stderr)


def console_main() -> int:
    """The `towline-dev` command (installed by `make install` from devtools/, never shipped)."""
    return dev_main(sys.argv[1:])
