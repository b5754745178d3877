"""A step's logs for the web view: each attempt's pod, followed while it runs.

Only pods whose Job the run's status names are shown (the same rule as
`kubectl towline logs`): a pod that merely carries the run's label is not the
run's. Lines come from the kubelet through the API server, as the person.
"""

from __future__ import annotations

from towline.k8s import live, session
from towline.k8s.client import PODS, ApiError, KubeApi
from towline.k8s.podphase import pod_ended
from towline.plugin.commands import runs_own_pods
from towline.plugin.ui.sse import Send


async def stream_step_logs(api: KubeApi, namespace: str, run_name: str, step: str, send: Send) -> None:
    run = await session.get_run(api, namespace, run_name)
    if run is None:
        await send("problem", {"message": f"no WorkflowRun {run_name!r}"})
        return
    pods = runs_own_pods(run, await session.step_pods(api, namespace, run_name, step))
    if not pods:
        await send("waiting", {"message": f"step {step} has no pod yet"})
        return
    for pod in pods:
        name = pod["metadata"]["name"]
        labels = pod["metadata"].get("labels") or {}
        await send("pod", {"pod": name, "attempt": labels.get("towline.dev/attempt")})
        path = PODS.path(namespace, name, "log")
        try:
            if pod_ended(pod):
                for line in (await session.pod_log(api, namespace, name)).splitlines():
                    await send("line", line)
            else:
                async for line in live.follow_log(api, path):
                    await send("line", line)
        except ApiError as error:
            await send("problem", {"pod": name, "message": f"logs not available ({error.status}): {error.message}"})
            if error.status == 400:  # the container has not started: the page asks again shortly
                return
    await send("end", {})
