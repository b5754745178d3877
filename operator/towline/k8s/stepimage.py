"""Whether a step pod ran what its Job asked for: only then may its termination message be the step's result.

A pod's container image is mutable, and the kubelet restarts a container whose
image changed, whatever the pod's restart policy: somebody allowed to patch pods
(the built-in `edit` role) could swap a running step's image for one that writes
a forged result. The chart's admission policy refuses such a patch; this is the
operator's own check behind it. The Job says what was asked (only the operator
creates step Jobs, and a Job's pod template is immutable); the kubelet's
container status says what ran. A step container also runs once: restartPolicy
is Never, so a restarted one had its spec changed.
"""

from __future__ import annotations

from typing import Any

from towline.engine.observed import StepResult
from towline.jsontypes import JSON

_DEFAULT_REGISTRY = "docker.io/"


def foreign_run(job: JSON, pod: JSON) -> str | None:
    """Why `pod` did not run exactly the containers its Job asked for (so its result cannot count), else None."""
    asked = _images(((job.get("spec") or {}).get("template") or {}).get("spec"))
    if not asked:
        return "its Job names no container image to compare with"
    for name, image in _images(pod.get("spec")).items():
        if asked.get(name) != image:
            return f"its container {name} was changed to image {image}; its Job asked for {asked.get(name)}"
    pod_status = pod.get("status") or {}
    for status in [*(pod_status.get("initContainerStatuses") or []), *(pod_status.get("containerStatuses") or [])]:
        name = status.get("name")
        if name not in asked:
            return f"it ran a container {name} its Job never asked for"
        ran = status.get("image")
        if not isinstance(ran, str) or not same_image(asked[name], ran, status.get("imageID")):
            return f"its container {name} ran image {ran}, not {asked[name]} that its Job asked for"
        if status.get("restartCount") or (status.get("lastState") or {}).get("terminated"):
            return f"its container {name} was restarted, which only a change of its spec does to a step container"
    return None


def same_image(asked: str, reported: str, image_id: Any = None) -> bool:
    """`reported` (a container status's image) names `asked`, allowing for the runtime's normal form.

    Runtimes report a tag reference in its full form (`busybox` as `docker.io/library/busybox:latest`);
    an image asked for by digest matches the digest the runtime reports as `imageID`.
    """
    if _normal(asked) == _normal(reported):
        return True
    if "@" in asked and isinstance(image_id, str):
        return image_id.rsplit("@", 1)[-1] == asked.rsplit("@", 1)[-1]
    return False


def _normal(reference: str) -> str:
    name, at, digest = reference.partition("@")
    if ":" not in name.rsplit("/", 1)[-1] and not at:
        name += ":latest"
    first, slash, _ = name.partition("/")
    if not slash:
        name = f"{_DEFAULT_REGISTRY}library/{name}"
    elif not ("." in first or ":" in first or first == "localhost"):
        name = _DEFAULT_REGISTRY + name
    return name + at + digest


def _images(spec: Any) -> dict[str, str]:
    """Container name -> image, init containers (a user step type's `prepare`) included."""
    if not isinstance(spec, dict):
        return {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return {str(c.get("name")): str(c.get("image")) for c in containers if isinstance(c, dict)}


def refused_result(pod: JSON, reason: str) -> StepResult:
    """The step's failure in place of what `pod` reported: never its output."""
    return StepResult(
        ok=False, output=None, error_class="permanent", retryable=False,
        message=f"the result of pod {pod.get('metadata', {}).get('name')} does not count: {reason}",
    )
