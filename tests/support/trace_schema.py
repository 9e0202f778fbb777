"""A strict checker of the JSON Trace Event Format as Perfetto imports it, written from the
format's specification (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU)
and Perfetto's JSON importer (``src/trace_processor/importers/json``), independently of the
writer under test (:mod:`sw.runtime.profile_export`). Perfetto's own ``trace_processor``
cannot run here: its Python package downloads the ``trace_processor_shell`` binary at first
use, and this machine has no network.

What it checks (each a rule of the spec or a behaviour of Perfetto's importer):

* the JSON Object Format: an object with a ``traceEvents`` array; ``displayTimeUnit``, if
  present, ``"ms"`` or ``"ns"`` (Perfetto then reads timestamps in that unit);
* strict JSON (no NaN or infinity) whose strings carry no ``\\u`` escapes (older Perfetto
  tokenizers reject them);
* every event: a known phase ``ph``; integer ``pid`` and ``tid``; ``"X"`` (complete) events
  with a string ``name``, numeric ``ts`` and ``dur >= 0``, a dict ``args`` if any; ``"M"``
  (metadata) events named ``process_name`` / ``thread_name`` (``args.name`` a string) or
  ``process_sort_index`` / ``thread_sort_index`` (``args.sort_index`` an integer);
* every track (pid, tid) with slices is named by a ``thread_name``, every process by a
  ``process_name``;
* the ``"X"`` events of one track nest properly (one lies inside the other or they are
  disjoint): Perfetto's slice tracker drops improperly nested complete events.
"""

from __future__ import annotations

import json
from collections import defaultdict

PHASES = set("BEXIiCbneSTpFsftPOND") | {"M", "R", "(", ")", "c", "v", "V"}
METADATA = {"process_name": ("name", str), "thread_name": ("name", str),
            "process_sort_index": ("sort_index", int), "thread_sort_index": ("sort_index", int),
            "process_labels": ("labels", str)}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v) -> bool:
    return _is_int(v) or isinstance(v, float)


def check_text(text: str) -> dict:
    """Parse a trace file's text strictly and check it; returns the document."""
    assert "\\u" not in text, "\\u escape in the JSON text"
    doc = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(
        AssertionError(f"non-JSON constant {c}")))
    check_document(doc)
    return doc


def _check_event(i: int, ev: dict) -> None:
    assert isinstance(ev, dict), f"event {i} is not an object"
    ph = ev.get("ph")
    assert isinstance(ph, str) and ph in PHASES, f"event {i}: bad phase {ph!r}"
    assert _is_int(ev.get("pid")) and _is_int(ev.get("tid")), f"event {i}: pid/tid not int"
    if "args" in ev:
        assert isinstance(ev["args"], dict), f"event {i}: args is not an object"
    if ph == "X":
        assert isinstance(ev.get("name"), str), f"event {i}: X without a string name"
        assert _number(ev.get("ts")) and ev["ts"] >= 0, f"event {i}: bad ts"
        assert _number(ev.get("dur")) and ev["dur"] >= 0, f"event {i}: bad dur"
        assert isinstance(ev.get("cat", ""), str), f"event {i}: cat is not a string"
    elif ph == "M":
        assert ev.get("name") in METADATA, f"event {i}: unknown metadata {ev.get('name')!r}"
        key, kind = METADATA[ev["name"]]
        value = ev.get("args", {}).get(key)
        assert (_is_int(value) if kind is int else isinstance(value, kind)), \
            f"event {i}: {ev['name']} needs args.{key} of type {kind.__name__}"


def _check_nesting(track: tuple[int, int], slices: list[dict]) -> None:
    stack: list[float] = []
    for ev in sorted(slices, key=lambda e: (e["ts"], -e["dur"])):
        end = ev["ts"] + ev["dur"]
        while stack and stack[-1] <= ev["ts"]:
            stack.pop()
        assert not stack or end <= stack[-1], \
            f"track {track}: {ev['name']!r} at {ev['ts']} overlaps its parent's end"
        stack.append(end)


def check_document(doc: dict) -> None:
    """Check a parsed trace document (see the module docstring); raises AssertionError."""
    assert isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list)
    if "displayTimeUnit" in doc:
        assert doc["displayTimeUnit"] in ("ms", "ns"), "displayTimeUnit must be ms or ns"
    json.dumps(doc, allow_nan=False)
    names, processes = set(), set()
    tracks: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for i, ev in enumerate(doc["traceEvents"]):
        _check_event(i, ev)
        if ev["ph"] == "M" and ev["name"] == "thread_name":
            names.add((ev["pid"], ev["tid"]))
        if ev["ph"] == "M" and ev["name"] == "process_name":
            processes.add(ev["pid"])
        if ev["ph"] == "X":
            tracks[(ev["pid"], ev["tid"])].append(ev)
    for track, slices in tracks.items():
        assert track in names, f"track {track} has no thread_name"
        assert track[0] in processes, f"process {track[0]} has no process_name"
        _check_nesting(track, slices)
