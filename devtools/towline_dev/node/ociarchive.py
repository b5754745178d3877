"""Write single-layer OCI image archives from local files, with no registry and no daemon.

The node has no image registry to pull from, so the images it needs of its own
(the pod sandbox, CoreDNS, small test images) are written here as OCI layout
tars that ``ctr -n k8s.io images import`` (and skopeo) accept. The layer is an
uncompressed tar built from files on this machine; the archive is deterministic
for the same inputs (fixed mtimes and owners), so a cache check can compare digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


@dataclass(frozen=True)
class ImageFile:
    """One file of the image: where it comes from on this machine, where it goes, its mode."""

    source: Path
    target: str
    mode: int = 0o755


@dataclass(frozen=True)
class ImageSpec:
    """What goes into an image: a reference, files, a command, a numeric user."""

    reference: str
    files: Sequence[ImageFile]
    entrypoint: Sequence[str]
    cmd: Sequence[str] = ()
    user: str = "65532:65532"
    directories: Sequence[str] = ("tmp",)
    env: Mapping[str, str] = field(default_factory=lambda: {"PATH": "/bin"})
    symlinks: Mapping[str, str] = field(default_factory=dict)
    """Path in the image -> what it points to (e.g. a busybox applet: "/bin/sh" -> "busybox")."""


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer_tar(spec: ImageSpec) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        targets = [f.target for f in spec.files] + list(spec.symlinks)
        parents = {str(Path(t.lstrip("/")).parent) for t in targets} | set(spec.directories)
        for directory in sorted(d for d in parents if d not in ("", ".")):
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        for item in sorted(spec.files, key=lambda f: f.target):
            data = item.source.read_bytes()
            info = tarfile.TarInfo(item.target.lstrip("/"))
            info.size = len(data)
            info.mode = item.mode
            tar.addfile(info, io.BytesIO(data))
        for path, points_to in sorted(spec.symlinks.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type = tarfile.SYMTYPE
            info.linkname = points_to
            info.mode = 0o777
            tar.addfile(info)
    return buffer.getvalue()


def _json_bytes(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def write_oci_archive(spec: ImageSpec, destination: Path) -> str:
    """Write `spec` as an OCI layout tar at `destination`; return the manifest digest."""
    layer = _layer_tar(spec)
    layer_digest = _sha256(layer)
    config = _json_bytes({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": list(spec.entrypoint),
            "Cmd": list(spec.cmd),
            "User": spec.user,
            "Env": [f"{k}={v}" for k, v in spec.env.items()],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "towline_dev.node.ociarchive"}],
    })
    manifest = _json_bytes({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": _sha256(config), "size": len(config)},
        "layers": [{"mediaType": OCI_LAYER, "digest": layer_digest, "size": len(layer)}],
    })
    manifest_digest = _sha256(manifest)
    index = _json_bytes({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{
            "mediaType": OCI_MANIFEST,
            "digest": manifest_digest,
            "size": len(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                # containerd names the imported image after this one...
                "io.containerd.image.name": spec.reference,
                # ...and OCI tools (skopeo's oci-archive:) after this one.
                "org.opencontainers.image.ref.name": spec.reference.rsplit(":", 1)[-1],
            },
        }],
    })
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary = destination.with_name(destination.name + ".partial")
    with tarfile.open(temporary, mode="w") as archive:
        entries = [
            ("oci-layout", _json_bytes({"imageLayoutVersion": "1.0.0"})),
            ("index.json", index),
            *((f"blobs/sha256/{_sha256(blob)[7:]}", blob) for blob in (layer, config, manifest)),
        ]
        for name, blob in entries:
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(blob))
    temporary.replace(destination)
    return manifest_digest
