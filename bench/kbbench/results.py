"""A bench run's results: one JSON document per concept, saved by default to
bench/results/<concept>.json (committed: docs/PERFORMANCE.md's generated
tables are rendered from them) and read by bench/report.py.

    {"concept": "latency",
     "measured": {"date", "commit", "binary", "command", "machine": {...},
                  "note"},            # note: where the figures come from
     "figures": {"python3.overhead_us": {"label", "value", "unit"}, ...},
     "details": {...}}                # every figure of the run, as measured

A figure's value is a number, a bool, or null (measured but none: a client
never answered). bench/targets.py says which figures are checked.

Not for: rendering or checking (report.py).
"""

import json
import os
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(os.path.dirname(HERE), "results")

Figures = dict[str, dict[str, Any]]


def figure(label: str, value: Any, unit: str) -> dict[str, Any]:
    """One figure; a float that is not finite (nan, inf) is stored as null."""
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        value = None
    return {"label": label, "value": value, "unit": unit}


def default_path(concept: str) -> str:
    return os.path.join(RESULTS_DIR, f"{concept}.json")


def document(concept: str, figures: Figures, details: dict[str, Any],
             env: dict[str, Any], note: str = "") -> dict[str, Any]:
    """The results of one run of a concept, with what was measured on what."""
    machine = {k: env.get(k) for k in ("nproc", "cpu", "mem_gib", "kernel", "python")}
    return {
        "concept": concept,
        "measured": {
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "commit": env.get("commit"),
            "binary": env.get("binary"),
            "command": " ".join(["/usr/bin/python3", *_relative(sys.argv)]),
            "machine": machine,
            "note": note,
        },
        "figures": figures,
        "details": details,
    }


def _relative(argv: list[str]) -> list[str]:
    root = os.path.dirname(os.path.dirname(HERE)) + os.sep
    return [a[len(root):] if a.startswith(root) else a for a in argv]


def save(doc: dict[str, Any], path: str, inline: str | None = None) -> None:
    """Write doc to path (through a temporary file), with details[inline]
    on one line when named, so that a bench with many details keeps its
    file short."""
    doc = finite(doc)
    inner = None
    if inline:
        inner = json.dumps(doc["details"][inline], separators=(",", ":"), default=str,
                           allow_nan=False)
        doc = {**doc, "details": {**doc["details"], inline: "\0"}}
    text = json.dumps(doc, indent=1, default=str, allow_nan=False)
    if inner is not None:
        text = text.replace('"\\u0000"', inner)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, path)


def finite(obj: Any) -> Any:
    """obj with every float that is not finite replaced by null (strict JSON)."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def load(path: str) -> dict[str, Any]:
    with open(path) as f:
        doc = json.load(f)
    for key in ("concept", "measured", "figures"):
        if key not in doc:
            raise ValueError(f"{path}: no {key!r}: not a bench results file")
    return doc
