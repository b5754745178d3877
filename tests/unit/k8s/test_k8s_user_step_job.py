"""The pod of a user step type: the runner's `prepare` first, then the user's hardened container; its result read."""

from __future__ import annotations

from typing import Any

from towline.api.steptype import ResolvedStepType, StepTypeSpec
from towline.k8s.objects import RunRef, StepPodSettings
from towline.k8s.observe import parse_result, ran_image
from towline.k8s.stepimage import foreign_run
from towline.k8s.stepjobs import StepTypeImage, build_step_job
from towline_step.protocol import DEFAULT_INPUTS_PATH

RUN = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf")
SETTINGS = StepPodSettings(image="localhost/towline-runner:dev", isolation_probe="10.96.0.1:443")
TYPE = ResolvedStepType(kind="StepType", name="deploy", spec=StepTypeSpec.model_validate({
    "image": "registry.example.com/team/deploy:1.4.0",
    "command": ["/deploy"], "args": ["--verbose"],
    "credentials": [{"name": "api", "keys": ["token", "ca.crt"]}, {"name": "unused", "keys": ["x"]}],
    "resources": {"limits": {"memory": "128Mi", "cpu": "500m"}},
    "timeoutSeconds": 90,
}))


def job(**changes: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "job_name": "towline-step-r-1-roll-1", "step_id": "roll", "attempt": 1, "action": "steptype/deploy",
        "step_type": TYPE, "inputs": {"replicas": 2}, "credentials": {"api": "deploy-token"},
        "idempotency_key": "idem-1", "timeout_seconds": None, "allow_hosts": ["deploy.example.com"],
        "settings": SETTINGS, **changes,
    }
    return build_step_job(RUN, StepTypeImage(arguments.pop("step_type")), **arguments)


def env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container["env"]}


def test_the_runner_prepares_first_and_the_users_image_runs_after() -> None:
    pod = job()["spec"]["template"]["spec"]
    [prepare] = pod["initContainers"]
    [user] = pod["containers"]
    assert (prepare["name"], prepare["image"], prepare["command"], prepare["args"]) == (
        "prepare", SETTINGS.image, list(SETTINGS.command), ["--prepare"])
    assert env(prepare)["TOWLINE_ISOLATION_PROBE"] == "10.96.0.1:443"
    assert env(prepare)["TOWLINE_INPUT"] == '{"replicas":2}'
    assert (user["name"], user["image"], user["command"], user["args"]) == (
        "step", "registry.example.com/team/deploy:1.4.0", ["/deploy"], ["--verbose"])


def test_the_user_container_gets_the_protocol_and_nothing_of_the_runners() -> None:
    user = job()["spec"]["template"]["spec"]["containers"][0]
    assert env(user) == {
        "TOWLINE_PROTOCOL_VERSION": "1",
        "TOWLINE_STEP_TYPE": "steptype/deploy",
        "TOWLINE_INPUTS_PATH": DEFAULT_INPUTS_PATH,
        "TOWLINE_CREDENTIALS_DIR": "/var/run/towline/credentials",
        "TOWLINE_RESULT_PATH": "/dev/termination-log",
        "TOWLINE_IDEMPOTENCY_KEY": "idem-1",
        "TOWLINE_DEADLINE_SECONDS": "85",
        "TOWLINE_ALLOW_HOSTS": '["deploy.example.com"]',
    }
    assert {m["mountPath"]: m.get("readOnly", False) for m in user["volumeMounts"]} == {
        "/tmp": False, "/var/run/towline/step": True, "/var/run/towline/credentials/api": True}


def test_only_the_declared_keys_of_bound_slots_are_mounted() -> None:
    pod = job()["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"cred-api": {"secretName": "deploy-token", "optional": True, "defaultMode": 0o440,
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}, {"key": "token", "path": "token"}]}}


def test_the_pod_is_hardened_like_every_step_pod() -> None:
    manifest = job()
    pod = manifest["spec"]["template"]["spec"]
    assert manifest["spec"]["backoffLimit"] == 0 and manifest["spec"]["activeDeadlineSeconds"] == 90
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsNonRoot"] is True
    for container in (*pod["initContainers"], *pod["containers"]):
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "50m", "memory": "64Mi"},
                                                 "limits": {"memory": "128Mi", "cpu": "500m"}}
    assert manifest["spec"]["template"]["metadata"]["labels"]["towline.dev/step-pod"] == "true"


def terminated(code: int, message: str = "", reason: str = "Error") -> dict[str, Any]:
    return {"state": {"terminated": {"exitCode": code, "message": message, "reason": reason}}}


def pod_with(init: dict[str, Any] | None, user: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "spec": {"initContainers": [{"name": "prepare"}], "containers": [{"name": "step"}]},
        "status": {"initContainerStatuses": [{"name": "prepare", **(init or {"state": {"running": {}}})}],
                   "containerStatuses": [{"name": "step", **(user or {"state": {"waiting": {}}})}]},
    }


def test_a_failed_prepare_is_the_attempts_result_and_the_user_never_ran() -> None:
    document = '{"ok":false,"errorClass":"transient","message":"egress isolation not in effect"}'
    result = parse_result(pod_with(terminated(75, document), None))
    assert result is not None and (result.ok, result.error_class) == (False, "transient")


def test_the_user_containers_document_is_the_result() -> None:
    result = parse_result(pod_with(terminated(0, reason="Completed"),
                                   terminated(0, '{"ok":true,"output":{"revision":7}}', "Completed")))
    assert result is not None and (result.ok, result.output) == (True, {"revision": 7})


def test_a_user_container_without_a_document_fails_by_its_exit_code() -> None:
    done = terminated(0, reason="Completed")
    retry = parse_result(pod_with(done, terminated(75)))
    assert retry is not None and (retry.error_class, retry.retryable) == ("transient", True)
    assert retry.message is not None and "exited with code 75 without writing a result document" in retry.message
    broken = parse_result(pod_with(done, terminated(3)))
    assert broken is not None and (broken.error_class, broken.retryable) == ("permanent", False)
    silent_success = parse_result(pod_with(done, terminated(0, reason="Completed")))
    assert silent_success is not None and silent_success.error_class == "permanent"
    assert parse_result(pod_with(done, terminated(137, reason="OOMKilled"))) is None  # the engine decides


def test_a_hostile_document_from_the_user_container_fails_clearly() -> None:
    done = terminated(0, reason="Completed")
    for message in ('{"ok": "yes"}', "[1,2]", '{"ok":true,"output":' + "[" * 40 + "]" * 40 + "}", "x" * 5000):
        result = parse_result(pod_with(done, terminated(0, message, "Completed")))
        assert result is not None and (result.ok, result.error_class) == (False, "permanent"), message[:20]


def test_an_init_container_image_swapped_under_the_pod_does_not_count() -> None:
    manifest = job()
    pod = {"spec": {**manifest["spec"]["template"]["spec"]}, "status": {}}
    pod["spec"]["initContainers"] = [{**pod["spec"]["initContainers"][0], "image": "docker.io/evil/prepare:1"}]
    reason = foreign_run(manifest, pod)
    assert reason == ("its container prepare was changed to image docker.io/evil/prepare:1; its Job asked for "
                      "localhost/towline-runner:dev")


def test_a_user_containers_text_that_is_not_json_is_never_echoed() -> None:
    done = terminated(0, reason="Completed")
    leaked = "token=s3cr3t-value " * 300  # what a careless step might print into its termination message
    result = parse_result(pod_with(done, terminated(0, leaked[-4096:], "Completed")))
    assert result is not None and (result.ok, result.error_class) == (False, "permanent")
    assert result.message is not None and "s3cr3t" not in result.message
    assert "likely cut by the kubelet" in result.message


def test_the_types_image_pull_secrets_reach_the_pod() -> None:
    private = TYPE.model_copy(update={"spec": TYPE.spec.model_copy(update={"image_pull_secrets": ["registry-creds"]})})
    assert job(step_type=private)["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "registry-creds"}]
    assert "imagePullSecrets" not in job()["spec"]["template"]["spec"]


def test_the_image_the_kubelet_ran_is_read_from_the_step_container() -> None:
    pod = pod_with(terminated(0, reason="Completed"), terminated(0, '{"ok":true}', "Completed"))
    assert ran_image(pod) is None
    pod["status"]["containerStatuses"][0]["imageID"] = "registry.example.com/team/deploy@sha256:" + "b" * 64
    pod["status"]["initContainerStatuses"][0]["imageID"] = "runner@sha256:" + "c" * 64
    assert ran_image(pod) == "registry.example.com/team/deploy@sha256:" + "b" * 64
