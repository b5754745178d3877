"""The layer picture in docs/runtime.md (towline_dev.layers): boxes ranked above what they import, an arrow up (an
import cycle between boxes, or one against the layers contract) drawn dotted and named, and a stale picture refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from towline_dev import REPO_ROOT
from towline_dev.layers import BEGIN, END, arrows_of, box_of, contract_order, draw, main, render, with_picture


def test_each_module_is_drawn_in_its_box_and_the_watch_layer_is_one() -> None:
    assert box_of("towline.engine.decide") == "engine"
    assert {box_of(m) for m in ("towline.k8s.reflector", "towline.k8s.streams", "towline.k8s.indexer")} == {
        "k8s.watch"}
    assert box_of("towline.k8s.client") == "k8s.client" and box_of("towline.k8s.objects") == "k8s"
    assert box_of("towline.metrics") == "towline" and box_of("towline.cli") == "cli"
    assert box_of("towline_connectors.http") == "towline_connectors" and box_of("kopf.on") == "kopf"
    assert box_of("aiohttp") is None
    assert arrows_of([("towline.k8s.objects", "towline.k8s.labels"), ("kopf.on", "towline.cli"),
                      ("towline.runtime.runwatch", "towline.k8s.streams")]) == {("runtime", "k8s.watch")}, (
        "an import within a box, or from a third-party package, is no arrow")


def test_boxes_are_ranked_above_what_they_import_and_nothing_goes_up() -> None:
    picture = draw({("runtime", "handlers"), ("handlers", "engine"), ("runtime", "engine")}, {})
    assert picture.ranks == [["runtime"], ["handlers"], ["engine"]] and picture.up == []
    assert "No arrow goes up" in render(picture)


def test_an_import_cycle_between_boxes_is_an_arrow_up_drawn_dotted_and_named() -> None:
    picture = draw({("engine", "k8s"), ("k8s", "engine"), ("k8s", "api")}, {})
    assert picture.up == [("engine", "k8s"), ("k8s", "engine")]
    text = render(picture)
    assert "  engine -.-> k8s" in text and "  k8s --> api" in text
    assert "Arrows up: `engine` → `k8s`, `k8s` → `engine`." in text


def test_an_import_against_the_layers_contract_is_an_arrow_up() -> None:
    order = contract_order(REPO_ROOT / "pyproject.toml")
    assert order["runtime"] < order["handlers"] < order["k8s"] == order["k8s.watch"] < order["engine"] < order["api"]
    assert draw({("engine", "handlers")}, order).up == [("engine", "handlers")]


def test_the_picture_goes_between_its_markers_and_a_document_without_them_is_refused() -> None:
    document = f"# Runtime\n\n{BEGIN}\nold\n{END}\n\nmore\n"
    assert with_picture(document, f"{BEGIN}\nnew\n{END}\n") == f"# Runtime\n\n{BEGIN}\nnew\n{END}\n\nmore\n"
    with pytest.raises(ValueError, match=r"no .* section for the picture"):
        with_picture("# Runtime\n", "")


def test_a_stale_picture_fails_the_check_and_make_layers_redraws_it(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    document = tmp_path / "runtime.md"
    document.write_text(f"# Runtime\n\n{BEGIN}\nold\n{END}\n", encoding="utf-8")
    assert main(["--check", str(document)]) == 1
    assert "stale layer picture" in capsys.readouterr().err
    assert main(["--out", str(document)]) == 0
    assert main(["--check", str(document)]) == 0
    assert "```mermaid" in document.read_text(encoding="utf-8")
