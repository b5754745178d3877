"""Environment, volume files, status and pod selection follow the kubelet's rules."""

from __future__ import annotations

from typing import Any

import pytest

from towline_dev.podspec import (
    PodConfigError,
    command_line,
    container_env,
    expand,
    field_value,
    key_files,
    returncode_to_exit_code,
    should_bind,
    terminated_status,
    waiting_status,
)


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"b": "2", "a": "1"}},
        "spec": {"containers": [{"name": "main"}], **spec},
        "status": {"phase": "Pending"},
    }


SECRETS = {"creds": {"token": b"t0k"}}
CONFIG_MAPS = {"settings": {"LEVEL": b"debug", "MODE": b"fast"}}


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return container_env(pod(), container, secrets=SECRETS.get, config_maps=CONFIG_MAPS.get)


def test_expansion_replaces_known_variables_and_keeps_unknown_ones() -> None:
    assert expand("$(A)-$(B)-$$(A)", {"A": "x"}) == "x-$(B)-$(A)"


def test_env_resolves_values_secrets_config_maps_and_field_refs_in_order() -> None:
    env = env_of({"envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}], "env": [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "$(A)+$(CFG_LEVEL)"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}},
    ]})
    assert env == {"CFG_LEVEL": "debug", "CFG_MODE": "fast", "A": "1", "B": "1+debug", "TOKEN": "t0k", "NS": "ns"}


def test_a_missing_secret_is_a_config_error_naming_it() -> None:
    with pytest.raises(PodConfigError) as error:
        env_of({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]})
    assert (error.value.reason, error.value.message) == ("CreateContainerConfigError", 'secret "nope" not found')


def test_a_missing_key_is_a_config_error_naming_it() -> None:
    with pytest.raises(PodConfigError, match="couldn't find key k in Secret ns/creds"):
        env_of({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "k"}}}]})


def test_field_refs_cover_labels_in_downward_api_format() -> None:
    assert field_value(pod(), "metadata.labels") == 'a="1"\nb="2"'
    assert field_value(pod(), "metadata.labels['b']") == "2"


def test_a_container_without_command_cannot_run_here() -> None:
    with pytest.raises(PodConfigError, match="command is required"):
        command_line({"name": "main", "image": "x"}, {})


def test_command_and_args_are_expanded() -> None:
    assert command_line({"command": ["echo"], "args": ["$(WHO)"]}, {"WHO": "me"}) == ["echo", "me"]


def test_volume_files_take_every_key_with_the_default_mode() -> None:
    files = key_files({"b": b"2", "a": b"1"}, None, None, what="secret s", optional=False)
    assert [(f.path, f.content, f.mode) for f in files] == [("a", b"1", 0o644), ("b", b"2", 0o644)]


def test_volume_items_choose_keys_paths_and_modes() -> None:
    files = key_files({"a": b"1", "b": b"2"}, [{"key": "a", "path": "dir/x", "mode": 0o400}], 0o440,
                      what="secret s", optional=False)
    assert [(f.path, f.mode) for f in files] == [("dir/x", 0o400)]


def test_volume_item_paths_may_not_escape_the_volume() -> None:
    with pytest.raises(PodConfigError):
        key_files({"a": b"1"}, [{"key": "a", "path": "../etc/passwd"}], None, what="secret s", optional=False)


def test_signals_become_128_plus_the_signal_number() -> None:
    assert (returncode_to_exit_code(-15), returncode_to_exit_code(-9), returncode_to_exit_code(3)) == (143, 137, 3)


def test_unscheduled_default_scheduler_pods_in_served_namespaces_are_bound() -> None:
    assert should_bind(pod(), None)
    assert should_bind(pod(), frozenset({"ns"}))
    assert not should_bind(pod(), frozenset({"other"}))
    assert not should_bind(pod(schedulerName="custom"), None)
    assert not should_bind(pod(nodeName="elsewhere"), None)


def test_deadline_failure_sets_the_pod_reason() -> None:
    status = terminated_status({"name": "main"}, now="t", started_at="s", exit_code=143, reason="Error",
                               message="", container_id="c", pod_reason="DeadlineExceeded", pod_message="late")
    assert (status["phase"], status["reason"], status["message"]) == ("Failed", "DeadlineExceeded", "late")


def test_success_is_reported_as_completed_pod() -> None:
    status = terminated_status({"name": "main"}, now="t", started_at="s", exit_code=0, reason="Completed",
                               message="m", container_id="c")
    state = status["containerStatuses"][0]["state"]["terminated"]
    assert status["phase"] == "Succeeded"
    assert (state["exitCode"], state["reason"], state["message"]) == (0, "Completed", "m")
    assert {c["type"]: c.get("reason") for c in status["conditions"]}["Ready"] == "PodCompleted"


def test_waiting_keeps_the_start_time_it_is_given() -> None:
    status = waiting_status({"name": "main"}, now="later", start_time="first", reason="ContainerCreating")
    assert status["startTime"] == "first"
    assert status["containerStatuses"][0]["state"]["waiting"] == {"reason": "ContainerCreating"}
