"""The extension's tests import it from python/ and draw with Agg."""

import os
import sys

PACKAGE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "python"))
if PACKAGE_DIR not in sys.path:
    sys.path.insert(0, PACKAGE_DIR)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
