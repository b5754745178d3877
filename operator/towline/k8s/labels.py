"""The labels and annotations Towline puts on what it makes (Jobs, pods, policies, Approvals, runs).

Their own module, apart from the builders in `towline.k8s.objects`: readers that only select by them (the
plugin, the watches) need not load the builders and, through them, every connector.
"""

from __future__ import annotations

import hashlib

_LABEL_LIMIT = 63

LABEL_WORKFLOW = "towline.dev/workflow"
LABEL_TRIGGER = "towline.dev/trigger"
"""On a run a trigger started (schedule or webhook): the trigger's name, `_` written as `-` (`identifier_label`)."""
LABEL_RUN = "towline.dev/run"
LABEL_STEP = "towline.dev/step"
"""The step's id, `_` written as `-` (`identifier_label`); the exact id rides along as ANNOTATION_STEP_ID."""
LABEL_ATTEMPT = "towline.dev/attempt"
LABEL_STEP_POD = "towline.dev/step-pod"
LABEL_EGRESS = "towline.dev/egress"
"""On a shared step egress policy and the pods it selects: the digest of what it opens (towline.k8s.egresspolicies)."""
LABEL_NOTIFICATION = "towline.dev/notification"
"""On an approval gate's notification Job and its pod: `<event>-<index>`. Such a Job is no step attempt."""
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
ANNOTATION_STEP_ID = "towline.dev/step-id"
ANNOTATION_ALLOW_HOSTS = "towline.dev/allow-hosts"
MANAGER = "towline"
STEP_JOB_MANAGER = "towline.dev/operator"
"""A step Job's `spec.managedBy`: the operator, not the cluster's Job controller, makes its pod and writes its
status (towline.k8s.steppods)."""
RUN_ARCHIVE_FINALIZER = "towline.dev/archive"
"""On a run while the archive is enabled, from the operator's first pass until the archive has written the run, its
approvals and its steps' logs (towline.archive): neither the history limit nor a person's delete removes a run the
record does not hold yet. Only the archive removes it."""
STEP_POD_FINALIZER = "towline.dev/step-result"
"""On a step pod the operator made, until its end is written on its Job: the pod cannot vanish unrecorded, so a Job
without a pod never had one (towline.k8s.steppods)."""


TOWLINE_PREFIX = "towline.dev"


def is_towline_key(key: str) -> bool:
    """A label or annotation key under towline.dev (or a subdomain of it): Towline's alone to set, since its
    NetworkPolicies, admission policies and watches select on them."""
    prefix, _, _ = key.rpartition("/")
    return prefix == TOWLINE_PREFIX or prefix.endswith(f".{TOWLINE_PREFIX}")


def identifier_label(identifier: str) -> str:
    """A step id or trigger name as LABEL_STEP's or LABEL_TRIGGER's value: label values are DNS-safe, so `_` is
    written as `-` (lossy). A loop instance's `deploy[eu_1]` is `deploy.eu-1` (no step id holds a '.'); one past
    a label value's 63 characters keeps a readable start and a hash of the whole id."""
    label = identifier.replace("_", "-").replace("[", ".").replace("]", "")
    if len(label) <= _LABEL_LIMIT:
        return label
    digest = hashlib.sha256(identifier.encode()).hexdigest()[:8]
    return f"{label[: _LABEL_LIMIT - 9].rstrip('-.')}-{digest}"
