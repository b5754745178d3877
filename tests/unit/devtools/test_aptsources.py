"""The image base is built from the mirrors the host's apt uses, else Debian's public ones."""

from __future__ import annotations

from pathlib import Path

from towline_dev import imagebuild
from towline_dev.aptsources import (
    PUBLIC_MIRROR,
    PUBLIC_SECURITY_MIRROR,
    DebianMirrors,
    host_debian_mirrors,
    parse_deb822,
    parse_one_line,
)
from towline_dev.versions import IMAGE_DEBIAN_SUITE

DEB822 = """\
Types: deb deb-src
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example.internal/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: https://mirror.example.internal/debian-security
Suites: bookworm-security
Components: main
"""


def etc_with(tmp_path: Path, files: dict[str, str], codename: str = "bookworm") -> Path:
    etc = tmp_path / "etc"
    (etc / "apt" / "sources.list.d").mkdir(parents=True)
    (etc / "os-release").write_text(f'PRETTY_NAME="Debian"\nVERSION_CODENAME={codename}\n')
    for name, text in files.items():
        (etc / "apt" / name).write_text(text)
    return etc


def test_deb822_sources_give_the_archive_and_the_security_mirror(tmp_path: Path) -> None:
    etc = etc_with(tmp_path, {"sources.list.d/debian.sources": DEB822})
    assert host_debian_mirrors("bookworm", etc) == DebianMirrors(
        archive="http://mirror.example.internal/debian", security="https://mirror.example.internal/debian-security")


def test_one_line_sources_with_options_and_comments_are_read(tmp_path: Path) -> None:
    etc = etc_with(tmp_path, {"sources.list": (
        "# deb http://commented.example/debian bookworm main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/debian.gpg] http://local.example/debian bookworm main\n"
        "deb http://local.example/security bookworm-security main  # fixes\n"
    )})
    assert host_debian_mirrors("bookworm", etc) == DebianMirrors(
        archive="http://local.example/debian", security="http://local.example/security")


def test_a_vendor_repository_is_not_taken_for_debian(tmp_path: Path) -> None:
    etc = etc_with(tmp_path, {
        "sources.list.d/a-vendor.list": "deb https://packages.vendor.example/apt cloud-sdk-bookworm main\n",
        "sources.list.d/debian.sources": DEB822,
    })
    assert host_debian_mirrors("bookworm", etc).archive == "http://mirror.example.internal/debian"


def test_files_apt_ignores_and_disabled_stanzas_are_ignored(tmp_path: Path) -> None:
    etc = etc_with(tmp_path, {
        "sources.list.d/debian.sources.disabled": DEB822,
        "sources.list.d/off.sources": "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\n",
        "sources.list.d/cd.list": "deb cdrom:[Debian 12]/ bookworm main\n",
    })
    assert host_debian_mirrors("bookworm", etc) == DebianMirrors(PUBLIC_MIRROR, PUBLIC_SECURITY_MIRROR)


def test_without_apt_sources_the_public_mirrors_are_used(tmp_path: Path) -> None:
    assert host_debian_mirrors("bookworm", tmp_path / "nothing") == DebianMirrors(PUBLIC_MIRROR, PUBLIC_SECURITY_MIRROR)


def test_the_host_release_mirror_serves_the_image_suite(tmp_path: Path) -> None:
    """A trixie host with its local mirror builds the bookworm base from that mirror."""
    etc = etc_with(tmp_path, {"sources.list": "deb http://local.example/debian trixie main\n"}, codename="trixie")
    mirrors = host_debian_mirrors("bookworm", etc)
    assert mirrors == DebianMirrors("http://local.example/debian", PUBLIC_SECURITY_MIRROR)


def test_mmdebstrap_gets_the_host_mirrors_for_the_suite_its_updates_and_its_security_fixes(tmp_path: Path) -> None:
    etc = etc_with(tmp_path, {"sources.list.d/debian.sources": DEB822})
    suite = IMAGE_DEBIAN_SUITE
    assert imagebuild.debian_sources(etc) == [
        f"deb http://mirror.example.internal/debian {suite} main",
        f"deb http://mirror.example.internal/debian {suite}-updates main",
        f"deb https://mirror.example.internal/debian-security {suite}-security main",
    ]


def test_continuation_lines_and_several_uris_in_deb822() -> None:
    entries = parse_deb822("Types: deb\nURIs: http://a.example/debian\n http://b.example/debian\nSuites: sid\n")
    assert [e.uri for e in entries] == ["http://a.example/debian", "http://b.example/debian"]


def test_malformed_one_line_entries_are_skipped() -> None:
    assert parse_one_line("deb\ndeb [broken\ndeb http://only-uri.example\n") == []
