"""`make crds`, `make schemas`, `make crds-check`: write, or compare, the files generated from the models.

The generation itself is the API's and validation's (`towline.api.crdgen.generated_files`,
`towline.validation.editorschema.workflow_schema`: pure, no arguments, no files); this contributor
tool parses the command line and reads and writes the files. A user's own editor schema with their
step types' inputs is `towline editor-schema` (towline.cli).

    python -m towline_dev.generated crds --out DIR | --check DIR
    python -m towline_dev.generated chart-crds --out FILE | --check FILE   (the chart's CRD template)
    python -m towline_dev.generated schema --out FILE | --check FILE
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from towline.api.common import GROUP
from towline.api.crdgen import generated_files
from towline.api.structural import SchemaError
from towline.validation.editorschema import render, workflow_schema
from towline_dev.chartcrds import crds_template


def write_crds(directory: Path) -> list[Path]:
    """Write the CRDs into `directory`; files of ours that are no longer generated are removed."""
    directory.mkdir(parents=True, exist_ok=True)
    expected = generated_files()
    for path in directory.glob(f"*.{GROUP}.yaml"):
        if path.name not in expected:
            path.unlink()
    written = []
    for name, content in expected.items():
        write_if_changed(directory / name, content)
        written.append(directory / name)
    return written


def stale_crds(directory: Path) -> list[str]:
    """Names of CRD files in `directory` that differ from what the models generate, are missing or extra."""
    expected = generated_files()
    stale = [name for name, content in expected.items() if not _holds(directory / name, content)]
    stale += sorted(path.name for path in directory.glob(f"*.{GROUP}.yaml") if path.name not in expected)
    return stale


def write_if_changed(path: Path, text: str) -> None:
    """Leave an up-to-date file untouched (its modification time too), else write it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not _holds(path, text):
        path.write_text(text, encoding="utf-8")


def _holds(path: Path, text: str) -> bool:
    return path.is_file() and path.read_text(encoding="utf-8") == text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m towline_dev.generated", description=__doc__.splitlines()[0])
    kinds = parser.add_subparsers(dest="kind", required=True)
    for kind, target, what in (("crds", "DIR", "the CRDs"), ("chart-crds", "FILE", "the chart's CRD template"),
                               ("schema", "FILE", "the editor schema")):
        mode = kinds.add_parser(kind, help=f"write or check {what}").add_mutually_exclusive_group(required=True)
        mode.add_argument("--out", type=Path, metavar=target, help=f"write {what} into {target}")
        mode.add_argument("--check", type=Path, metavar=target, help=f"exit 1 if {what} in {target} are stale")
    args = parser.parse_args(argv)
    if args.kind == "crds":
        return _crds(args.out, args.check)
    if args.kind == "chart-crds":
        try:
            text = crds_template(generated_files())
        except SchemaError as error:
            print(f"cannot generate the CRDs: {error}", file=sys.stderr)
            return 1
        return _file(text, args.out, args.check, "chart CRD template", "make crds")
    return _file(render(workflow_schema()), args.out, args.check, "editor schema", "make schemas")


def _file(text: str, out: Path | None, check: Path | None, what: str, command: str) -> int:
    if out is not None:
        write_if_changed(out, text)
        print(f"wrote {out}")
        return 0
    assert check is not None
    if not _holds(check, text):
        print(f"stale {what} {check}; run `{command}` and commit the result", file=sys.stderr)
        return 1
    return 0


def _crds(out: Path | None, check: Path | None) -> int:
    try:
        generated_files()
    except SchemaError as error:  # a model a CRD cannot carry, or an undescribed field: nothing is written
        print(f"cannot generate the CRDs: {error}", file=sys.stderr)
        return 1
    if out is not None:
        for path in write_crds(out):
            print(f"wrote {path}")
        return 0
    assert check is not None
    stale = stale_crds(check)
    if stale:
        print(f"stale CRDs in {check}: {', '.join(stale)}; run `make crds` and commit the result", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
