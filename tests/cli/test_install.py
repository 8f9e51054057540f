"""The install layout deploy/Containerfile relies on, checked without a
container runtime (none can pull a base image here).

`cmake --install` of the build dir ($KB_BINARY's, else build/) into a
temporary prefix must hold every path the Containerfile's runtime stage
copies from its staged install; the installed binary runs, finds the
installed kernelspecs where the image puts them, and serves as the
Kubernetes manifests run it (token from the environment, sandbox id from
KB_SANDBOX_ID, the state dir inside a volume, /health without a token).
The build stage's sources are enough for CMake to configure, and the
runtime stage installs the packages of every library the binary links.
"""
import ast
import glob
import importlib.util
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("KB_BINARY", str(ROOT / "build" / "kernelbridge"))
BUILD_DIR = pathlib.Path(BINARY).resolve().parent
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
STAGE = "/stage"


def stages():
    """{stage name: [instruction lines]} of the Containerfile, continuation
    lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    out, name = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+\S+\s+AS\s+(\S+)$", line, re.I)
        if m:
            name = m.group(1)
            out[name] = []
        elif name:
            out[name].append(line)
    assert set(out) == {"build", "runtime"}, out.keys()
    return out


def copies(lines, from_stage=None):
    """(sources, dest) of each COPY, those --from=from_stage or, with None,
    those from the build context."""
    for line in lines:
        words = line.split()
        if words[0].upper() != "COPY":
            continue
        opts = [w for w in words[1:] if w.startswith("--")]
        paths = [w for w in words[1:] if not w.startswith("--")]
        source = next((o.split("=", 1)[1] for o in opts if o.startswith("--from=")), None)
        if source == from_stage:
            yield paths[:-1], paths[-1]


def apt_packages(lines):
    """The packages of the stage's apt-get install."""
    for line in lines:
        m = re.search(r"apt-get install (.*?)(&&|$)", line)
        if m:
            return [w for w in m.group(1).split() if not w.startswith("-")]
    raise AssertionError("no apt-get install")


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    assert (BUILD_DIR / "cmake_install.cmake").exists(), "no CMake build dir at %s" % BUILD_DIR
    prefix = tmp_path_factory.mktemp("install") / "prefix"
    done = subprocess.run(["cmake", "--install", str(BUILD_DIR), "--prefix", str(prefix)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return prefix


def test_the_build_stage_stages_a_cmake_install():
    build = " ".join(stages()["build"])
    assert re.search(r"cmake --install build --prefix %s\b" % STAGE, build), build
    assert "-DCMAKE_INSTALL_PREFIX=/usr/local" in build


def test_every_path_the_image_copies_from_the_staged_install_is_installed(prefix):
    copied = list(copies(stages()["runtime"], from_stage="build"))
    assert copied, "the runtime stage copies from the build stage"
    dests = []
    for sources, dest in copied:
        for source in sources:
            assert source.startswith(STAGE + "/"), source
            installed = prefix / source[len(STAGE) + 1:].rstrip("/")
            assert installed.exists(), "%s: not in `cmake --install`'s layout (%s)" % (
                source, sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*"))[:40])
            if source.endswith("/"):
                assert installed.is_dir(), source
        dests.append(dest)
    assert "/usr/local/bin/kernelbridge" in dests
    # the kernelspecs go where the daemon looks with no JUPYTER_PATH
    # (src/kernel/kb_kernelspecs.c: /usr/local/share/jupyter, /usr/share/jupyter)
    assert "/usr/local/share/jupyter/kernels/" in dests
    assert "/usr/local/share/jupyter" in (ROOT / "src/kernel/kb_kernelspecs.c").read_text()


def test_the_build_stage_copies_enough_for_cmake_to_configure(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for sources, dest in copies(stages()["build"], from_stage=None):
        for source in sources:
            matched = sorted(glob.glob(str(ROOT / source)))
            assert matched, "COPY %s: nothing in the tree" % source
            target = src / dest if dest != "./" else src
            for path in matched:
                path = pathlib.Path(path)
                if path.is_dir():
                    shutil.copytree(path, target, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns("node_modules", "__pycache__"))
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target / path.name)
    done = subprocess.run(["cmake", "-S", str(src), "-B", str(tmp_path / "build"),
                           "-DCMAKE_INSTALL_PREFIX=/usr/local"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_installed_binary_runs_and_finds_the_installed_kernelspecs(prefix, tmp_path):
    binary = prefix / "bin" / "kernelbridge"
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=30)
    assert version.returncode == 0, version.stderr
    built = subprocess.run([BINARY, "--version"], capture_output=True, text=True, timeout=30)
    assert version.stdout == built.stdout and version.stdout.startswith("kernelbridge ")
    # The image copies share/kernelbridge/kernelspecs/ to
    # /usr/local/share/jupyter/kernels/: the same, under a root of our own.
    jupyter = tmp_path / "usr/local/share/jupyter"
    shutil.copytree(prefix / "share/kernelbridge/kernelspecs", jupyter / "kernels")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8",
           "JUPYTER_PATH": str(jupyter), "KB_KERNELS": "python=python3"}
    done = subprocess.run([str(binary), "kernelspecs", "--json"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    found = {s["name"]: s for s in json.loads(done.stdout)["kernelspecs"]}
    shipped = sorted(p.parent.name for p in (ROOT / "kernelspecs").glob("*/kernel.json"))
    assert shipped, "kernelspecs/ ships kernelspecs"
    for name in shipped:
        assert name in found, "%s not found: %s" % (name, sorted(found))
        assert found[name]["resource_dir"].startswith(str(jupyter / "kernels")), found[name]


def test_the_runtime_stage_installs_what_the_binary_links(prefix):
    binary = prefix / "bin" / "kernelbridge"
    runtime = set(apt_packages(stages()["runtime"]))
    assert "python3-ipykernel" in runtime
    dump = subprocess.run(["objdump", "-p", str(binary)], capture_output=True, text=True,
                          timeout=30)
    assert dump.returncode == 0, dump.stderr
    needed = re.findall(r"^\s*NEEDED\s+(\S+)$", dump.stdout, re.M)
    assert "libzmq.so.5" in needed, needed
    ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=30)
    where = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd.stdout, re.M))
    for path in re.findall(r"^\s*(/\S+) \(", ldd.stdout, re.M):  # the dynamic loader
        where.setdefault(os.path.basename(path), path)
    candidates = {lib: [where[lib], "/usr" + where[lib], os.path.realpath(where[lib])]
                  for lib in needed}
    owners = _owners(c for cs in candidates.values() for c in cs)
    for lib, paths in candidates.items():
        owner = next((owners[p] for p in paths if p in owners), None)
        assert owner, "no Debian package owns %s" % paths[0]
        essential = subprocess.run(["dpkg-query", "-W", "-f=${Essential}", owner],
                                   capture_output=True, text=True).stdout.strip() == "yes"
        assert owner in runtime or essential or owner == "libc6", \
            "%s (%s) is not installed by the runtime stage" % (lib, owner)


def _owners(paths):
    """{path: Debian package} for the paths dpkg knows, in one dpkg -S (it
    reads every package's file list)."""
    found = subprocess.run(["dpkg", "-S", *sorted(set(paths))], capture_output=True, text=True,
                           timeout=120)
    owners = {}
    for line in found.stdout.splitlines():
        package, _, path = line.partition(": ")
        for name in package.split(", "):
            owners[path] = name.split(":")[0]
    return owners


def test_the_runtime_stage_installs_what_the_kernelspecs_run_and_import():
    # Each kernelspec's program, and the modules its kernel.py imports
    # beyond the standard library, come from a package the runtime stage
    # installs or one those depend on (this machine's Debian 12 is the
    # image's: setup.sh installs the same packages here).
    runtime = apt_packages(stages()["runtime"])
    depends = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends",
                              "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces",
                              "--no-enhances", *runtime], capture_output=True, text=True,
                             timeout=120)
    assert depends.returncode == 0, depends.stderr
    closure = {line for line in depends.stdout.splitlines() if not line.startswith(" ")}
    assert "python3-minimal" in closure, "apt-cache knows no dependencies: apt-get update"
    needs = {}  # path -> what needs it
    for spec in sorted((ROOT / "kernelspecs").glob("*/kernel.json")):
        argv0 = json.loads(spec.read_text())["argv"][0]
        assert os.path.isabs(argv0), "%s: argv[0] %s is not absolute" % (spec, argv0)
        needs[argv0] = "%s: argv[0]" % spec.parent.name
        script = spec.parent / "kernel.py"
        if not script.exists():
            continue
        modules = set()
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules.add(node.module.split(".")[0])
        for module in sorted(modules - set(sys.stdlib_module_names)):
            found = importlib.util.find_spec(module)
            assert found and found.origin, "%s imports %s, not installed here" % (script, module)
            origin = found.origin
            if os.path.basename(origin) == "__init__.py":
                origin = os.path.dirname(origin)
            needs[origin] = "%s: import %s" % (spec.parent.name, module)
    owners = _owners(needs)
    for path, why in sorted(needs.items()):
        assert path in owners, "%s: no Debian package owns %s" % (why, path)
        assert owners[path] in closure, "%s: %s (%s) is not in the image" % (
            why, owners[path], path)


def _get(url, token=None):
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def test_the_installed_daemon_serves_as_the_statefulset_runs_it(prefix, tmp_path):
    # The volume's root as Kubernetes makes it with fsGroup: group-writable,
    # setgid; the state dir is a subdir the daemon makes and owns.
    volume = tmp_path / "volume"
    volume.mkdir()
    os.chmod(volume, 0o2775)
    state_dir = volume / "state"
    port_file = tmp_path / "port"
    token = "test-install-token-1c9f"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "KB_SANDBOX_ID": "kb-0", "KB_TOKEN": token, "KB_LOG_FORMAT": "json"}
    daemon = subprocess.Popen([str(prefix / "bin/kernelbridge"), "serve", "--listen",
                               "127.0.0.1:0", "--state-dir", str(state_dir), "--pool",
                               "python=0", "--port-file", str(port_file)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            assert daemon.poll() is None, daemon.communicate()
            assert time.monotonic() < deadline, "the daemon did not listen"
            time.sleep(0.05)
        base = "http://127.0.0.1:%s" % port_file.read_text().strip()
        status, health = _get(base + "/health")  # the probes send no token
        assert status == 200, health
        assert health["sandbox_id"] == "kb-0"
        assert health["state"]["durable"] is True and health["state"]["dir"] == str(state_dir)
        assert _get(base + "/contexts")[0] == 401
        assert _get(base + "/contexts", token)[0] == 200
        assert (state_dir.stat().st_mode & 0o7777) == 0o700
        # KB_TOKEN is wiped from the environment the daemon started with
        with open("/proc/%d/environ" % daemon.pid, "rb") as f:
            assert token.encode() not in f.read()
        started = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
        assert time.monotonic() - started < 26  # deploy/k8s: terminationGracePeriodSeconds 60
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        daemon.stdout.close()
        daemon.stderr.close()
