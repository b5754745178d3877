"""What the chart's admission policies cost the API server: the time to create a WorkflowRun whose
params are as wide as MAX_INPUT_BYTES allows, and to refuse one nested 1,500 levels deep.

The depth rule walks every element of params and trigger.data, so its cost grows with their size;
the API server's CEL cost budget bounds it. Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import json
import statistics
import time

from towline.api.run import MAX_INPUT_BYTES, MAX_INPUT_DEPTH
from towline.devcluster.binaries import find_binaries
from towline.devcluster.controlplane import ControlPlane
from towline.devcluster.install import install_chart, install_crds

REPEATS = 3


def _create_seconds(plane: ControlPlane, name: str, params_text: str) -> tuple[float, bool]:
    envelope = json.dumps({"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                           "metadata": {"name": name, "namespace": "default"},
                           "spec": {"workflowRef": {"name": "w"}, "requestedBy": "admin", "params": "__PARAMS__"}})
    text = envelope.replace('"__PARAMS__"', params_text)  # written as text: json gives up near 1,000 levels
    started = time.monotonic()
    result = plane.kubectl("create", "-f", "-", stdin=text, check=False, timeout=120)
    return time.monotonic() - started, result.returncode == 0


def main() -> None:
    plane = ControlPlane(find_binaries()).start()
    try:
        install_crds(plane)
        install_chart(plane)
        cases = {
            "empty params": "{}",
            f"{MAX_INPUT_DEPTH} levels deep": '{"a":' * MAX_INPUT_DEPTH + "1" + "}" * MAX_INPUT_DEPTH,
            "1,500 levels deep (refused)": '{"a":' * 1500 + "1" + "}" * 1500,
        }
        for count in (1_000, 8_000, (MAX_INPUT_BYTES - 8) // 2):
            params = json.dumps({"a": [1] * count}, separators=(",", ":"))
            cases[f"flat list of {count} numbers ({len(params)} bytes)"] = params
        print(f"admission cost of creating a WorkflowRun (median of {REPEATS}, kubectl round trip included):")
        serial = 0
        for label, params in cases.items():
            samples, outcomes = [], set()
            for _ in range(REPEATS):
                serial += 1
                seconds, created = _create_seconds(plane, f"bench-{serial}", params)
                samples.append(seconds)
                outcomes.add("created" if created else "refused")
            print(f"  {label:<48} {statistics.median(samples) * 1000:8.0f} ms  {'/'.join(sorted(outcomes))}")
    finally:
        plane.stop()
        plane.remove_state()


if __name__ == "__main__":
    main()
