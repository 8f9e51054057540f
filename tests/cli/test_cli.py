"""The kernelbridge CLI: `run` and `kernelspecs`, as a person would use them."""
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("KB_BINARY", str(ROOT / "build" / "kernelbridge"))


def kb(*args, stdin=None, timeout=60):
    return subprocess.run([BINARY, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout)


def test_help_and_usage():
    top = kb("--help")
    assert top.returncode == 0 and "serve" in top.stdout and "run" in top.stdout
    assert kb("run", "--help").returncode == 0
    assert "exit status" in kb("run", "--help").stdout
    assert kb("kernelspecs", "--help").returncode == 0
    assert kb("nonsense").returncode == 2
    assert kb("run").returncode == 2
    assert kb("run", "-l", "python", "-k", "python3", "1").returncode == 2
    assert kb("run", "--timeout", "soon", "1").returncode == 2


def test_kernelspecs():
    plain = kb("kernelspecs")
    assert plain.returncode == 0
    assert "python3" in plain.stdout and "xpython" in plain.stdout
    specs = json.loads(kb("kernelspecs", "--json").stdout)["kernelspecs"]
    names = {spec["name"]: spec for spec in specs}
    assert names["python3"]["language"] == "python"
    assert names["python3"]["interrupt_mode"] in ("signal", "message")
    assert os.path.isdir(names["xpython"]["resource_dir"])


def test_kernelspecs_setup_installed_are_found_from_a_plain_shell():
    # `kernelbridge serve` as docs/getting-started.md starts it, from a
    # login shell of root: no JUPYTER_PATH, no JUPYTER_DATA_DIR; every
    # kernelspec scripts/setup.sh installs must be found (Deno's included),
    # with an argv that runs.
    import pwd
    home = pwd.getpwuid(os.getuid()).pw_dir
    plain = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "HOME": home, "LANG": "C.UTF-8"}
    done = subprocess.run([BINARY, "kernelspecs", "--json"], capture_output=True, text=True,
                          env=plain, cwd="/", timeout=60)
    assert done.returncode == 0, done.stderr
    specs = {spec["name"]: spec for spec in json.loads(done.stdout)["kernelspecs"]}
    expected = {"python3": "python", "xpython": "python", "ir": "R", "octave": "octave",
                "deno": "typescript", "bash": "bash"}
    for name, language in expected.items():
        assert name in specs, "%s not found (setup.sh installs it): %s" % (name, sorted(specs))
        assert specs[name]["language"] == language
    with open(os.path.join(specs["deno"]["resource_dir"], "kernel.json")) as f:
        deno = json.load(f)["argv"][0]
    assert os.path.isabs(deno) and os.access(deno, os.X_OK), deno
    # the bash kernel's copy is setup's, not the repository's, and readable
    # by kernels run as other users
    bash_dir = specs["bash"]["resource_dir"]
    assert bash_dir == "/usr/local/share/jupyter/kernels/bash", bash_dir
    for name in ("kernel.json", "kernel.py"):
        assert os.stat(os.path.join(bash_dir, name)).st_mode & 0o004, name
    table = subprocess.run([BINARY, "kernelspecs"], capture_output=True, text=True, env=plain,
                           timeout=60).stdout
    assert {line.split()[0] for line in table.splitlines()[1:]} >= set(expected)


def test_run_result_and_stdout():
    done = kb("run", "print('hello'); 1+1")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello\n2\n"


def test_run_error_exit_1():
    done = kb("run", "1/0")
    assert done.returncode == 1
    assert "ZeroDivisionError" in done.stderr


def test_run_json():
    done = kb("run", "--json", "print('x'); 6*7")
    assert done.returncode == 0
    result = json.loads(done.stdout)
    assert result["results"][0]["text"] == "42"
    assert result["results"][0]["is_main_result"] is True
    assert result["logs"]["stdout"] == "x\n"
    assert result["process"]["reason"] == "exited"
    assert result["process"]["exit_code"] == 0


def test_run_from_stdin_with_env_and_cwd(tmp_path):
    code = "import os\nprint(os.getcwd())\nprint(os.environ['GREETING'])\n"
    done = kb("run", "--cwd", str(tmp_path), "-e", "GREETING=hi there", "-", stdin=code)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path}\nhi there\n"


def test_run_code_that_is_not_utf8_is_refused():
    # A kernel cannot be sent it; refused up front rather than left waiting.
    done = subprocess.run([BINARY, "run", "-"], input=b"print(1)\n'\xff'\n", capture_output=True,
                          timeout=60)
    assert done.returncode == 2
    assert b"BAD_REQUEST" in done.stderr and b"UTF-8" in done.stderr


def test_run_timeout_exit_3():
    done = kb("run", "--timeout", "1", "import time; time.sleep(30)")
    assert done.returncode == 3
    assert "TimeoutError" in done.stderr


def test_run_kernel_failure_exit_4():
    done = kb("run", "import os; os._exit(7)")
    assert done.returncode == 4
    assert "KernelDied" in done.stderr


def test_run_unknown_language():
    done = kb("run", "-l", "cobol", "1")
    assert done.returncode == 2
    assert "LANGUAGE_NOT_SUPPORTED" in done.stderr and "python3" in done.stderr


def test_run_saves_png(tmp_path):
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n"
    done = kb("run", "--save-dir", str(tmp_path), code)
    assert done.returncode == 0, done.stderr
    saved = list(tmp_path.glob("*.png"))
    assert len(saved) == 1
    assert str(saved[0]) in done.stdout
    assert saved[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_other_kernel():
    done = kb("run", "-k", "xpython", "print('from xeus'); 3*3")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "from xeus\n9\n"
