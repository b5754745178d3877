"""The chart's events.sink: its values reach the operator, the signing key is mounted alone, and the operator's
NetworkPolicy opens the sink's address on the url's port and nothing else; a sink without a Secret or (for a host
name) without its addresses is refused naming the value. Rendered with the pinned helm; no cluster."""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.helmsupport import find, render, template

from towline.eventsink import EventsConfig
from towline_dev.binaries import BinarySet

pytestmark = pytest.mark.integration

SINK = {"events.sink.url": "https://203.0.113.10:8443/towline", "events.sink.secretRef.name": "sink-key",
        "events.sink.types": '["dev.towline.run.*", "dev.towline.approval.decided"]',
        "events.sink.allowPrivateCidrs": '["10.96.0.0/12"]', "networkPolicy.apiServer.cidrs": '["10.0.0.1/32"]'}


def operator_pod(documents: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = find(documents, "Deployment", "towline-operator")["spec"]["template"]["spec"]
    return spec


def test_no_sink_by_default_no_setting_no_secret_no_egress(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"networkPolicy.apiServer.cidrs": '["10.0.0.1/32"]'})
    pod = operator_pod(documents)
    assert not [v for v in pod["containers"][0]["env"] if v["name"].startswith("TOWLINE_EVENTS_")]
    assert [volume["name"] for volume in pod["volumes"]] == ["tmp"]
    assert len(find(documents, "NetworkPolicy", "towline-operator")["spec"]["egress"]) == 2


def test_the_sink_values_reach_the_operator_which_reads_them(k8s_binaries: BinarySet) -> None:
    pod = operator_pod(render(k8s_binaries, SINK))
    env = {v["name"]: v.get("value") for v in pod["containers"][0]["env"] if v["name"].startswith("TOWLINE_EVENTS_")}
    config = EventsConfig.from_environment(env)
    assert config.url == "https://203.0.113.10:8443/towline"
    assert config.types == ("dev.towline.run.*", "dev.towline.approval.decided")
    assert [str(net) for net in config.allow_private] == ["10.96.0.0/12"]
    (volume,) = [volume for volume in pod["volumes"] if volume["name"] == "events-signing-secret"]
    assert volume["secret"]["secretName"] == "sink-key"
    assert volume["secret"]["items"] == [{"key": "signing-secret", "path": "signing-secret"}], "only the key"
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "events-signing-secret")
    assert mount["readOnly"] is True and str(config.secret_file).startswith(mount["mountPath"])


def test_the_operator_may_reach_the_sink_on_its_port_only(k8s_binaries: BinarySet) -> None:
    policy = find(render(k8s_binaries, SINK), "NetworkPolicy", "towline-operator")["spec"]
    assert policy["egress"][2:] == [{"ports": [{"protocol": "TCP", "port": 8443}],
                                     "to": [{"ipBlock": {"cidr": "203.0.113.10/32"}}]}]
    named = {**SINK, "events.sink.url": "http://events.example.com/towline",
             "events.sink.egressTo": '[{"ipBlock": {"cidr": "198.51.100.0/28"}}]'}
    policy = find(render(k8s_binaries, named), "NetworkPolicy", "towline-operator")["spec"]
    assert policy["egress"][2:] == [{"ports": [{"protocol": "TCP", "port": 80}],
                                     "to": [{"ipBlock": {"cidr": "198.51.100.0/28"}}]}]


@pytest.mark.parametrize(("values", "named"), [
    ({"events.sink.url": "https://203.0.113.10/towline"}, "events.sink.secretRef.name"),
    ({**SINK, "events.sink.url": "https://events.example.com/towline"}, "events.sink.egressTo"),
    ({**SINK, "events.sink.url": "https://user:pw@203.0.113.10/towline"}, "url"),
])
def test_a_sink_that_cannot_work_is_refused_naming_the_value(k8s_binaries: BinarySet, values: dict[str, str],
                                                              named: str) -> None:
    result = template(k8s_binaries, values)
    assert result.returncode != 0 and named in result.stderr, result.stderr
