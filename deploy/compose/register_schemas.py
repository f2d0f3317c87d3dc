"""Register lagpilot's event schemas in Redpanda's schema registry (compose's one-shot service).

Console lists registered subjects under *Schema Registry*, which is where people look for
"what is on this topic". lagpilot's messages are plain orjson (no registry wire header), so
the registry documents the contract and guards its evolution; ``schemas/*.json`` in the
repository stays the source of truth.

One topic carries several event kinds (``lagpilot.watermarks`` holds ``watermarks`` and
``commits``), but a subject has one schema, so each ``<topic>-value``
subject gets a ``oneOf`` of its events' schemas (every event pins ``event`` and ``v`` with
``const``, so exactly one branch matches). Events decoded but never published get a
subject of their own, ``lagpilot.<event>.v<v>``, so that every schema file is registered.

    python register_schemas.py --registry http://redpanda-0:8081 [--schemas-dir schemas/]

Exit 0 when every subject holds the current schema (registering an identical schema again
is a no-op in the registry), 1 when the registry refused one (the message says which and
why), 2 when the registry never answered.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import httpx

from schemas import topics

#: Which events go on which topic: the table at the top of docs/events.md
#: (tests/unit/deploy/test_compose.py keeps the two equal).
TOPIC_EVENTS: dict[str, tuple[str, ...]] = {
    topics.WATERMARKS: ("watermarks", "commits", "owners"),
    topics.LAG: ("partition_lag", "group_lag", "group_health", "input_state"),
    topics.CONTROL: ("action",),
    topics.OUTCOMES: ("outcome", "verification", "worker_outcome", "request_verdict", "intent"),
    topics.PRODUCERS: ("producer_rates",),
    topics.PROGRESS: ("progress",),
    topics.REQUESTS: ("action_request",),
}
#: Decoded from __consumer_offsets but published on no topic (docs/events.md says so).
UNPUBLISHED_EVENTS = ("commit", "offset_deleted", "group_metadata", "group_removed")
DRAFT = "https://json-schema.org/draft/2020-12/schema"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def load_schema_files(directory: Path | None = None) -> dict[str, dict[str, Any]]:
    """``{"<event>.v<v>": schema}`` from ``directory`` or from the installed ``schemas``."""
    if directory is not None:
        files = sorted(directory.glob("*.v*.json"))
        return {p.name.removesuffix(".json"): json.loads(p.read_text()) for p in files}
    root = resources.files("schemas")
    return {
        f.name.removesuffix(".json"): json.loads(f.read_text())
        for f in sorted(root.iterdir(), key=lambda f: f.name)
        if f.name.endswith(".json") and ".v" in f.name
    }


def subjects(schema_files: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The subject -> JSON Schema to register, for every schema file.

    Raises ValueError naming a schema file that belongs to no topic and is not listed as
    unpublished: a new event must be placed on a topic (here and in docs/events.md) before
    it can ship.
    """
    by_event: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for name, schema in sorted(schema_files.items()):
        event, _, _ = name.rpartition(".v")
        by_event.setdefault(event, []).append((name, schema))
    placed = {e for events in TOPIC_EVENTS.values() for e in events} | set(UNPUBLISHED_EVENTS)
    stray = sorted(set(by_event) - placed)
    if stray:
        raise ValueError(
            f"schema files for {stray} belong to no topic: add the event to TOPIC_EVENTS (or "
            "UNPUBLISHED_EVENTS) in deploy/compose/register_schemas.py and to docs/events.md"
        )
    out: dict[str, dict[str, Any]] = {}
    for topic, events in TOPIC_EVENTS.items():
        branches = [schema for e in events for _, schema in by_event.get(e, [])]
        if not branches:
            continue
        out[f"{topic}-value"] = {
            "$schema": DRAFT,
            "$id": f"https://lagpilot.dev/schemas/subjects/{topic}-value.json",
            "title": f"lagpilot events on {topic}: {', '.join(events)}",
            "description": "One of the event schemas below, told apart by `event` and `v`. "
            "Source of truth: schemas/*.json in the lagpilot repository.",
            "oneOf": branches,
        }
    for event in UNPUBLISHED_EVENTS:
        for name, schema in by_event.get(event, []):
            out[f"lagpilot.{name}"] = schema
    return out


def register(
    client: httpx.Client, registry_url: str, subject: str, schema: Mapping[str, Any]
) -> tuple[bool, str]:
    """POST one schema as a new version of ``subject``; (ok, what happened)."""
    body = {"schemaType": "JSON", "schema": json.dumps(schema, sort_keys=True)}
    url = f"{registry_url.rstrip('/')}/subjects/{subject}/versions"
    resp = client.post(url, json=body, headers={"Content-Type": CONTENT_TYPE})
    if resp.status_code == 200:
        return True, f"{subject}: schema id {resp.json().get('id')}"
    try:
        detail = resp.json().get("message", resp.text)
    except ValueError:
        detail = resp.text
    hint = ""
    if resp.status_code == 409:
        hint = (
            " (incompatible with the registered version: bump the event's version in "
            "schemas/, or relax the subject's compatibility with PUT /config/<subject>)"
        )
    return False, f"{subject}: HTTP {resp.status_code}: {detail}{hint}"


def wait_for_registry(client: httpx.Client, registry_url: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if client.get(f"{registry_url.rstrip('/')}/subjects").status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--registry", default="http://redpanda-0:8081", help="schema registry URL")
    ap.add_argument("--schemas-dir", type=Path, help="default: the installed schemas package")
    ap.add_argument("--wait-s", type=float, default=60.0, help="wait this long for the registry")
    args = ap.parse_args(argv)
    todo = subjects(load_schema_files(args.schemas_dir))
    with httpx.Client(timeout=10.0) as client:
        if not wait_for_registry(client, args.registry, args.wait_s):
            print(
                f"register_schemas: no schema registry answered at {args.registry} within "
                f"{args.wait_s:.0f} s; check that Redpanda is up and --registry points at its "
                "schema registry listener (port 8081 by default)",
                file=sys.stderr,
            )
            return 2
        failed = 0
        for subject, schema in todo.items():
            ok, message = register(client, args.registry, subject, schema)
            if ok:
                print(f"registered {message}")
            else:
                print(f"FAILED {message}", file=sys.stderr)
            failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
