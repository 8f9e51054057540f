"""Through a real ipykernel: %load_ext, then a plot, a DataFrame, a saved image."""

import os
import queue

import pytest
from jupyter_client.manager import KernelManager

from .conftest import PACKAGE_DIR

CHART_MIME = "application/vnd.kernelbridge.chart+json"
TABLE_MIME = "application/vnd.kernelbridge.table+json"


@pytest.fixture(scope="module")
def kernel():
    manager = KernelManager(kernel_name="python3")
    env = dict(os.environ, MPLBACKEND="module://matplotlib_inline.backend_inline")
    manager.start_kernel(env=env)
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    outputs = run(client, "import sys\nsys.path.insert(0, %r)\n%%load_ext kernelbridge_display" % PACKAGE_DIR)
    assert not [o for o in outputs if o["msg_type"] == "error"], outputs
    yield client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def run(client, code):
    """The iopub messages of one execution, up to its idle status."""
    msg_id = client.execute(code)
    outputs = []
    while True:
        try:
            msg = client.get_iopub_msg(timeout=60)
        except queue.Empty:
            raise AssertionError("no idle status for %r" % code)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return outputs
        if msg["msg_type"] in ("display_data", "execute_result", "stream", "error"):
            outputs.append({"msg_type": msg["msg_type"], **msg["content"]})


def test_plot_cell_display_data_carries_the_chart(kernel):
    outputs = run(kernel, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [2, 4, 8], label='y')\nplt.title('T');")
    displays = [o for o in outputs if o["msg_type"] == "display_data"]
    assert len(displays) == 1, outputs
    data = displays[0]["data"]
    assert "image/png" in data
    chart = data[CHART_MIME]
    assert chart["type"] == "line" and chart["title"] == "T"
    assert chart["elements"] == [{"label": "y", "points": [[1, 2], [2, 4], [3, 8]]}]


def test_dataframe_execute_result_carries_the_table(kernel):
    outputs = run(kernel, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [0.5, float('nan')]})")
    results = [o for o in outputs if o["msg_type"] == "execute_result"]
    assert len(results) == 1, outputs
    assert "text/html" in results[0]["data"]
    assert results[0]["data"][TABLE_MIME] == {"a": [1, 2], "b": [0.5, None]}


def test_imshow_gives_a_png_and_no_chart(kernel):
    outputs = run(kernel, "import matplotlib.pyplot as plt\nplt.imshow([[0, 1], [1, 0]]);")
    displays = [o for o in outputs if o["msg_type"] == "display_data"]
    assert len(displays) == 1 and "image/png" in displays[0]["data"], outputs
    assert CHART_MIME not in displays[0]["data"]
    assert not [o for o in outputs if o["msg_type"] in ("error", "stream")], outputs


def test_saved_pil_image_is_displayed(kernel, tmp_path):
    path = str(tmp_path / "square.png")
    outputs = run(kernel, "from PIL import Image\nImage.new('RGB', (3, 3), 'blue').save(%r)" % path)
    displays = [o for o in outputs if o["msg_type"] == "display_data"]
    assert len(displays) == 1 and "image/png" in displays[0]["data"], outputs


def test_one_plus_one_is_plain(kernel):
    outputs = run(kernel, "1 + 1")
    assert [o["data"] for o in outputs if o["msg_type"] == "execute_result"] == [{"text/plain": "2"}]
