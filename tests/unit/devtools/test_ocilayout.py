"""OCI archives: named for containerd and skopeo, reproducible, checked on read, unpacked safely."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from towline_dev.ocilayout import (
    ANNOTATION_CONTAINERD_NAME,
    ANNOTATION_REF_NAME,
    ArchiveError,
    read_archive,
    unpack_rootfs,
    write_archive,
)

Entry = tuple[str, bytes | None, str | None]  # name, file content (None: directory), symlink target


def layer_bytes(entries: list[Entry]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, content, link in entries:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            elif content is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return gzip.compress(raw.getvalue(), mtime=0)


def make_layout(directory: Path, layers: list[list[Entry]], ref_name: str = "localhost/x:dev") -> Path:
    blobs = directory / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return "sha256:" + digest

    layer_blobs = [layer_bytes(entries) for entries in layers]
    config = json.dumps({"config": {"User": "65532:65532", "Entrypoint": ["towline"]},
                         "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": put(config),
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": put(blob),
                    "size": len(blob)} for blob in layer_blobs],
    }).encode()
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": put(manifest), "size": len(manifest),
        "annotations": {ANNOTATION_REF_NAME: ref_name}}]}
    (directory / "index.json").write_text(json.dumps(index))
    (directory / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return directory


def test_the_archive_names_the_image_for_containerd_and_skopeo(tmp_path: Path) -> None:
    layout = make_layout(tmp_path / "layout", [[("etc/", None, None), ("etc/hello", b"hi", None)]], "ignored:tag")
    write_archive(layout, tmp_path / "image.tar", "localhost/towline:dev")
    with tarfile.open(tmp_path / "image.tar") as tar:
        names = tar.getnames()
        member = tar.extractfile("index.json")
        assert member is not None
        annotations = json.loads(member.read())["manifests"][0]["annotations"]
    assert names[:2] == ["oci-layout", "index.json"]
    assert annotations[ANNOTATION_CONTAINERD_NAME] == "localhost/towline:dev"
    assert annotations[ANNOTATION_REF_NAME] == "localhost/towline:dev"
    image = read_archive(tmp_path / "image.tar")
    assert image.reference == "localhost/towline:dev"
    assert image.config["config"]["User"] == "65532:65532"
    assert len(image.layers) == 1


def test_equal_layouts_give_byte_identical_archives(tmp_path: Path) -> None:
    layout = make_layout(tmp_path / "layout", [[("a", b"1", None)]])
    write_archive(layout, tmp_path / "one.tar", "localhost/x:dev")
    (layout / "index.json").touch()
    write_archive(layout, tmp_path / "two.tar", "localhost/x:dev")
    assert (tmp_path / "one.tar").read_bytes() == (tmp_path / "two.tar").read_bytes()


def test_a_layout_with_several_images_is_refused(tmp_path: Path) -> None:
    layout = make_layout(tmp_path / "layout", [[("a", b"1", None)]])
    index = json.loads((layout / "index.json").read_text())
    index["manifests"] *= 2
    (layout / "index.json").write_text(json.dumps(index))
    with pytest.raises(ArchiveError, match="expected one image"):
        write_archive(layout, tmp_path / "image.tar", "localhost/x:dev")


def test_a_tampered_manifest_is_refused_on_read(tmp_path: Path) -> None:
    layout = make_layout(tmp_path / "layout", [[("a", b"1", None)]])
    digest = json.loads((layout / "index.json").read_text())["manifests"][0]["digest"].split(":")[1]
    manifest = layout / "blobs" / "sha256" / digest
    manifest.write_bytes(manifest.read_bytes().replace(b"schemaVersion", b"schemaversion"))
    write_archive(layout, tmp_path / "image.tar", "localhost/x:dev")
    with pytest.raises(ArchiveError, match="does not match its digest"):
        read_archive(tmp_path / "image.tar")


def test_unpacking_applies_layers_in_order_with_whiteouts(tmp_path: Path) -> None:
    lower = [("etc/", None, None), ("etc/keep", b"keep", None), ("etc/gone", b"x", None),
             ("opt/", None, None), ("opt/old/", None, None), ("opt/old/a", b"a", None), ("etc/over", b"v1", None)]
    upper = [("etc/.wh.gone", b"", None), ("opt/old/.wh..wh..opq", b"", None), ("opt/old/b", b"b", None),
             ("etc/over", b"v2", None)]
    write_archive(make_layout(tmp_path / "layout", [lower, upper]), tmp_path / "image.tar", "localhost/x:dev")
    rootfs = tmp_path / "rootfs"
    unpack_rootfs(read_archive(tmp_path / "image.tar"), rootfs)
    assert (rootfs / "etc" / "keep").read_bytes() == b"keep"
    assert not (rootfs / "etc" / "gone").exists()
    assert sorted(p.name for p in (rootfs / "opt" / "old").iterdir()) == ["b"]
    assert (rootfs / "etc" / "over").read_bytes() == b"v2"


def test_unpacking_never_writes_outside_the_rootfs_through_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    layers = [[("escape", None, str(outside))], [("escape/planted", b"owned", None)]]
    write_archive(make_layout(tmp_path / "layout", layers), tmp_path / "image.tar", "localhost/x:dev")
    with pytest.raises(tarfile.OutsideDestinationError):
        unpack_rootfs(read_archive(tmp_path / "image.tar"), tmp_path / "rootfs")
    assert not (outside / "planted").exists()
