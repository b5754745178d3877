"""The one name for a JSON object as the operator, the plugin and the tooling hand it around: an API object as
served, a manifest being built, a document read from the wire. Keys are strings; values are whatever JSON holds,
so each reader checks what it uses (towline.lenient reads leniently). Standard library only, importable from
every layer (the pure engine too). The connectors, which import nothing of the operator, keep their own."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
"""A JSON object."""
