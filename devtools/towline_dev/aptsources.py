"""Which Debian mirrors the host's apt uses, so the image base is built from the same ones.

A machine behind a local mirror or a proxying mirror (a CI runner, a company
network) can often not reach Debian's public mirror at all; the host's apt
sources say what works there. Both formats apt reads are parsed: one-line
`*.list` files and deb822 `*.sources` files under /etc/apt (apt ignores files
with other endings, e.g. `*.disabled`, and so does this). The Debian archive
and its security archive are told apart by their suites (`<suite>-security`);
entries whose suites are not Debian releases (a vendor's repository) are
ignored. Only http(s) mirrors are taken; anything else (cdrom:, file:,
mirror+file:) leaves the public mirror in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PUBLIC_MIRROR = "http://deb.debian.org/debian"
PUBLIC_SECURITY_MIRROR = "http://deb.debian.org/debian-security"


@dataclass(frozen=True)
class SourceEntry:
    """One `deb` source: a URI and the suites taken from it."""

    uri: str
    suites: tuple[str, ...]


@dataclass(frozen=True)
class DebianMirrors:
    archive: str = PUBLIC_MIRROR
    security: str = PUBLIC_SECURITY_MIRROR


SYMBOLIC_SUITES = frozenset({"stable", "oldstable", "oldoldstable", "testing", "unstable", "sid", "experimental"})
SUITE_SUFFIXES = ("-security", "-updates", "-backports", "-proposed-updates", "/updates")


def host_debian_mirrors(suite: str, etc: Path = Path("/etc")) -> DebianMirrors:
    """The host's Debian and security mirrors; Debian's public ones for what the host does not name.

    Entries count as Debian's when their suite is `suite` (the one being built), the
    host's own release or a symbolic name (stable, testing ...), with or without
    -updates, -security, -backports.
    """
    suites = {suite, *SYMBOLIC_SUITES}
    codename = _os_release(etc / "os-release").get("VERSION_CODENAME")
    if codename:
        suites.add(codename)
    return mirrors_from(read_sources(etc / "apt"), suites)


def _os_release(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    pairs = (line.partition("=") for line in lines if "=" in line)
    return {key.strip(): value.strip().strip('"') for key, _, value in pairs}


def read_sources(apt_dir: Path) -> list[SourceEntry]:
    """Every `deb` entry of sources.list and sources.list.d, in the order apt reads them."""
    files = [apt_dir / "sources.list"]
    parts = apt_dir / "sources.list.d"
    if parts.is_dir():
        files += sorted(p for p in parts.iterdir() if p.suffix in (".list", ".sources"))
    entries: list[SourceEntry] = []
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        entries += parse_deb822(text) if path.suffix == ".sources" else parse_one_line(text)
    return entries


def parse_one_line(text: str) -> list[SourceEntry]:
    """`deb [options] URI SUITE COMPONENT...` lines; comments, deb-src and malformed lines are skipped."""
    entries = []
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # options, possibly spread over several words
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 2:
            entries.append(SourceEntry(uri=words[0], suites=(words[1],)))
    return entries


def parse_deb822(text: str) -> list[SourceEntry]:
    """Stanzas separated by blank lines; `Types` must include deb and `Enabled` must not be no."""
    entries = []
    for stanza in _stanzas(text):
        if "deb" not in stanza.get("types", "").split() or stanza.get("enabled", "yes").lower() == "no":
            continue
        suites = tuple(stanza.get("suites", "").split())
        entries += [SourceEntry(uri=uri, suites=suites) for uri in stanza.get("uris", "").split() if suites]
    return entries


def _stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = [{}]
    last: str | None = None
    for raw in text.splitlines():
        if raw.lstrip().startswith("#"):
            continue
        if not raw.strip():
            if stanzas[-1]:
                stanzas.append({})
            last = None
        elif raw[0] in " \t" and last is not None:  # a continuation line
            stanzas[-1][last] += " " + raw.strip()
        elif ":" in raw:
            key, _, value = raw.partition(":")
            last = key.strip().lower()
            stanzas[-1][last] = value.strip()
    return [stanza for stanza in stanzas if stanza]


def mirrors_from(entries: list[SourceEntry], debian_suites: set[str]) -> DebianMirrors:
    """The first http(s) entry of a Debian suite for the archive, the first of a security suite for fixes."""
    archive = security = None
    for entry in entries:
        if not entry.uri.startswith(("http://", "https://")):
            continue
        uri = entry.uri.rstrip("/")
        for suite in entry.suites:
            if _base_suite(suite) not in debian_suites:
                continue
            if suite.endswith(("-security", "/updates")):
                security = security or uri
            else:
                archive = archive or uri
    return DebianMirrors(archive=archive or PUBLIC_MIRROR, security=security or PUBLIC_SECURITY_MIRROR)


def _base_suite(suite: str) -> str:
    for suffix in SUITE_SUFFIXES:
        if suite.endswith(suffix):
            return suite.removesuffix(suffix)
    return suite
