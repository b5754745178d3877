"""`make binaries` (a step of `make test` and `make integration`): build what the tests need, visibly:
the Kubernetes and node binaries (the node's volume provisioner among them), the private-registry tools,
kubeconform and its schemas (which check the rendered chart), promtool (which tests the chart's alerts),
the kstatus command (which reads runs as Flux and kpt do), kwok (the simulated node of the shard tests),
Hydra (the tests' OpenID Connect provider), Jaeger (the tracing tests' collector), the CloudEvents
interop tests' Go programs (towline_dev.cloudevents_go) and, as root (the real node's tests need root too),
the two images.

Run before pytest, so the first build's progress reaches the terminal line by line
(under pytest it would be captured until the session ends). When everything is
already built it says so in one line and returns at once.
"""

from __future__ import annotations

import os
import sys
import time

from towline_dev.binaries import BinariesUnavailable, find_binaries, find_kwok, find_local_path_provisioner
from towline_dev.cloudevents_go import find_cesdk, find_heartbeats
from towline_dev.debpackages import PackagesUnavailable
from towline_dev.idp.hydra import find_hydra
from towline_dev.imagebuild import ImageBuildFailed
from towline_dev.images import ensure_images
from towline_dev.jaeger import find_jaeger
from towline_dev.kstatus import find_kstatus
from towline_dev.kubeconform import find_kubeconform, kubernetes_schema_location
from towline_dev.promtool import find_promtool
from towline_dev.registry import find_registry_tools


def _say(message: str) -> None:
    print(f"[towline build] {message}", flush=True)


def main() -> int:
    started = time.monotonic()
    try:
        binaries = find_binaries(progress=_say)
        how = "built" if "just built" in binaries.origin else "cached"
        _say(f"Kubernetes binaries {how}: {binaries.origin} ({time.monotonic() - started:.1f} s)")
        started = time.monotonic()
        provisioner = find_local_path_provisioner(progress=_say)
        _say(f"local-path-provisioner: {provisioner} ({time.monotonic() - started:.1f} s)")
    except BinariesUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    started = time.monotonic()
    try:
        tools = find_registry_tools(progress=_say)
    except BinariesUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    _say(f"registry tools ready: {tools.registry.parent} ({time.monotonic() - started:.1f} s)")
    started = time.monotonic()
    try:
        kubeconform = find_kubeconform(progress=_say)
        schemas = kubernetes_schema_location(progress=_say)
        _say(f"kubeconform: {kubeconform}, schemas {schemas} ({time.monotonic() - started:.1f} s)")
        started = time.monotonic()
        promtool = find_promtool(progress=_say)
        _say(f"promtool: {promtool} ({time.monotonic() - started:.1f} s)")
        started = time.monotonic()
        kstatus = find_kstatus(progress=_say)
        _say(f"kstatus: {kstatus} ({time.monotonic() - started:.1f} s)")
        started = time.monotonic()
        kwok = find_kwok(progress=_say)
        _say(f"kwok: {kwok} ({time.monotonic() - started:.1f} s)")
        started = time.monotonic()
        hydra = find_hydra(progress=_say)
        _say(f"hydra (the tests' OpenID Connect provider): {hydra} ({time.monotonic() - started:.1f} s)")
        started = time.monotonic()
        jaeger = find_jaeger(progress=_say)
        _say(f"jaeger (the tracing tests' collector): {jaeger} ({time.monotonic() - started:.1f} s)")
        started = time.monotonic()
        cesdk, heartbeats = find_cesdk(progress=_say), find_heartbeats(progress=_say)
        _say(f"CloudEvents in Go (the SDK's sender and receiver, Knative's heartbeats): {cesdk}, {heartbeats} "
             f"({time.monotonic() - started:.1f} s)")
    except BinariesUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if os.geteuid() != 0:
        _say("not root: the images are not built here (the real-node tests that run them skip without root)")
        return 0
    started = time.monotonic()
    try:
        archives = ensure_images(_say)
    except (ImageBuildFailed, PackagesUnavailable) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    _say(f"images ready: {', '.join(sorted(archives))} ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
