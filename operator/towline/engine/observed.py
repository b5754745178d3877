"""What is true in the world for one run, as the operator observed it.

Plain frozen values: the operator builds them from the run's Jobs, their pods'
termination messages and the run's Approvals; the engine only reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from towline.api.runterms import ApprovalDecision

JobState = Literal["active", "succeeded", "failed"]

REASON_UNMOUNTABLE = "SecretMissing"
"""JobObservation.reason of a Job whose step found a Secret it names missing.

The runner fails such an attempt (`auth`: the step's credentials need repair)
before its action runs, and `decide` deletes the Job once that is recorded: the
attempt is over, and the resume after the repair runs a new one.
"""
REASON_DEADLINE = "DeadlineExceeded"
"""The Job controller's reason for a Job past its `activeDeadlineSeconds`, and the kubelet's for such a pod."""
REASON_POD_REFUSED = "PodRefused"
"""The API server refused to create the attempt's pod (admission, quota): nothing ran, so the attempt may be
retried whatever the step does; the Job's `Failed` condition names the API server's reason."""


@dataclass(frozen=True)
class StepResult:
    """The runner's result document (or one the operator synthesised for a Job that left none)."""

    ok: bool
    output: Any = None
    error_class: str | None = None
    message: str | None = None
    retryable: bool | None = None
    retry_after_seconds: float | None = None
    usage: Mapping[str, Any] | None = None
    missing_secrets: tuple[str, ...] = ()
    """Names of the Secrets the runner found missing (its document's `missingSecrets`)."""


@dataclass(frozen=True)
class JobObservation:
    """One step attempt's Job, found by label."""

    step_id: str
    attempt: int
    job_name: str
    state: JobState
    result: StepResult | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    reason: str | None = None
    image: str | None = None
    """What the step's container ran, as the kubelet reports it (`imageID`: the image by digest)."""

    @property
    def credentials_missing(self) -> bool:
        """Its step found a Secret it names missing (see REASON_UNMOUNTABLE)."""
        return self.reason == REASON_UNMOUNTABLE


@dataclass(frozen=True)
class ApprovalObservation:
    """One Approval owned by the run; `decision` is None while nobody has decided."""

    step_id: str
    name: str
    decision: ApprovalDecision | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    reason: str | None = None
    expires_at: datetime | None = None
    """The Approval's spec.expiresAt; lets a replay after a crash keep the original expiry."""
    message: str = ""
    """The Approval's spec.message: what the approver is asked (notifications repeat it)."""


@dataclass(frozen=True)
class ChildRunObservation:
    """A subflow step's child run, read by name; counted only when it is this run's child (towline.k8s.subflows)."""

    step_id: str
    name: str
    phase: str
    outputs: Mapping[str, Any] | None = None
    message: str | None = None
    cancel: bool = False
    suspend: bool = False
    finished_at: datetime | None = None
    foreign: str | None = None
    """Why a run under the child's name is not this run's child (then nothing else counts); None: it is."""


@dataclass(frozen=True)
class Observed:
    """Everything the engine knows about the world: Jobs by (step id, attempt), Approvals and child runs by step id.

    A subflow step whose child run was not found has no entry in `child_runs`."""

    jobs: Mapping[tuple[str, int], JobObservation] = field(default_factory=dict)
    approvals: Mapping[str, ApprovalObservation] = field(default_factory=dict)
    child_runs: Mapping[str, ChildRunObservation] = field(default_factory=dict)
