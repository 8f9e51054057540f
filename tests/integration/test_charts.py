"""Charts and tables as data (docs/charts.md) through the real daemon: Python
contexts on Debian's ipykernel load the project's IPython extension
kernelbridge_display at start (the pool's kernels too), unless
`--no-display-ext` says not to; the native result carries `chart` and
`table` on the entries that have them, E2B's listener `chart` and `data`.
"""

import json

from test_e2b import E2b

CHART = "application/vnd.kernelbridge.chart+json"
TABLE = "application/vnd.kernelbridge.table+json"

LINE = (
    "import matplotlib\n"
    "matplotlib.use('agg')\n"
    "import matplotlib.pyplot as plt\n"
    "fig, ax = plt.subplots()\n"
    "ax.plot([0, 1, 2], [3, 4, 5], label='up')\n"
    "ax.set_title('Up')\n"
    "ax.set_xlabel('Time (s)')\n"
    "fig"
)
FRAME = (
    "import pandas as pd\n"
    "pd.DataFrame({'city': ['Paris', 'Oslo'], 'temp': [3.5, float('nan')]})"
)
SUPER = (
    "import matplotlib\n"
    "matplotlib.use('agg')\n"
    "import matplotlib.pyplot as plt\n"
    "fig, (a, b) = plt.subplots(1, 2)\n"
    "a.plot([1, 2], [3, 4]); a.set_title('a')\n"
    "b.scatter([1], [2]); b.set_xlabel('X')\n"
    "fig"
)


def main_result(result):
    mains = [r for r in result["results"] if r["is_main_result"]]
    assert len(mains) == 1, result
    return mains[0]


def test_python_context_loads_the_extension(daemon):
    r = daemon.run(FRAME)
    assert r["error"] is None, r
    entry = main_result(r)
    assert entry["data"][TABLE] == {"city": ["Paris", "Oslo"], "temp": [3.5, None]}
    assert entry["table"] == entry["data"][TABLE] and "chart" not in entry
    assert "text/html" in entry["data"]
    # the pool's kernels are started the same way: a second context comes from it
    ctx = daemon.ok("POST", "/contexts", {"language": "python"}, status=201)
    r = daemon.run(LINE, context_id=ctx["context_id"])
    assert r["error"] is None, r
    entry = main_result(r)
    chart = entry["chart"]
    assert chart == entry["data"][CHART] and "table" not in entry
    assert chart["type"] == "line" and chart["title"] == "Up" and chart["x_unit"] == "s"
    assert chart["elements"] == [{"label": "up", "points": [[0, 3], [1, 4], [2, 5]]}]


def test_no_display_ext_leaves_kernels_as_installed(daemon_factory):
    d = daemon_factory("--no-display-ext")
    r = d.run(FRAME + "\nimport sys\nprint('kernelbridge_display' in sys.modules)")
    assert r["error"] is None, r
    assert r["logs"]["stdout"] == "False\n"
    r = d.run(FRAME)
    entry = main_result(r)
    assert TABLE not in entry["data"] and "text/html" in entry["data"]
    assert "table" not in entry and "chart" not in entry


def test_extension_is_on_the_kernel_path_last(daemon):
    code = (
        "import os, sys\n"
        "print(os.environ['PYTHONPATH'].split(':')[-1].endswith('/python'))\n"
        "print('kernelbridge_display' in get_ipython().extension_manager.loaded)"
    )
    r = daemon.run(code)
    assert r["logs"]["stdout"] == "True\nTrue\n", r


def test_plain_values_have_neither(daemon):
    r = daemon.run("from IPython.display import display\ndisplay({'a': 1}, raw=False)\n1 + 1")
    assert [e["text"] for e in r["results"]] == ["{'a': 1}", "2"], r
    for entry in r["results"]:
        assert "chart" not in entry and "table" not in entry


def test_image_figure_is_no_chart(daemon):
    code = (
        "import matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots()\nax.imshow([[0, 1], [1, 0]])\nfig"
    )
    r = daemon.run(code)
    assert r["error"] is None, r
    entry = main_result(r)
    assert "chart" not in entry and CHART not in entry["data"]
    assert entry["text"].startswith("<Figure")


def test_sse_display_events_carry_them(daemon):
    stream = daemon.run_stream(FRAME)
    try:
        events = list(stream.events())
    finally:
        stream.close()
    displays = [e.data for e in events if e.event == "display"]
    assert len(displays) == 1 and displays[0]["table"]["city"] == ["Paris", "Oslo"], events
    result = events[-1].data
    assert events[-1].event == "result" and result["results"] == displays


def test_e2b_lines_carry_chart_and_data(daemon_factory):
    d = daemon_factory("--e2b-listen", "127.0.0.1:0", "--e2b-port-file", "e2b-port")
    e2b = E2b(d)
    for code, field, other in ((FRAME, "data", "chart"), (LINE, "chart", "data")):
        status, _, body = e2b.request("POST", "/execute", {"code": code})
        assert status == 200, body
        lines = [json.loads(line) for line in body.decode().splitlines() if line]
        results = [line for line in lines if line["type"] == "result"]
        assert len(results) == 1, lines
        (line,) = results
        assert other not in line and "kernelbridge" not in json.dumps(line.get("extra", {}))
        native = main_result(d.run(code))
        if field == "data":
            assert line["data"] == native["table"]
        else:
            # E2B says null where the chart format says "" (no y label here)
            assert native["chart"]["y_label"] == "" and line["chart"]["y_label"] is None
            assert line["chart"] == dict(native["chart"], y_label=None)
    # a superchart's charts alike
    status, _, body = e2b.request("POST", "/execute", {"code": SUPER})
    (line,) = [json.loads(x) for x in body.decode().splitlines() if '"result"' in x]
    assert line["chart"]["title"] is None
    assert [(c["title"], c["x_label"]) for c in line["chart"]["elements"]] == [("a", None), (None, "X")]


def test_image_show_and_save_display_it(daemon, tmp_path):
    code = (
        "from PIL import Image\n"
        "image = Image.new('RGB', (4, 4), 'red')\n"
        "image.show()\n"
        f"image.save({str(tmp_path / 'red.png')!r})\n"
        "print('done')"
    )
    r = daemon.run(code)
    assert r["error"] is None and r["logs"]["stdout"] == "done\n", r
    assert len(r["results"]) == 2 and all(e["png"] for e in r["results"]), r
    assert (tmp_path / "red.png").exists()
