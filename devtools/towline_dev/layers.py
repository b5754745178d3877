"""`make layers`, `make layers-check`: the picture of the operator's layers in docs/runtime.md, drawn from the imports.

grimp (what import-linter reads) builds the import graph of `towline`, `towline_connectors` and `towline_step`.
Each module is drawn as its package (`towline.engine`, ...); `towline.cli` and `towline.expressions` are boxes of
their own, the other top-level modules (metrics, logs, text, ...) one box, and `towline.k8s` three: the API client,
the watch layer (the reflector, the persistent streams and the indexed stores every process shares) and the rest.
An arrow is one box importing another; the boxes are ranked by the arrows (each box above everything it imports).
An arrow that goes up (within an import cycle between boxes, or against the order of the "Layers import only
downward" contract in pyproject.toml) is drawn dotted and named under the picture.

    python -m towline_dev.layers --out docs/runtime.md | --check docs/runtime.md
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grimp

from towline_dev import REPO_ROOT

PACKAGES = ("towline", "towline_connectors", "towline_step")
BEGIN = "<!-- layers: drawn by `make layers` from the code's imports (towline_dev.layers); never edited by hand -->"
END = "<!-- /layers -->"

WATCH_LAYER = ("towline.k8s.reflector", "towline.k8s.streams", "towline.k8s.indexer")
API_CLIENT = ("towline.k8s.client", "towline.k8s.kubeconfig", "towline.k8s.connection", "towline.k8s.kubeconfigplugins",
              "towline.k8s.generatedclient")
SHARED = "towline"
"""The box of the other top-level modules (towline.metrics, towline.logs, towline.text, ...)."""
OWN_BOXES = ("cli", "expressions")
"""Top-level modules drawn as boxes of their own: layers of the import contract."""
EXTERNAL = ("kopf",)
"""Third-party packages drawn too: kopf runs the operator's process and still watches Workflows and step types."""

LABELS = {
    "k8s.client": "towline.k8s: API client",
    "k8s.watch": "towline.k8s: watch layer<br/>reflector, streams, indexer",
    "k8s": "towline.k8s: objects, actions",
    SHARED: "towline: metrics, logs, text, ...",
    "towline_connectors": "towline_connectors",
    "towline_step": "towline_step (stepkit)",
    "kopf": "kopf",
}


def box_of(module: str) -> str | None:
    """The box a module is drawn in (None: not drawn)."""
    parts = module.split(".")
    if parts[0] in EXTERNAL:
        return parts[0]
    if parts[0] != "towline":
        return parts[0] if parts[0] in PACKAGES else None
    if any(module == name or module.startswith(name + ".") for name in WATCH_LAYER):
        return "k8s.watch"
    if module in API_CLIENT:
        return "k8s.client"
    if len(parts) == 1 or (parts[1] not in OWN_BOXES and not _is_package(parts[1])):
        return SHARED
    return parts[1]


def _is_package(name: str) -> bool:
    return (REPO_ROOT / "operator" / "towline" / name / "__init__.py").is_file()


@dataclass(frozen=True)
class Picture:
    ranks: list[list[str]]
    """Boxes from the top (imports nothing drawn above it) down."""
    arrows: list[tuple[str, str]]
    up: list[tuple[str, str]]


def arrows_of(imports: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """(importer, imported) module pairs as arrows between boxes."""
    found = set()
    for importer, imported in imports:
        source, target = box_of(importer), box_of(imported)
        if source and target and source != target and source not in EXTERNAL:
            found.add((source, target))
    return found


def contract_order(pyproject: Path) -> dict[str, int]:
    """Box -> its layer in the import-linter contract "Layers import only downward" (0: the top)."""
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract.get("type") == "layers":
            order = {}
            for number, layer in enumerate(contract["layers"]):
                for module in layer.split("|"):
                    name = module.strip().removeprefix("towline.")
                    for box in (("k8s", "k8s.client", "k8s.watch") if name == "k8s" else (name,)):
                        order[box] = number
            return order
    raise ValueError(f"{pyproject} has no layers contract")


def draw(arrows: set[tuple[str, str]], order: Mapping[str, int]) -> Picture:
    """Rank the boxes: a box sits one rank above the lowest box it imports (arrows within a cycle do not count)."""
    boxes = sorted({box for arrow in arrows for box in arrow})
    cyclic = _in_cycles(boxes, arrows)
    up = sorted(arrow for arrow in arrows if arrow in cyclic
                or (arrow[0] in order and arrow[1] in order and order[arrow[0]] > order[arrow[1]]))
    downward = {arrow for arrow in arrows if arrow not in up}
    height: dict[str, int] = {}

    def height_of(box: str) -> int:
        if box not in height:
            height[box] = 1 + max((height_of(b) for a, b in downward if a == box), default=-1)
        return height[box]

    top = max((height_of(box) for box in boxes), default=0)
    ranks = [sorted(box for box in boxes if height_of(box) == level) for level in range(top, -1, -1)]
    return Picture(ranks=[rank for rank in ranks if rank], arrows=sorted(arrows), up=up)


def _in_cycles(boxes: list[str], arrows: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The arrows whose target also reaches their source."""
    reach: dict[str, set[str]] = {}

    def reached(box: str) -> set[str]:
        if box not in reach:
            reach[box] = set()
            stack = [box]
            while stack:
                for a, b in arrows:
                    if a == stack[-1] and b not in reach[box]:
                        reach[box].add(b)
                        stack.append(b)
                        break
                else:
                    stack.pop()
        return reach[box]

    return {(a, b) for a, b in arrows if a in reached(b)}


def render(picture: Picture) -> str:
    """The Mermaid picture and its text form, between the markers."""
    def ident(box: str) -> str:
        return box.replace(".", "_")

    lines = [BEGIN, "", "```mermaid", "flowchart TD"]
    for rank in picture.ranks:
        for box in rank:
            lines.append(f'  {ident(box)}["{LABELS.get(box, "towline." + box)}"]')
    for source, target in picture.arrows:
        lines.append(f"  {ident(source)} {'-.->' if (source, target) in picture.up else '-->'} {ident(target)}")
    lines.append("  style k8s_watch stroke-width:3px")
    lines += ["```", "", "| Rank | Boxes | Import |", "| --- | --- | --- |"]
    for number, rank in enumerate(picture.ranks):
        for box in rank:
            imported = ", ".join(f"`{target}`" for source, target in picture.arrows if source == box) or "—"
            lines.append(f"| {number} | `{box}` | {imported} |")
    lines.append("")
    if picture.up:
        lines.append("Arrows up: " + ", ".join(f"`{a}` → `{b}`" for a, b in picture.up) + ".")
    else:
        lines.append("No arrow goes up: every box imports only boxes below it.")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def picture_of_the_code() -> str:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=True, cache_dir=None)
    imports = ((module, imported) for module in graph.modules
               for imported in graph.find_modules_directly_imported_by(module))
    return render(draw(arrows_of(imports), contract_order(REPO_ROOT / "pyproject.toml")))


def with_picture(document: str, picture: str) -> str:
    """`document` with the text between the markers (markers included) replaced by `picture`."""
    if BEGIN not in document or END not in document:
        raise ValueError(f"the document has no {BEGIN!r} ... {END!r} section for the picture")
    before, rest = document.split(BEGIN, 1)
    return before + picture.rstrip("\n") + rest.split(END, 1)[1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m towline_dev.layers", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", type=Path, metavar="DOC", help="write the picture into DOC between its markers")
    mode.add_argument("--check", type=Path, metavar="DOC", help="exit 1 if the picture in DOC is stale")
    args = parser.parse_args(argv)
    path: Path = args.out or args.check
    document = path.read_text(encoding="utf-8")
    try:
        updated = with_picture(document, picture_of_the_code())
    except ValueError as error:
        print(f"{path}: {error}", file=sys.stderr)
        return 1
    if args.check is not None:
        if updated != document:
            print(f"stale layer picture in {path}; run `make layers` and commit the result", file=sys.stderr)
            return 1
        return 0
    if updated != document:
        path.write_text(updated, encoding="utf-8")
    print(f"wrote the layer picture into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
