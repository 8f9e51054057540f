"""What IPython shows in its pager (execute_reply's `page` payloads: `obj?`,
`obj??`, `%pinfo`, `%psource`, `%page`, `%prun`, `%lprun`) as results entries, not
main, after the run's other entries, on POST /run, its SSE stream and E2B's
listener; and clear_output(wait=True) followed by an error, read as nbclient
and JupyterLab read it (docs/results.md). Real daemon, Debian's ipykernel."""

import json
import re

import pytest

from test_e2b import E2b

DEFINE = (
    "def shout(word):\n"
    "    '''Say word louder.'''\n"
    "    return word.upper() + '!'\n"
    "numbers = [1, 2, 3]\n"
)


def plain(text):
    """Text without the ANSI colours IPython's pager text has (as sent)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def pages(result):
    assert result["error"] is None, result
    entries = [r for r in result["results"] if not r["is_main_result"]]
    assert entries, result
    return entries


@pytest.mark.parametrize(
    "code, expected",
    [
        ("len?", ["Signature: len(obj, /)", "Return the number of items in a container."]),
        ("shout??", ["def shout(word):", "Say word louder.", "return word.upper()"]),
        ("%pinfo shout", ["Signature: shout(word)", "Say word louder."]),
        ("%psource shout", ["def shout(word):", "return word.upper() + '!'"]),
        ("%page numbers", ["[1, 2, 3]"]),
        ("%prun -s cumulative shout('a')", ["function calls", "shout"]),
        ("%load_ext line_profiler\n%lprun -f shout shout('a')",
         ["Timer unit:", "return word.upper() + '!'"]),
    ],
)
def test_pager_output_is_a_results_entry(shared_daemon, code, expected):
    shared_daemon.run(DEFINE)
    r = shared_daemon.run(code)
    entries = pages(r)
    text = plain(entries[-1]["text"])
    assert text and all(piece in text for piece in expected), text
    assert plain(entries[-1]["data"]["text/plain"]) == text
    assert r["logs"]["stderr"] == ""


def test_pages_follow_the_other_entries(shared_daemon):
    code = "from IPython.display import display\nprint('first')\ndisplay('shown')\nlen?"
    r = shared_daemon.run(code)
    assert r["logs"]["stdout"] == "first\n"
    texts = [plain(e["text"]) for e in r["results"]]
    assert texts[0] == "'shown'" and texts[1].startswith("Signature: len"), texts
    assert [e["is_main_result"] for e in r["results"]] == [False, False]


def test_pages_on_the_sse_stream(shared_daemon):
    stream = shared_daemon.run_stream("len?")
    try:
        events = list(stream.events())
    finally:
        stream.close()
    displays = [e.data for e in events if e.event == "display"]
    assert len(displays) == 1 and plain(displays[0]["text"]).startswith("Signature: len"), events
    assert events[-1].data["results"] == displays


def test_other_payloads_are_left_out(shared_daemon):
    # %recall asks for the next input (set_next_input): no entry, no error
    shared_daemon.run("41 + 1")
    r = shared_daemon.run("%recall 1")
    assert r["error"] is None and r["results"] == [], r
    # exit() asks the frontend to close (ask_exit): the context stays
    r = shared_daemon.run("exit()")
    assert r["error"] is None and r["results"] == [], r
    assert shared_daemon.run("'still here'")["results"][0]["text"] == "'still here'"


def test_pages_through_e2b(daemon_factory):
    d = daemon_factory("--e2b-listen", "127.0.0.1:0", "--e2b-port-file", "e2b-port")
    status, _, body = E2b(d).request("POST", "/execute", {"code": "len?"})
    assert status == 200, body
    lines = [json.loads(line) for line in body.decode().splitlines() if line]
    results = [line for line in lines if line["type"] == "result"]
    assert len(results) == 1 and results[0]["is_main_result"] is False, lines
    assert plain(results[0]["text"]).startswith("Signature: len"), results
    assert lines[-1]["type"] == "end_of_execution"


def test_clear_then_error_clears_what_waited(shared_daemon):
    code = (
        "from IPython.display import clear_output, display\n"
        "print('gone')\ndisplay('also gone')\n"
        "clear_output(wait=True)\n"
        "raise RuntimeError('boom')"
    )
    r = shared_daemon.run(code)
    assert r["error"]["name"] == "RuntimeError" and r["error"]["value"] == "boom"
    assert r["logs"] == {"stdout": "", "stderr": ""}
    assert r["results"] == []
    # without wait=True the clear is at once, and what follows stays
    r = shared_daemon.run("from IPython.display import clear_output\n"
                          "print('gone')\nclear_output()\nprint('kept')\n1/0")
    assert r["logs"]["stdout"] == "kept\n" and r["error"]["name"] == "ZeroDivisionError"
