"""OCI image archives: write one from an OCI layout directory, read and unpack one.

The archive is a plain tar of an OCI image layout (oci-layout, index.json,
blobs/sha256/...). Its index names the image twice: `org.opencontainers.image.ref.name`
(read by skopeo's `oci-archive:` transport) and `io.containerd.image.name`
(read by `ctr images import`, which otherwise invents a name). Entries are
sorted with fixed owners and times, so equal layouts give equal archives.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import posixpath
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from towline.jsontypes import JSON

ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"
ANNOTATION_CONTAINERD_NAME = "io.containerd.image.name"
WHITEOUT_PREFIX = ".wh."
OPAQUE_WHITEOUT = ".wh..wh..opq"


class ArchiveError(ValueError):
    """The archive is not a single-image OCI layout this module understands."""


def write_archive(layout: Path, archive: Path, reference: str) -> None:
    """Tar the OCI layout at `layout` into `archive`, naming its one image `reference`."""
    index = json.loads((layout / "index.json").read_text())
    manifests = index.get("manifests", [])
    if len(manifests) != 1:
        raise ArchiveError(f"{layout}: expected one image in index.json, found {len(manifests)}")
    annotations = dict(manifests[0].get("annotations") or {})
    annotations[ANNOTATION_REF_NAME] = reference
    annotations[ANNOTATION_CONTAINERD_NAME] = reference
    manifests[0]["annotations"] = annotations
    index_bytes = json.dumps(index, sort_keys=True, separators=(",", ":")).encode()

    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, "oci-layout", (layout / "oci-layout").read_bytes())
        _add_bytes(tar, "index.json", index_bytes)
        blob_dir = layout / "blobs" / "sha256"
        _add_directory(tar, "blobs")
        _add_directory(tar, "blobs/sha256")
        for blob in sorted(blob_dir.iterdir()):
            info = _info(f"blobs/sha256/{blob.name}", blob.stat().st_size)
            with blob.open("rb") as handle:
                tar.addfile(info, handle)
    partial.replace(archive)


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    info.mtime = 0
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(_info(name, len(data)), io.BytesIO(data))


def _add_directory(tar: tarfile.TarFile, name: str) -> None:
    info = _info(name, 0)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    tar.addfile(info)


@dataclass(frozen=True)
class OciImage:
    """One image read from an archive: its name, manifest, config and layer descriptors."""

    archive: Path
    reference: str
    manifest: JSON
    config: JSON

    @property
    def layers(self) -> list[JSON]:
        layers: list[JSON] = self.manifest["layers"]
        return layers


def read_archive(archive: Path) -> OciImage:
    """Parse the index, manifest and config of the single image in `archive`, checking digests."""
    with tarfile.open(archive) as tar:
        index = _read_json(tar, "index.json")
        manifests = index.get("manifests", [])
        if len(manifests) != 1:
            raise ArchiveError(f"{archive}: expected one image, found {len(manifests)}")
        annotations = manifests[0].get("annotations") or {}
        manifest = _read_json(tar, _blob_path(manifests[0]["digest"]), manifests[0]["digest"])
        config = _read_json(tar, _blob_path(manifest["config"]["digest"]), manifest["config"]["digest"])
    return OciImage(archive, annotations.get(ANNOTATION_CONTAINERD_NAME, ""), manifest, config)


def _blob_path(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64:
        raise ArchiveError(f"unsupported digest {digest!r}")
    return f"blobs/sha256/{hexdigest}"


def _read_json(tar: tarfile.TarFile, name: str, digest: str | None = None) -> JSON:
    member = tar.extractfile(name)
    if member is None:
        raise ArchiveError(f"{name} is missing from the archive")
    data = member.read()
    if digest is not None and "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise ArchiveError(f"{name} does not match its digest")
    loaded: JSON = json.loads(data)
    return loaded


def iter_layer_members(image: OciImage) -> Iterator[tuple[int, tarfile.TarFile, tarfile.TarInfo]]:
    """Every entry of every layer, bottom layer first: (layer index, layer tar, entry)."""
    with tarfile.open(image.archive) as outer:
        for position, layer in enumerate(image.layers):
            blob = outer.extractfile(_blob_path(layer["digest"]))
            if blob is None:
                raise ArchiveError(f"layer {layer['digest']} is missing from the archive")
            with _layer_stream(blob, layer["mediaType"]) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
                for member in tar:
                    yield position, tar, member


def _layer_stream(blob: IO[bytes], media_type: str) -> IO[bytes] | gzip.GzipFile:
    if media_type.endswith("+gzip") or media_type.endswith(".gzip"):
        return gzip.GzipFile(fileobj=blob, mode="rb")
    if media_type.endswith(".tar") or media_type.endswith("tar"):
        return blob
    raise ArchiveError(f"unsupported layer media type {media_type}")


def unpack_rootfs(image: OciImage, rootfs: Path) -> None:
    """Apply every layer in order into `rootfs`, honouring whiteouts; devices are skipped."""
    rootfs.mkdir(parents=True, exist_ok=True)
    for _, tar, member in iter_layer_members(image):
        name = posixpath.normpath(member.name).lstrip("/")
        if name.startswith("..") or name in {"", "."}:
            continue
        directory, base = posixpath.split(name)
        if base == OPAQUE_WHITEOUT:
            _clear_directory(rootfs / directory)
            continue
        if base.startswith(WHITEOUT_PREFIX):
            _remove(rootfs / directory / base[len(WHITEOUT_PREFIX):])
            continue
        if member.isdev():
            continue
        target = rootfs / name
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            target.unlink()
        # "tar" refuses names that resolve outside rootfs, also through a symlink a layer made.
        tar.extract(member, rootfs, set_attrs=True, numeric_owner=True, filter="tar")


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _clear_directory(path: Path) -> None:
    if path.is_dir():
        for child in path.iterdir():
            _remove(child)
