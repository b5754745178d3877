"""A private registry as the node's only source of Towline's images, for the Helm tests that install
from one (the private-registry test, the README walkthrough)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.integration.helm.release import Cluster, chart_pods, uninstall
from tests.integration.nodesupport import remove_node_images
from tests.integration.support import wait_for

from towline_dev.images import RUNNER_IMAGE, TOWLINE_IMAGE
from towline_dev.node.layout import NODE_ADDRESS
from towline_dev.node.realnode import RealNode
from towline_dev.ocilayout import read_archive
from towline_dev.registry import LocalRegistry
from towline_dev.release import NAMESPACE, RELEASE


@contextlib.contextmanager
def registry_as_the_only_source(
    cluster: Cluster, node: RealNode, state_dir: Path, archives: dict[str, Path], progress: Callable[[str], None],
) -> Iterator[LocalRegistry]:
    """A password-protected registry on the node's address, trusted by the node's containerd through its CA
    only (no credentials), with the session's release uninstalled and the node's own copies of both images
    gone, so that every pod of what the block installs pulls from the registry with a pull secret.

    Entered after the caller pushed nothing yet: push (crane, skopeo) inside the block. Afterwards the
    node is as the session had it: the registry's names gone, its own images back, no trust left.
    """
    with LocalRegistry(state_dir, address=NODE_ADDRESS, progress=progress) as registry:
        trusted = registry.trust_from(node.paths.registry_hosts_dir)
        try:
            # An earlier module's release goes first, its pods with it: none may run from the node's copies.
            uninstall(cluster, RELEASE, NAMESPACE)
            wait_for("the earlier release's pods to be gone", lambda: not chart_pods(cluster, terminating=True),
                     timeout=180)
            # The names, and the image IDs the CRI records beside them, so that every blob comes from the registry.
            ids = [read_archive(archives[name]).manifest["config"]["digest"] for name in (TOWLINE_IMAGE, RUNNER_IMAGE)]
            remove_node_images(node, TOWLINE_IMAGE, RUNNER_IMAGE, *ids)
            yield registry
        finally:
            remove_node_images(node, *(ref for ref in node.images() if ref.startswith(f"{registry.host}/")))
            for name in (TOWLINE_IMAGE, RUNNER_IMAGE):
                node.load_image(archives[name])
            shutil.rmtree(trusted, ignore_errors=True)
