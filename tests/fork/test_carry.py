"""What a fork carries (the namespace, data, history, cwd, env) and what it
does not (the parent's child processes, the user's threads, its random
state)."""

import os

import pytest

from .forklib import execute, stdout_of, value

pytestmark = pytest.mark.usefixtures("forks_are_our_children")


def test_variables_imports_functions_and_classes_are_carried(parent, forks):
    _, kc = parent
    execute(kc, "import json\nx = {'a': [1, 2]}\n"
                "def double(n):\n    return 2 * n\n"
                "class Point:\n    def __init__(self, x):\n        self.x = x\n"
                "p = Point(3)")
    fork = forks.of(kc)
    content, outputs = execute(fork.kc, "print(json.dumps(x), double(21), p.x, Point(5).x)")
    assert content["status"] == "ok", content
    assert stdout_of(outputs) == '{"a": [1, 2]} 42 3 5\n'


def test_a_numpy_array_and_a_pandas_dataframe_are_carried(parent, forks):
    _, kc = parent
    execute(kc, "import numpy as np, pandas as pd\n"
                "a = np.arange(1_000_000, dtype=np.float64)\n"
                "df = pd.DataFrame({'k': ['x', 'y', 'x'], 'v': [1, 2, 3]})")
    fork = forks.of(kc)
    assert value(fork.kc, "float(a.sum())") == "499999500000.0"
    assert value(fork.kc, "df.groupby('k').v.sum().to_dict()") == "{'x': 4, 'y': 2}"
    execute(fork.kc, "a[:] = 0\ndf.loc[0, 'v'] = 100")
    assert value(fork.kc, "float(a.sum())") == "0.0"
    assert value(kc, "float(a.sum())") == "499999500000.0"
    assert value(kc, "int(df.v.sum())") == "6"


def test_in_out_and_history_are_readable(parent, forks):
    _, kc = parent
    execute(kc, "6 * 7")
    execute(kc, "'second'")
    fork = forks.of(kc)
    assert value(fork.kc, "In[1]") == "'6 * 7'"
    assert value(fork.kc, "Out[1]") == "42"
    assert value(fork.kc, "_") == "'second'"
    content, outputs = execute(fork.kc, "%history -n")
    assert content["status"] == "ok", content
    text = stdout_of(outputs)
    assert "1: 6 * 7" in text and "2: 'second'" in text
    assert content["execution_count"] == 3
    assert value(fork.kc, "get_ipython().history_manager.hist_file") == "':memory:'"


def test_cwd_and_env_are_the_parents(parent, forks, tmp_path):
    _, kc = parent
    execute(kc, f"import os\nos.chdir({str(tmp_path)!r})\nos.environ['KB_FORK_MARK'] = 'yes'")
    fork = forks.of(kc)
    assert value(fork.kc, "os.getcwd()") == repr(str(tmp_path))
    assert value(fork.kc, "os.environ['KB_FORK_MARK']") == "'yes'"


def test_the_parents_child_processes_are_not_copied(parent, forks):
    _, kc = parent
    execute(kc, "import os, subprocess\nsleeper = subprocess.Popen(['sleep', '60'])")
    fork = forks.of(kc)
    children = open(f"/proc/{fork.pid}/task/{fork.pid}/children").read().split()
    assert children == []
    parent_pid = int(value(kc, "os.getpid()"))
    sleeper = int(value(kc, "sleeper.pid"))
    assert str(sleeper) in open(f"/proc/{parent_pid}/task/{parent_pid}/children").read().split()
    execute(kc, "sleeper.kill(); sleeper.wait()")


def test_user_threads_are_gone_and_the_fork_still_works(parent, forks):
    _, kc = parent
    execute(kc, "import threading, time\nstop = threading.Event()\n"
                "def spin():\n    while not stop.is_set():\n        time.sleep(0.001)\n"
                "workers = [threading.Thread(target=spin, daemon=True) for _ in range(4)]\n"
                "for w in workers: w.start()")
    fork = forks.of(kc)
    assert value(fork.kc, "[w.is_alive() for w in workers]") == "[False, False, False, False]"
    content, outputs = execute(fork.kc, "print('still here')")
    assert stdout_of(outputs) == "still here\n"
    assert value(kc, "all(w.is_alive() for w in workers)") == "True"
    execute(kc, "stop.set()")


def test_two_forks_draw_different_random_numbers(parent, forks):
    _, kc = parent
    execute(kc, "import random, numpy as np\nrandom.seed(1)\nnp.random.seed(1)")
    one, two = forks.of(kc), forks.of(kc)
    draw = "(random.random(), float(np.random.random()))"
    a, b, p = value(one.kc, draw), value(two.kc, draw), value(kc, draw)
    assert len({a, b, p}) == 3


def test_numpy_blas_works_in_the_fork_after_the_parent_used_it(parent, forks):
    _, kc = parent
    execute(kc, "import numpy as np\nm = np.random.random((400, 400))\nm @ m")
    fork = forks.of(kc)
    assert value(fork.kc, "(m @ m).shape") == "(400, 400)"


def test_a_file_the_parent_had_open_is_carried(parent, forks, tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("abcdef")
    _, kc = parent
    execute(kc, f"fh = open({str(path)!r})\nfh.read(2)")
    fork = forks.of(kc)
    assert value(fork.kc, "fh.read(2)") == "'cd'"
    assert os.path.exists(path)
