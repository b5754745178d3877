"""An attempt's observation is worked out once per version of its Job and pod, and again for any new version."""

from __future__ import annotations

from typing import Any

from tests.unit.k8s.test_observe_ownership import RUN, UID, job, pod

from towline.k8s.observe import KeptObservations, build_observed


def versioned(body: dict[str, Any], uid: str, version: str) -> dict[str, Any]:
    return {**body, "metadata": {**body["metadata"], "uid": uid, "resourceVersion": version}}


def observe(kept: KeptObservations, the_job: dict[str, Any], the_pod: dict[str, Any]) -> Any:
    return build_observed([the_job], [the_pod], [], run_name=RUN, run_uid=UID, kept=kept).jobs[("deploy", 1)]


def test_one_version_is_observed_once_a_new_version_again() -> None:
    kept = KeptObservations()
    the_job = versioned(job(), "job-uid", "10")
    first = observe(kept, the_job, versioned(pod(owner="job-uid", output="v1"), "pod-uid", "20"))
    assert first.result.output == "v1"
    again = observe(kept, the_job, versioned(pod(owner="job-uid", output="v1"), "pod-uid", "20"))
    assert again is first, "the same versions: the kept observation"
    newer = observe(kept, the_job, versioned(pod(owner="job-uid", output="v2"), "pod-uid", "21"))
    assert newer.result.output == "v2", "a new pod version is observed again"


def test_bodies_without_versions_are_observed_every_time_and_the_oldest_go_first() -> None:
    kept = KeptObservations(size=2)
    unversioned = observe(kept, job(), pod(owner="job-uid", output="a"))
    assert observe(kept, job(), pod(owner="job-uid", output="b")).result.output == "b"
    assert unversioned.result.output == "a"
    for version in ("1", "2", "3"):
        observe(kept, versioned(job(), "job-uid", version), versioned(pod(owner="job-uid", output=version), "p", "9"))
    assert len(kept._kept) == 2
    assert ("job-uid", "1", "p", "9") not in kept._kept and ("job-uid", "3", "p", "9") in kept._kept
