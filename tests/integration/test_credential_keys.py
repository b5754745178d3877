"""A step's pod holds only the Secret keys the step reads; a key its Secret lacks pauses the run naming it.

The volume's `items` list those keys and the volume stays optional, so on a real kubelet a Secret without
the key still lets the pod start: the runner finds the key absent and fails the attempt as `auth`, naming
the Secret, the key and the command that adds it (never a value). The run waits for credential repair
like one whose Secret is missing, and a resume after the repair completes it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.support import (
    ScriptedServer,
    apply,
    get,
    list_objects,
    start_run,
    step_status,
    wait_for,
    wait_for_phase,
)

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

OTHER_VALUE = "other-key-value-3c9d"


def test_a_key_the_secret_lacks_pauses_the_run_naming_secret_and_key_and_the_fix_completes_it(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    cluster.kubectl("create", "secret", "generic", "crm-api", "-n", ns, f"--from-literal=admin-token={OTHER_VALUE}")
    with ScriptedServer() as api:
        calls = api.script("/ok", (200, {"ok": True}, {}))
        apply(cluster, {
            "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "needs-key", "namespace": ns},
            "spec": {"steps": [{"id": "call", "action": "http.request", "credentials": {"crm": "crm-api"},
                                "with": {"url": f"{api.url}/ok",
                                         "auth": {"bearer": {"credential": "crm", "key": "token"}}}}]},
        })
        run = start_run(cluster, ns, "needs-key")

        def paused() -> dict[str, Any] | None:
            found = get(cluster, "workflowruns.towline.dev", run, ns) or {}
            conditions = (found.get("status") or {}).get("conditions", [])
            repair = any(c["type"] == "CredentialsNeedRepair" and c["status"] == "True" for c in conditions)
            return found if repair else None

        found = wait_for("the run to pause for credential repair", paused)
        call = step_status(found, "call")
        message = call.get("message") or ""
        assert call["errorClass"] == "auth", call
        assert "Secret 'crm-api' (credential 'crm')" in message and "keys the step reads (token)" in message
        assert OTHER_VALUE not in json.dumps(found)
        assert calls.requests == [], "the action never ran without its key"
        wait_for("the stuck attempt's Job to be deleted",
                 lambda: not list_objects(cluster, "jobs", ns, f"towline.dev/run={run}"))

        cluster.kubectl("patch", "secret", "crm-api", "-n", ns, "--type", "merge",
                        "-p", json.dumps({"stringData": {"token": "repaired"}}))
        cluster.kubectl("annotate", "workflowrun", run, "-n", ns, "towline.dev/resume=1", user="carol")
        done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert [r["headers"]["Authorization"] for r in calls.requests] == ["Bearer repaired"]
