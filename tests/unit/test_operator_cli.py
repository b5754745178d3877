"""The `towline operator` options that the chart sets through the environment."""

from __future__ import annotations

from towline.cli import watch_namespaces_from


def test_watch_namespaces_are_read_from_the_comma_separated_value() -> None:
    assert watch_namespaces_from("team-a, team-b,") == ["team-a", "team-b"]


def test_no_watch_namespaces_means_every_namespace() -> None:
    assert watch_namespaces_from("") == []
    assert watch_namespaces_from(" , ") == []
