"""Support of tests/deploy's Python tests: the image kernelbridge:<version>
(built by scripts/build-image.sh) run with podman as deploy/k8s's
StatefulSet runs it, every setting read from the manifest: its args, its
env (the token from this process's environment, never on a command line;
KB_SANDBOX_ID the pod's name), its securityContext (uid and gid, read-only
root, every capability dropped, no new privileges), its emptyDirs as tmpfs
and the state claim as a private dir made writable for fsGroup, and its
terminationGracePeriodSeconds as `podman stop`'s timeout. Containers
publish on an ephemeral loopback port only, and are removed at the end."""

from __future__ import annotations

import json
import os
import pathlib
import re
import resource
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any, Dict, List, Optional, Tuple

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
sys.path.insert(0, str(ROOT / "sdk" / "python" / "src"))  # the working tree's SDK

RUNTIME = os.environ.get("KB_OCI_RUNTIME", "runc")


def version() -> str:
    text = (ROOT / "sdk/python/src/kernelbridge/_version.py").read_text()
    return re.search(r'^__version__ = "(.*)"$', text, re.M).group(1)


def podman(*args: str, check: bool = True, timeout: float = 120, env: Optional[Dict[str, str]] = None,
           input: Optional[str] = None) -> subprocess.CompletedProcess:
    out = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                         env=env, input=input)
    if check and out.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {out.returncode}\n{out.stdout}\n{out.stderr}")
    return out


def ulimits() -> List[str]:
    """This machine's hard limits (capped as scripts/build-image.sh caps them):
    podman's defaults may exceed them, and runc then refuses to start."""
    out = []
    for name, which, cap in (("nofile", resource.RLIMIT_NOFILE, 1048576),
                             ("nproc", resource.RLIMIT_NPROC, 32768)):
        hard = resource.getrlimit(which)[1]
        n = cap if hard == resource.RLIM_INFINITY or hard > cap else hard
        out += ["--ulimit", f"{name}={n}:{n}"]
    return out


def build_image() -> str:
    """scripts/build-image.sh (idempotent: cached layers), or KB_IMAGE as given."""
    if os.environ.get("KB_IMAGE"):
        return os.environ["KB_IMAGE"]
    out = subprocess.run([str(ROOT / "scripts" / "build-image.sh")], capture_output=True, text=True,
                         timeout=1800)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-8000:]
    return f"kernelbridge:{version()}"


def statefulset() -> Dict[str, Any]:
    for doc in yaml.safe_load_all((DEPLOY / "k8s" / "statefulset.yaml").read_text()):
        if doc and doc.get("kind") == "StatefulSet":
            return doc
    raise AssertionError("no StatefulSet in deploy/k8s/statefulset.yaml")


def pod_spec() -> Dict[str, Any]:
    return statefulset()["spec"]["template"]["spec"]


def container_spec() -> Dict[str, Any]:
    return next(c for c in pod_spec()["containers"] if c["name"] == "kernelbridge")


def grace_seconds() -> int:
    return int(pod_spec()["terminationGracePeriodSeconds"])


def get(url: str, token: Optional[str] = None, timeout: float = 5) -> Tuple[int, Any]:
    """(status, JSON body) of a GET; status 0 when nothing answered."""
    return request("GET", url, None, token, timeout)


def request(method: str, url: str, body: Any, token: Optional[str], timeout: float = 120) -> Tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, None


class Container:
    """One container of the image, run as the StatefulSet's pod `name` runs."""

    def __init__(self, image: str, name: str, state_dir: pathlib.Path, token: str) -> None:
        self.image, self.sandbox_id, self.state_dir, self.token = image, name, state_dir, token
        self.name = f"kbtest-{name}-{uuid.uuid4().hex[:8]}"
        self.port = 0
        self.started_at = 0.0

    # -- the run command, from the manifest ---------------------------------------

    def run_args(self) -> List[str]:
        pod, c = pod_spec(), container_spec()
        psc, csc = pod["securityContext"], c["securityContext"]
        args = ["run", "-d", "--runtime", RUNTIME, "--name", self.name, *ulimits(),
                "--user", f"{psc['runAsUser']}:{psc['runAsGroup']}",
                "-p", f"127.0.0.1::{c['ports'][0]['containerPort']}"]
        if csc.get("readOnlyRootFilesystem"):
            args.append("--read-only")
        if "ALL" in csc.get("capabilities", {}).get("drop", []):
            args.append("--cap-drop=ALL")
        if csc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for mount in c["volumeMounts"]:
            volume = volumes.get(mount["name"])
            if volume is None:  # the claim of volumeClaimTemplates: a dir of ours, fsGroup's
                args += ["-v", f"{self.state_dir}:{mount['mountPath']}:rw"]
            else:
                assert "emptyDir" in volume, volume
                size = volume["emptyDir"].get("sizeLimit", "1Gi").replace("Gi", "g").replace("Mi", "m")
                # an emptyDir is a world-writable dir (0777), as a tmpfs of that mode
                args += ["--tmpfs", f"{mount['mountPath']}:rw,exec,size={size},mode=0777"]
        for e in c["env"]:
            if "value" in e:
                args += ["-e", f"{e['name']}={e['value']}"]
            elif e["name"] == "KB_SANDBOX_ID":  # fieldRef metadata.name
                args += ["-e", f"KB_SANDBOX_ID={self.sandbox_id}"]
            elif e["name"] == "KB_TOKEN":  # secretKeyRef: from podman's environment
                args += ["-e", "KB_TOKEN"]
            else:
                raise AssertionError(f"env {e['name']}: unknown source")
        return args + [self.image] + list(c.get("args", []))

    def start(self) -> "Container":
        self.state_dir.mkdir(parents=True, exist_ok=True)
        gid = pod_spec()["securityContext"]["fsGroup"]
        os.chown(self.state_dir, 0, gid)  # what fsGroup does to a volume's root
        self.state_dir.chmod(0o2775)
        env = dict(os.environ, KB_TOKEN=self.token)
        self.started_at = time.monotonic()
        podman(*self.run_args(), env=env)
        hostport = podman("port", self.name).stdout.strip().splitlines()[0]
        self.port = int(hostport.rsplit(":", 1)[1])
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_healthy(self, within: float = 120) -> float:
        """Seconds from `podman run` to the first /health 200."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if get(self.url + "/health", timeout=2)[0] == 200:
                return time.monotonic() - self.started_at
            if not self.running():
                break
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: no /health within {within} s\n{self.logs()}")

    # -- what the container is doing --------------------------------------------------

    def inspect(self, fmt: str) -> str:
        return podman("inspect", "--format", fmt, self.name).stdout.strip()

    def running(self) -> bool:
        return self.inspect("{{.State.Running}}") == "true"

    def host_pid(self) -> int:
        """The host's pid of the container's first process."""
        return int(self.inspect("{{.State.Pid}}"))

    def logs(self) -> str:
        out = podman("logs", self.name, check=False)
        return (out.stdout + out.stderr)[-6000:]

    def exec(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return podman("exec", self.name, *argv, check=check)

    def api(self, method: str, path: str, body: Any = None, timeout: float = 120) -> Any:
        status, doc = request(method, self.url + path, body, self.token, timeout)
        assert 200 <= status < 300, (method, path, status, doc)
        return doc

    def stop(self) -> Tuple[int, float]:
        """`podman stop` with the pod's grace: (exit code, seconds it took)."""
        t0 = time.monotonic()
        podman("stop", "-t", str(grace_seconds()), self.name, timeout=grace_seconds() + 30)
        took = time.monotonic() - t0
        return int(self.inspect("{{.State.ExitCode}}")), took

    def remove(self) -> None:
        podman("rm", "-f", "-t", "0", self.name, check=False)


def children(pid: int) -> List[int]:
    try:
        return [int(p) for p in pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def ns_pid(pid: int) -> int:
    """The pid of host process pid in its own (the container's) pid namespace."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    raise AssertionError(f"no NSpid for {pid}")


def cmdline(pid: int) -> List[str]:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def remove_state(path: pathlib.Path) -> None:
    # files the container's uid made: root removes them all
    shutil.rmtree(path, ignore_errors=True)
