"""The Job of a code step: sized from its inputs, a user id of its own, a wasm module as one ConfigMap key."""

from __future__ import annotations

from typing import Any

from towline.k8s.objects import RunRef, StepPodSettings
from towline.k8s.stepjobs import CODE_USER_IDS, BuiltinAction, build_step_job
from towline.validation.catalog import CONFIG_MAP_FILE_PATH, connector_catalog

RUN = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf")


def pod(action: str, inputs: dict[str, Any], job_name: str = "towline-step-r-1-code-1") -> dict[str, Any]:
    job = build_step_job(
        RUN, BuiltinAction(connector_catalog()),
        job_name=job_name, step_id="code", attempt=1, action=action, inputs=inputs,
                         credentials={}, idempotency_key="k", timeout_seconds=60, settings=StepPodSettings())
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def test_a_python_step_gets_its_memory_and_cpu_limits_plus_the_runners_share() -> None:
    (container,) = pod("code.python", {"source": "def main(i):\n  return 1\n", "memory": "256Mi",
                                       "cpu": "500m"})["containers"]
    assert container["resources"]["limits"] == {"memory": str((256 + 160) << 20), "cpu": "500m"}


def test_each_code_pod_runs_as_a_user_id_of_its_own_and_other_steps_as_the_runner() -> None:
    users = {pod("code.python", {"source": "x"}, f"towline-step-r-1-code-{n}")["securityContext"]["runAsUser"]
             for n in range(20)}
    assert len(users) == 20 and all(CODE_USER_IDS[0] <= user < CODE_USER_IDS[1] for user in users)
    context = pod("code.python", {"source": "x"})["securityContext"]
    assert context["runAsUser"] == context["runAsGroup"] == context["fsGroup"]
    assert pod("data.transform", {"fields": {"a": "1"}})["securityContext"]["runAsUser"] == 65532


def test_a_wasm_module_from_a_config_map_is_mounted_as_one_optional_read_only_file() -> None:
    spec = pod("code.wasm", {"module": {"configMap": {"name": "mods", "key": "enrich.wasm"}}})
    (volume,) = [v for v in spec["volumes"] if "configMap" in v]
    assert volume["configMap"] == {"name": "mods", "optional": True,
                                   "items": [{"key": "enrich.wasm", "path": CONFIG_MAP_FILE_PATH.rsplit("/", 1)[1]}]}
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert mount == {"name": volume["name"], "mountPath": CONFIG_MAP_FILE_PATH.rsplit("/", 1)[0], "readOnly": True}


def test_a_url_module_mounts_nothing_and_built_ins_keep_the_defaults() -> None:
    spec = pod("code.wasm", {"module": {"url": "https://m.example/e.wasm", "sha256": "0" * 64}})
    assert not [v for v in spec["volumes"] if "configMap" in v]
    (container,) = pod("data.transform", {"fields": {"a": "1"}})["containers"]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "256Mi"}
