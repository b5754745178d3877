"""What the visual editor costs with a 100-step Workflow: first paint and the time until all 100 steps are drawn.

A control plane without a node, with the CRDs: one Workflow of 100 steps (ten layers of ten, each step needing
the one above it), opened in the editor (`/editor/<name>`) of `kubectl towline ui` as admin in headless
Chromium, cold (the first load of the page and its modules) and warm. The editor asks the server for the
catalogue and the Workflow, lays the graph out with dagre, and draws the forms and the YAML; its validation
(after typing stops) is not part of the figure. Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import json
import time
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from towline_dev.binaries import find_binaries
from towline_dev.browser import headless_chromium, web_view
from towline_dev.controlplane import ControlPlane
from towline_dev.install import install_crds
from towline_dev.kubeconfig import context_name

NAMESPACE = "default"
NAME = "hundred-steps"
WIDTH = 10


def hundred_steps() -> dict[str, Any]:
    steps = [{"id": f"s{i:03d}", "action": "data.transform", "with": {"data": {"n": i}},
              **({"needs": [f"s{i - WIDTH:03d}"]} if i >= WIDTH else {})} for i in range(WIDTH * WIDTH)]
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": NAME, "namespace": NAMESPACE}, "spec": {"steps": steps}}


def _paint_ms(driver: Any) -> float:
    entries = driver.execute_script(
        "return performance.getEntriesByType('paint').filter(e => e.name === 'first-contentful-paint')"
        ".map(e => e.startTime)")
    return float(entries[0]) if entries else float("nan")


def main() -> None:
    plane = ControlPlane(find_binaries()).start()
    try:
        install_crds(plane)
        workflow = hundred_steps()
        plane.kubectl("apply", "-f", "-", stdin=json.dumps(workflow))
        with web_view(plane.kubeconfig, context_name("admin"), NAMESPACE) as view, \
                headless_chromium(print) as driver:
            view.sign_in(driver)
            for attempt in ("cold", "warm"):
                began = time.monotonic()
                driver.get(view.url(f"/editor/{NAME}"))
                WebDriverWait(driver, 120, poll_frequency=0.02).until(
                    lambda d: len(d.find_elements(By.CSS_SELECTOR, "#editor-graph g.node")) == WIDTH * WIDTH)
                drawn = time.monotonic() - began
                print(f"web view editor ({attempt}): first contentful paint {_paint_ms(driver):.0f} ms, "
                      f"{WIDTH * WIDTH} steps drawn {drawn * 1000:.0f} ms after navigation")
    finally:
        plane.stop()


if __name__ == "__main__":
    main()
