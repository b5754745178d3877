"""kopf builds no diff base for Towline: it registers only on.event handlers, which never read one."""

from __future__ import annotations

import itertools

import kopf

from towline.k8s.objects import StepPodSettings
from towline.runtime.config import OperatorConfig
from towline.runtime.wiring import NoDiffBase, RetriedForever, _tune, build_registry, names_only


def test_only_event_handlers_are_registered_so_no_diff_base_is_needed() -> None:
    config = OperatorConfig(namespace="towline-system", identity="a", service_account="towline-operator",
                            pod_settings=StepPodSettings())
    registry = build_registry(config)
    assert registry._watching.get_all_handlers()
    assert list(registry._changing.get_all_handlers()) == [], "an on.create/on.update handler needs kopf's diff base"
    assert list(registry._spawning.get_all_handlers()) == [], "a daemon or timer needs kopf's diff base"


def test_the_operator_settings_build_an_empty_diff_base_and_post_no_kopf_events() -> None:
    settings = kopf.OperatorSettings()
    _tune(settings, None)
    assert isinstance(settings.persistence.diffbase_storage, NoDiffBase)
    body = kopf.Body({"metadata": {"name": "r"}, "spec": {"big": ["x"] * 1000}, "status": {"phase": "Running"}})
    assert settings.persistence.diffbase_storage.build(body=body) == {}
    assert settings.posting.enabled is False


def test_kopf_watches_only_the_kinds_that_change_when_a_person_acts() -> None:
    """Runs, step Jobs, pods, Approvals and default-deny policies are the operator's own streams
    (towline.runtime.runwatch, childwatch): a kopf handler for them would hand every event over twice."""
    config = OperatorConfig(namespace="towline-system", identity="a", service_account="towline-operator",
                            pod_settings=StepPodSettings())
    watched = {handler.selector.any_name for handler in build_registry(config)._watching.get_all_handlers()
               if handler.selector is not None}
    assert watched == {"workflows", "steptypes", "clustersteptypes"}


def test_an_operator_watching_named_namespaces_does_not_make_kopf_list_namespaces() -> None:
    """kopf lists and watches every namespace unless scanning is off; the chart's scoped RBAC forbids that, and
    kopf's retries held a scoped operator idle for a minute (tests/integration/helm/test_helm_install.py)."""
    for watched, scanning_off in (((), False), (("team-a",), True), (("team-a", "team-b"), True),
                                  (("t-gw1-*",), False), (("team-a", "!team-b"), False), (("team-?",), False),
                                  (("team-a,team-b",), False)):
        settings = kopf.OperatorSettings()
        _tune(settings, None, watched)
        assert settings.scanning.disabled is scanning_off, watched
        assert names_only(watched) is scanning_off


def test_kopf_retries_a_request_past_its_backoffs_with_the_last_one_for_every_request() -> None:
    """kopf gives a request up after its backoffs, and a watch given up on a 5xx or 403 never came back."""
    settings = kopf.OperatorSettings()

    def budget(tuned: kopf.OperatorSettings) -> None:
        tuned.networking.error_backoffs = (1.0, 2.0, 3.0)  # as the tests' --watch-retry-budget sets it

    _tune(settings, budget)
    backoffs = settings.networking.error_backoffs
    assert isinstance(backoffs, RetriedForever)
    for _ in range(2):  # kopf iterates it afresh for each request
        assert list(itertools.islice(backoffs, 6)) == [1.0, 2.0, 3.0, 3.0, 3.0, 3.0]
    _tune(settings := kopf.OperatorSettings(), None)
    assert list(itertools.islice(settings.networking.error_backoffs, 9))[-3:] == [13, 21, 21]
