"""docs/reference/http-api.md is api/gen_reference.py's output for the
committed api/openapi.yaml (rerun the script after changing the document),
and it names every path and method of the document."""

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "api" / "gen_reference.py"
REFERENCE = ROOT / "docs" / "reference" / "http-api.md"


def test_reference_is_the_generators_output():
    done = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_reference_names_every_operation():
    with open(ROOT / "api" / "openapi.yaml", encoding="utf-8") as f:
        document = yaml.safe_load(f)
    text = REFERENCE.read_text(encoding="utf-8")
    operations = [(m.upper(), p) for p, item in document["paths"].items()
                  for m in item if m in ("get", "post", "put", "patch", "delete")]
    assert len(operations) >= 20
    for method, path in operations:
        assert "### `%s %s`" % (method, path) in text, (method, path)
    for name in document["components"]["schemas"]:
        assert "### %s\n" % name in text, name
