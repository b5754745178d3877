"""Code steps on the real node: code.python and code.wasm run through the operator, and their sandboxes hold.

Each hostile step tries one way out as the step author would (raw sockets to the API
server, the metadata address and a host not in allowHosts; a fork loop; memory past its
limit; an endless loop; writing to `/`; a ServiceAccount token; a Secret it was not bound)
and must fail with a message that says what happened, while a sibling step of the same run
still succeeds and another run, started meanwhile, is reconciled to its end. The session's
operator enables code steps only in the namespaces of tests named `test_code_*`
(conftest.code_steps_for_code_tests); the one test named otherwise shows a Workflow using
them is not Ready where they are off.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import wasmtime
import yaml
from tests.integration.support import (
    TEST_SERVER_ADDRESS,
    TEST_SERVER_ALIAS,
    ScriptedServer,
    apply,
    get,
    list_objects,
    ready,
    start_run,
    step_log,
    step_status,
    wait_for_phase,
    workflow,
)

from towline_dev import REPO_ROOT
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess
from towline_dev.node.layout import KUBERNETES_SERVICE_IP, NODE_ADDRESS
from towline_dev.node.probehosts import METADATA_ADDRESS, ProbeHosts
from towline_dev.wasmexamples import build_go_example

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

WAT = REPO_ROOT / "tests" / "fixtures" / "wasm"
TOKEN = "code-step-token-7e41c9"
OTHER = "never-bound-3b8d52"


def create_api_secret(cluster: ControlPlane, ns: str) -> None:
    """Secret `api`: `token` (what steps bind) and `admin` (which no step binds, so no pod mounts it)."""
    cluster.kubectl("create", "secret", "generic", "api", "-n", ns, f"--from-literal=token={TOKEN}",
                    f"--from-literal=admin={OTHER}")


def python_step(step_id: str, source: str, **extra: Any) -> dict[str, Any]:
    body = {"source": source, **extra.pop("with_", {})}
    return {"id": step_id, "action": "code.python", "onFailure": "continue", "with": body, **extra}


def connect_source(raw: bool = False) -> str:
    """Code that opens a socket to inputs.host:inputs.port (raw first when asked) and says what happened."""
    return (
        "import socket\n"
        "def main(inputs):\n"
        + ("    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)\n" if raw else "")
        + "    with socket.create_connection((inputs['host'], inputs['port']), timeout=4):\n"
        "        return {'connected': True}\n"
    )


def run_to_end(cluster: ControlPlane, ns: str, name: str, steps: list[dict[str, Any]],
               timeout: float = 240, params: list[dict[str, Any]] | None = None,
               run_name: str = "run-1") -> dict[str, Any]:
    manifest = workflow(ns, name, steps)
    if params:
        manifest["spec"]["params"] = params
    apply(cluster, manifest)
    verdict = ready(cluster, "workflows.towline.dev", name, ns)
    assert verdict["status"] == "True", (get(cluster, "workflows.towline.dev", name, ns) or {}).get("status")
    run = start_run(cluster, ns, name, run_name)
    return dict(wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"}, timeout=timeout))


def failed_with(run: dict[str, Any], step: str, *fragments: str) -> dict[str, Any]:
    found = step_status(run, step)
    message = found.get("message") or ""
    assert found["phase"] == "Failed", found
    for fragment in fragments:
        assert fragment in message, (step, message)
    return found


def config_map(ns: str, name: str, modules: dict[str, bytes]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
            "binaryData": {key: base64.b64encode(data).decode() for key, data in modules.items()}}


def wat(name: str) -> bytes:
    return bytes(wasmtime.wat2wasm((WAT / f"{name}.wat").read_text()))


def test_code_python_output_flows_to_the_next_step_and_its_prints_reach_the_log_redacted(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    create_api_secret(cluster, ns)
    example = yaml.safe_load((REPO_ROOT / "examples" / "code-steps" / "python" / "workflow.yaml").read_text())
    summarise = example["spec"]["steps"][0]
    summarise["credentials"] = {"api": "api"}
    summarise["with"]["inputs"]["token"] = {"credential": "api", "key": "token"}
    summarise["with"]["source"] = summarise["with"]["source"].replace(
        "    print(f\"order", "    print('the token is', inputs['token'])\n    print(f\"order")
    done = run_to_end(cluster, ns, "order-summary", example["spec"]["steps"], params=example["spec"]["params"])
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert step_status(done, "summarise")["output"] == {
        "id": "A-1042", "skus": ["hose-10m", "pump-200"], "units": 4, "total": 396.5}
    assert step_status(done, "ticket_line")["output"] == {"line": "A-1042: 4 units, 396.5"}
    log = step_log(cluster, ns, done["metadata"]["name"], "summarise")
    assert "order A-1042: 3 lines" in log and "the token is [REDACTED]" in log, log
    assert TOKEN not in log and TOKEN not in json.dumps(done)
    pods = list_objects(cluster, "pods", ns, f"towline.dev/run={done['metadata']['name']},towline.dev/step=summarise")
    context = pods[0]["spec"]["securityContext"]
    assert context["runAsUser"] >= 1_000_000 and context["runAsUser"] == context["runAsGroup"], context
    assert pods[0]["spec"]["containers"][0]["resources"]["limits"]["memory"] == str((128 + 160) << 20)


def test_code_python_is_retried_on_a_retryable_error_and_not_on_others(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    retry = {"limit": 2, "backoff": "fixed", "baseDelaySeconds": 1, "maxDelaySeconds": 1}
    done = run_to_end(cluster, ns, "retries", [
        python_step("flaky", "from towline_step import TransientError\n"
                             "def main(inputs):\n    raise TransientError('the upstream said 503')\n", retry=retry),
        python_step("broken", "def main(inputs):\n    return {'ratio': 1 / 0}\n", retry=retry),
    ])
    flaky = failed_with(done, "flaky", "TransientError: the upstream said 503 (line 3 of the step's source)")
    broken = failed_with(done, "broken", "ZeroDivisionError: division by zero (line 2 of the step's source)")
    assert (flaky["errorClass"], flaky["attempt"]) == ("transient", 3), flaky
    assert (broken["errorClass"], broken["attempt"]) == ("permanent", 1), broken


def test_code_python_sandbox_holds_against_every_way_out(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str, tmp_path: Path
) -> None:
    cluster, ns = towline_installed, team_namespace
    create_api_secret(cluster, ns)
    cluster.kubectl("create", "secret", "generic", "unbound", "-n", ns, f"--from-literal=token={OTHER}")
    # The metadata address answers every SYN that reaches it with a reset, so "refused" alone proves nothing
    # (probehosts.py): its SYN counter must see this machine's own attempt and never the step's.
    metadata = ProbeHosts([f"{METADATA_ADDRESS}:80"], tmp_path)
    with ScriptedServer() as server, metadata:
        before = metadata.arrived(f"{METADATA_ADDRESS}:80")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((METADATA_ADDRESS, 80), timeout=5).close()
        control = metadata.arrived(f"{METADATA_ADDRESS}:80")
        assert control > before, "the control attempt never reached the metadata address"
        server.script("/", (200, {"ok": True}, {}))
        port = int(server.url.rsplit(":", 1)[1])
        networked = {"allowHosts": [TEST_SERVER_ADDRESS]}
        ports = [port, 443, 80, cluster.apiserver_port]

        def connect(step_id: str, host: str, target_port: int, raw: bool = False) -> dict[str, Any]:
            # The budget ends by the Job's creation plus the timeout: thirteen pods starting at once on a loaded
            # node took 53 s once, which left a 4 s connect too little. The code's own timeout is the 4 s.
            return python_step(step_id, connect_source(raw), timeoutSeconds=180, **networked,
                               with_={"ports": ports, "inputs": {"host": host, "port": target_port}})

        escapes = workflow(ns, "escapes", [
            connect("allowed", TEST_SERVER_ADDRESS, port),
            connect("raw_socket", NODE_ADDRESS, cluster.apiserver_port, raw=True),
            connect("api_server", NODE_ADDRESS, cluster.apiserver_port),
            connect("api_service", KUBERNETES_SERVICE_IP, 443),
            connect("metadata", METADATA_ADDRESS, 80),
            connect("other_host", TEST_SERVER_ALIAS, port),
            python_step("fork_loop", "import os\ndef main(inputs):\n    while True:\n        os.fork()\n",
                        timeoutSeconds=60),
            python_step("memory", "def main(inputs):\n    hoard = []\n    while True:\n"
                                  "        hoard.append(bytearray(8 << 20))\n", with_={"memory": "96Mi"}),
            # The runner's budget ends by the Job's creation plus the timeout (TOWLINE_DEADLINE_AT), however
            # long ten pods starting at once take, so the code is stopped and reported before the kubelet acts.
            # The loop spins on a fifth of a core (its pod's limit): stopping it is the same, and it does not take
            # a core of the machine for its whole minute.
            python_step("endless", "def main(inputs):\n    while True:\n        pass\n", timeoutSeconds=60,
                        with_={"cpu": "200m"}),
            python_step("write_root", "def main(inputs):\n    open('/escape', 'w').write('x')\n"),
            python_step("token", "def main(inputs):\n"
                                 "    return open('/var/run/secrets/kubernetes.io/serviceaccount/token').read()\n"),
            python_step("unbound_secret", "import os\ndef main(inputs):\n"
                        "    root = '/var/run/towline/credentials'\n"
                        "    seen = {d: sorted(f for f in os.listdir(f'{root}/{d}') if not f.startswith('.'))\n"
                        "            for d in os.listdir(root)}\n"
                        "    print('mounted:', seen)\n"
                        "    return open(root + '/api/admin').read()\n",
                        credentials={"api": "api"}, with_={"inputs": {"token": {"credential": "api", "key": "token"}}}),
            # The Secret `unbound` exists in the namespace but no step binds it: not where it would be mounted,
            # not anywhere under the pod's secret and credential directories (every path listed, no value).
            python_step("unbound_mount", "import os\ndef main(inputs):\n"
                        "    found = sorted(os.path.join(d, f) for top in ('/var/run/secrets', '/var/run/towline')\n"
                        "                   for d, _, files in os.walk(top) for f in files)\n"
                        "    print('files:', found)\n"
                        "    return open('/var/run/towline/credentials/unbound/token').read()\n",
                        credentials={"api": "api"}, with_={"inputs": {"token": {"credential": "api", "key": "token"}}}),
        ])
        apply(cluster, escapes)
        assert ready(cluster, "workflows.towline.dev", "escapes", ns)["status"] == "True"
        abuse = start_run(cluster, ns, "escapes")
        # Another run in the same namespace, started while the abuse runs, is reconciled to the end meanwhile.
        apply(cluster, workflow(ns, "bystander", [
            {"id": "shape", "action": "data.transform", "with": {"fields": {"a": "1"}}}]))
        assert ready(cluster, "workflows.towline.dev", "bystander", ns)["status"] == "True"
        bystander = wait_for_phase(cluster, ns, start_run(cluster, ns, "bystander", name="bystander-1"),
                                   {"Succeeded", "Failed"}, timeout=240)
        done = dict(wait_for_phase(cluster, ns, abuse, {"Succeeded", "Failed"}, timeout=300))
        assert metadata.arrived(f"{METADATA_ADDRESS}:80") == control, "the step's SYN reached the metadata address"
    assert bystander["status"]["phase"] == "Succeeded", bystander["status"]
    when = {key: {field: datetime.fromisoformat(run["status"][field]) for field in ("startedAt", "finishedAt")}
            for key, run in (("abuse", done), ("bystander", bystander))}
    assert when["abuse"]["startedAt"] <= when["bystander"]["startedAt"], when
    assert when["bystander"]["finishedAt"] <= when["abuse"]["finishedAt"], when
    allowed = step_status(done, "allowed")
    assert allowed.get("output") == {"connected": True}, json.dumps(allowed)
    failed_with(done, "raw_socket", "PermissionError", "Operation not permitted")
    # Unprotected, the API server, its Service and the other test host accept; the enforcer drops or refuses.
    for step in ("api_server", "api_service", "metadata", "other_host"):
        found = failed_with(done, step, "of the step's source")
        assert any(word in found["message"] for word in ("TimeoutError", "ConnectionRefusedError")), found
    failed_with(done, "fork_loop", "BlockingIOError", "Resource temporarily unavailable")
    failed_with(done, "memory", "MemoryError", "with.memory")
    endless = failed_with(done, "endless", "ran past the step's time limit")
    assert endless["errorClass"] == "timeout", endless
    failed_with(done, "write_root", "OSError", "Read-only file system")
    failed_with(done, "token", "FileNotFoundError", "serviceaccount/token")
    failed_with(done, "unbound_secret", "FileNotFoundError", "/api/admin")
    log = step_log(cluster, ns, done["metadata"]["name"], "unbound_secret")
    assert "mounted: {'api': ['token']}" in log, log
    assert OTHER not in json.dumps(done) and TOKEN not in log
    failed_with(done, "unbound_mount", "FileNotFoundError", "/var/run/towline/credentials/unbound/token")
    listing = step_log(cluster, ns, done["metadata"]["name"], "unbound_mount")
    assert "files: [" in listing and "/credentials/api/token" in listing, listing
    assert "unbound" not in listing.split("files:", 1)[1].split("\n", 1)[0] and OTHER not in listing, listing
    assert towline_operator.process is not None and towline_operator.process.poll() is None


def test_code_wasm_modules_from_a_config_map_run_and_their_sandbox_holds(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    modules = {name: wat(name) for name in ("greet", "echo", "loop", "grow", "import_env", "flood", "escape")}
    apply(cluster, config_map(ns, "modules", modules))

    def wasm(step_id: str, key: str, **with_: Any) -> dict[str, Any]:
        return {"id": step_id, "action": "code.wasm", "onFailure": "continue", "timeoutSeconds": 90,
                "with": {"module": {"configMap": {"name": "modules", "key": key}}, **with_}}

    done = run_to_end(cluster, ns, "wasm", [
        wasm("greet", "greet"),
        {**wasm("echo", "echo", inputs={"greeting": "${{ steps.greet.output.greeting }}", "n": [1, 2]}),
         "needs": ["greet"]},
        wasm("loop", "loop", fuel=50_000_000),
        wasm("grow", "grow", memory="8Mi"),
        wasm("flood", "flood", fuel=200_000_000),
        wasm("escape", "escape"),
    ])
    assert step_status(done, "greet")["output"] == {"greeting": "hello from wat"}
    assert step_status(done, "echo")["output"] == {"greeting": "hello from wat", "n": [1, 2]}
    failed_with(done, "loop", "ran out of fuel (50000000 units")
    failed_with(done, "grow", "linear memory at the cap", "with.memory")
    flood = failed_with(done, "flood", "wrote more than 4096 bytes to stdout")
    assert flood["errorClass"] == "output_too_large", flood
    # No preopened directory, no socket: path_open, sock_accept and sock_recv each answer EBADF (8).
    assert step_status(done, "escape")["output"] == {"path_open": 8, "sock_accept": 8, "sock_recv": 8}
    assert "wat says hi" in step_log(cluster, ns, done["metadata"]["name"], "greet")

    # A module that imports what Towline does not provide, and a key the ConfigMap lacks: the operator checks the
    # ConfigMap's modules as the runner would when the run starts, so the run fails before any step pod.
    refused = run_to_end(cluster, ns, "wasm-refused", [wasm("import_env", "import_env"), wasm("missing_key", "nope")],
                         run_name="run-refused")
    message = refused["status"]["message"]
    assert refused["status"]["phase"] == "Failed", refused["status"]
    assert "spec.steps[0].with.module.configMap: imports env.nope, which Towline does not provide" in message, message
    assert "spec.steps[1].with.module.configMap: ConfigMap modules key nope is missing" in message, message
    assert "kubectl create configmap" in message, message
    assert list_objects(cluster, "jobs", ns, f"towline.dev/run={refused['metadata']['name']}") == []
    assert towline_operator.process is not None and towline_operator.process.poll() is None


def test_code_wasm_go_module_runs_from_a_url_pinned_by_sha256_and_other_bytes_are_refused(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    module = build_go_example().read_bytes()
    digest = hashlib.sha256(module).hexdigest()
    order = {"items": [{"name": "pump", "price": 120.5}, {"name": "hose", "price": 35}], "taxRate": 0.2}
    with ScriptedServer() as server:
        server.script("/enrich.wasm", (200, module, {}))
        server.script("/tampered.wasm", (200, module + b"\0", {}))

        def from_url(step_id: str, path: str) -> dict[str, Any]:
            return {"id": step_id, "action": "code.wasm", "onFailure": "continue", "timeoutSeconds": 120,
                    "allowHosts": [TEST_SERVER_ADDRESS],
                    "with": {"module": {"url": f"{server.url}{path}", "sha256": digest}, "inputs": order}}

        done = run_to_end(cluster, ns, "go", [from_url("totals", "/enrich.wasm"),
                                              from_url("tampered", "/tampered.wasm")])
    totals = step_status(done, "totals")
    assert totals["phase"] == "Succeeded", totals
    assert totals["output"] == {"count": 2, "total": 155.5, "totalWithTax": pytest.approx(186.6)}
    failed_with(done, "tampered", "refusing to run it", digest)


def test_a_workflow_with_code_steps_is_not_ready_where_the_chart_has_not_enabled_them(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    apply(cluster, workflow(ns, "code-off", [
        {"id": "shape", "action": "code.python", "with": {"source": "def main(inputs):\n    return 1\n"}},
        {"id": "wasm", "action": "code.wasm", "with": {"module": {"configMap": {"name": "m", "key": "k"}}}},
    ]))
    verdict = ready(cluster, "workflows.towline.dev", "code-off", ns)
    assert verdict["status"] == "False", verdict
    errors = (get(cluster, "workflows.towline.dev", "code-off", ns) or {})["status"]["validationErrors"]
    assert [error["field"] for error in errors] == ["spec.steps[0].action", "spec.steps[1].action"], errors
    for error in errors:
        assert f"code steps are not enabled in namespace {ns}" in error["message"], error
        assert "codeSteps.namespaces" in error["message"], error


def test_code_steps_that_connect_without_allow_hosts_are_not_ready(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """Code steps are on here; a code step's own sockets pass no SSRF guard, so ports without allowHosts (which
    would open them to every public address) keep the Workflow not Ready, naming the field and the fix."""
    cluster, ns = towline_installed, team_namespace
    apply(cluster, workflow(ns, "code-open", [
        {"id": "shape", "action": "code.python",
         "with": {"source": "def main(inputs):\n    return 1\n", "ports": [443]}},
        {"id": "wasm", "action": "code.wasm",
         "with": {"module": {"url": "https://modules.example.com/m.wasm", "sha256": "0" * 64}}},
        {"id": "fine", "action": "code.python", "allowHosts": ["203.0.113.5"],
         "with": {"source": "def main(inputs):\n    return 1\n", "ports": [443]}},
    ]))
    verdict = ready(cluster, "workflows.towline.dev", "code-open", ns)
    assert verdict["status"] == "False", verdict
    errors = (get(cluster, "workflows.towline.dev", "code-open", ns) or {})["status"]["validationErrors"]
    assert [error["field"] for error in errors] == ["spec.steps[0].allowHosts", "spec.steps[1].allowHosts"], errors
    assert "asks for network access (with.ports) but lists no allowHosts" in errors[0]["message"], errors
    assert "fetches its module from a URL but lists no allowHosts" in errors[1]["message"], errors
    assert "allowHosts: [api.example.com]" in errors[0]["message"], errors


def test_code_step_pods_are_admitted_under_restricted_pod_security(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """A namespace enforcing Pod Security `restricted` admits both kinds of code step pod, and they run."""
    cluster, ns = towline_installed, team_namespace
    cluster.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
    apply(cluster, config_map(ns, "modules", {"greet": wat("greet")}))
    done = run_to_end(cluster, ns, "restricted", [
        {"id": "python", "action": "code.python", "with": {"source": "def main(inputs):\n    return {'n': 2}\n"}},
        {"id": "wasm", "action": "code.wasm", "with": {"module": {"configMap": {"name": "modules", "key": "greet"}}}},
    ])
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert step_status(done, "python")["output"] == {"n": 2}
    assert step_status(done, "wasm")["output"] == {"greeting": "hello from wat"}
    pods = list_objects(cluster, "pods", ns, f"towline.dev/run={done['metadata']['name']}")
    assert len(pods) == 2, [pod["metadata"]["name"] for pod in pods]
