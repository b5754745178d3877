"""What the chart's admission policies cost the API server: the time to create a WorkflowRun whose
params are as large as MAX_INPUT_BYTES and MAX_INPUT_ITEMS allow, and to refuse hostile ones.

The depth rule walks every element of params and trigger.data, so its cost grows with their size;
lists longer than MAX_INPUT_ITEMS are refused by count, and the API server's CEL cost budget bounds
the rest. Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import json
import statistics
import time

from towline.api.run import MAX_INPUT_BYTES, MAX_INPUT_DEPTH, MAX_INPUT_ITEMS
from towline_dev.binaries import find_binaries
from towline_dev.controlplane import ControlPlane
from towline_dev.install import install_chart, install_crds

REPEATS = 3


def _create_seconds(plane: ControlPlane, name: str, params_text: str) -> tuple[float, bool]:
    envelope = json.dumps({"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                           "metadata": {"name": name, "namespace": "default"},
                           "spec": {"workflowRef": {"name": "w"}, "requestedBy": "admin", "params": "__PARAMS__"}})
    text = envelope.replace('"__PARAMS__"', params_text)  # written as text: json gives up near 1,000 levels
    started = time.monotonic()
    result = plane.kubectl("create", "-f", "-", stdin=text, check=False, timeout=120)
    return time.monotonic() - started, result.returncode == 0


def _wait_until_enforced(plane: ControlPlane) -> None:
    """A new policy is enforced a moment after it is type-checked; time only what it really does."""
    deep = '{"a":' * 40 + "1" + "}" * 40
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        _, created = _create_seconds(plane, "probe", deep)
        if not created:
            return
        plane.kubectl("delete", "workflowrun", "probe", "-n", "default", "--wait=false")
        time.sleep(0.5)
    raise SystemExit("the admission policies were never enforced")


def main() -> None:
    plane = ControlPlane(find_binaries()).start()
    try:
        install_crds(plane)
        install_chart(plane)
        _wait_until_enforced(plane)
        cases = {
            "empty params": "{}",
            f"{MAX_INPUT_DEPTH} levels deep": '{"a":' * MAX_INPUT_DEPTH + "1" + "}" * MAX_INPUT_DEPTH,
            "1,500 levels deep (refused)": '{"a":' * 1500 + "1" + "}" * 1500,
        }
        for lists in (1, 16, (MAX_INPUT_BYTES - 8) // (2 * MAX_INPUT_ITEMS + 2)):
            params = json.dumps({"a": [[1] * MAX_INPUT_ITEMS] * lists}, separators=(",", ":"))
            cases[f"{lists} lists of {MAX_INPUT_ITEMS} numbers ({len(params)} bytes)"] = params
        params = json.dumps({"a": [[1] * 1000] * 1000}, separators=(",", ":"))
        cases[f"1000 lists of 1000 numbers ({len(params)} bytes, refused)"] = params
        print(f"admission cost of creating a WorkflowRun (median of {REPEATS}, kubectl round trip included):")
        serial = 0
        for label, params in cases.items():
            samples, outcomes = [], set()
            for _ in range(REPEATS):
                serial += 1
                seconds, created = _create_seconds(plane, f"bench-{serial}", params)
                samples.append(seconds)
                outcomes.add("created" if created else "refused")
            print(f"  {label:<52} {statistics.median(samples) * 1000:8.0f} ms  {'/'.join(sorted(outcomes))}")
    finally:
        plane.stop()
        plane.remove_state()


if __name__ == "__main__":
    main()
