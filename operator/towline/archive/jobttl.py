"""A step Job's TTL, set by the archive once the Job's pod's logs are in the record. Pure (no I/O).

While the archive is on, the operator creates step Jobs without `ttlSecondsAfterFinished`, so no TTL can take a
pod (and its log) the record does not hold yet, however long the archive is down. Right after the archive has
written an ended step pod's logs (or found it has none left to give), it sends one PATCH that sets the pod's Job's
TTL to the chart's runner.jobTTLSecondsAfterFinished; kube-controller-manager's TTL controller then deletes the
Job and its pod as it always did. The admission policy towline-step-objects lets the archive's identity set that
one field, where it was unset, on a Towline step Job, and nothing else.
"""

from __future__ import annotations

from towline.jsontypes import JSON
from towline.k8s.owners import JobRef


def job_ttl_patch(job: JobRef, seconds: int) -> JSON:
    """The merge patch that sets the Job's TTL. Its UID is a precondition: a Job of the same name made since (a
    new run of the same name) is not this one, and the API server refuses the patch (409) rather than let that
    Job go before its own logs are in the record."""
    return {"metadata": {"uid": job.uid}, "spec": {"ttlSecondsAfterFinished": seconds}}
