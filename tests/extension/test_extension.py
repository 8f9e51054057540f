"""The extension in an IPython shell: its MIME types, its cost, saved images."""

import io
import os
import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pytest
from IPython.testing.globalipapp import get_ipython
from IPython.utils.capture import capture_output

import kernelbridge_display
from kernelbridge_display import CHART_MIME, TABLE_MIME

from .conftest import PACKAGE_DIR


@pytest.fixture(scope="module")
def shell():
    ip = get_ipython()
    ip.extension_manager.load_extension("kernelbridge_display")
    yield ip
    ip.extension_manager.unload_extension("kernelbridge_display")


def test_figure_and_dataframe_get_their_mime_types(shell):
    import pandas as pd

    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    data, _ = shell.display_formatter.format(fig)
    assert data[CHART_MIME]["elements"] == [{"label": "", "points": [[1, 3], [2, 4]]}]
    data, _ = shell.display_formatter.format(pd.DataFrame({"a": [1]}))
    assert data[TABLE_MIME] == {"a": [1]}
    data, _ = shell.display_formatter.format(2)
    assert CHART_MIME not in data and TABLE_MIME not in data
    plt.close("all")


def test_image_figure_adds_nothing_and_prints_no_error(shell):
    fig, ax = plt.subplots()
    ax.imshow(np.zeros((4, 4)))
    with capture_output() as captured:
        data, _ = shell.display_formatter.format(fig)
    assert CHART_MIME not in data
    assert captured.stdout == "" and captured.stderr == ""
    plt.close("all")


def test_saved_image_is_displayed_a_buffer_is_not(shell, tmp_path):
    from PIL import Image

    image = Image.new("RGB", (8, 4), "red")
    with capture_output() as captured:
        image.save(tmp_path / "red.png")
        image.save(str(tmp_path / "red.jpg"))
        image.save(io.BytesIO(), format="PNG")
    assert (tmp_path / "red.png").exists() and (tmp_path / "red.jpg").exists()
    assert len(captured.outputs) == 2
    assert all("PIL.Image.Image image mode=RGB size=8x4" in output.data["text/plain"] for output in captured.outputs)


def test_shown_image_is_displayed_not_opened(shell):
    from PIL import Image

    image = Image.new("RGB", (3, 5), "blue")
    with capture_output() as captured:
        image.show()
    assert len(captured.outputs) == 1
    assert "size=3x5" in captured.outputs[0].data["text/plain"]


def test_unloading_puts_pillow_back(shell):
    from PIL import Image

    shell.extension_manager.unload_extension("kernelbridge_display")
    try:
        assert not getattr(Image.Image.show, "_kernelbridge_display_wrapped", False)
        assert not getattr(Image.Image.save, "_kernelbridge_display_wrapped", False)
    finally:
        shell.extension_manager.load_extension("kernelbridge_display")
    assert getattr(Image.Image.show, "_kernelbridge_display_wrapped", False)


def test_savefig_through_pillow_is_not_displayed_again(shell, tmp_path):
    from PIL import Image  # savefig's PNG and JPEG writer

    assert getattr(Image.Image.save, "_kernelbridge_display_wrapped", False)
    fig, ax = plt.subplots()
    ax.plot([1, 2])
    with capture_output() as captured:
        fig.savefig(tmp_path / "fig.png")
        fig.savefig(tmp_path / "fig.jpg")
    assert (tmp_path / "fig.png").exists() and (tmp_path / "fig.jpg").exists()
    assert captured.outputs == []
    plt.close("all")


CHEAP = r"""
import sys
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
heavy = ("matplotlib", "pandas", "PIL", "numpy")
before = [m for m in heavy if m in sys.modules]
ip.extension_manager.load_extension("kernelbridge_display")
ip.run_cell("x = 1 + 1\nx")
ip.display_formatter.format({"a": [1, 2]})
ip.display_formatter.format([1.5, "text", None])
after = [m for m in heavy if m in sys.modules]
print("imported:" + ",".join(sorted(set(after) - set(before))))
"""


def test_loading_and_running_imports_nothing_it_inspects():
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR)
    env.pop("MPLBACKEND", None)
    out = subprocess.run([sys.executable, "-c", CHEAP], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("imported:"), out.stdout + out.stderr


def test_pil_already_imported_is_wrapped_at_load(tmp_path):
    code = (
        "from PIL import Image\n"
        "from IPython.testing.globalipapp import get_ipython\n"
        "from IPython.utils.capture import capture_output\n"
        "ip = get_ipython()\n"
        "ip.extension_manager.load_extension('kernelbridge_display')\n"
        "with capture_output() as c:\n"
        "    Image.new('L', (2, 2)).save(%r)\n"
        "print(len(c.outputs))\n" % str(tmp_path / "g.png")
    )
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip()[-2:] in ("\n1", "\x071"), out.stdout + out.stderr


def test_mime_types_are_vendor_json():
    assert kernelbridge_display.CHART_MIME == "application/vnd.kernelbridge.chart+json"
    assert kernelbridge_display.TABLE_MIME == "application/vnd.kernelbridge.table+json"
