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


def save(doc: dict[str, Any], path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(finite(doc), f, indent=1, default=str, allow_nan=False)
        f.write("\n")
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


def compact(path: str | None, key: str) -> None:
    """The results file at path with details[key] on one line, so that a
    bench with many details keeps its file short."""
    if not path or not os.path.exists(path):
        return
    with open(path) as f:
        doc = json.load(f)
    inner = json.dumps(doc["details"][key], separators=(",", ":"), allow_nan=False)
    doc["details"][key] = "\0"
    text = json.dumps(doc, indent=1, allow_nan=False).replace('"\\u0000"', inner)
    with open(path + ".tmp", "w") as f:
        f.write(text + "\n")
    os.replace(path + ".tmp", path)
