"""`podman kube play` of a Pod made from deploy/k8s's StatefulSet pod
template: the same securityContext, env, args, probes
and volumes (the claim of volumeClaimTemplates becomes a podman volume of
the same name), the token in a podman secret named as the manifest's
secretKeyRef, the port published on loopback only. The pod starts, its
KB_SANDBOX_ID is the Pod's name (fieldRef), and its probes pass as the
kubelet would run them: each probe's httpGet with its own timeout, the
startup probe every periodSeconds until it succeeds. The probes' timings
are checked against the measured start of the image: the startup probe's
budget is far above it, and a daemon crash (restarted by the supervisor
within 2 s) fails neither readiness nor liveness."""

from __future__ import annotations

import base64
import copy
import json
import os
import pathlib
import signal
import socket
import time
import uuid
from typing import Any, Dict, Iterator, Tuple

import pytest
import yaml

from . import imagelib
from .imagelib import get, podman


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pod_from_statefulset(name: str, image: str, secret: str, claim: str, port: int) -> Dict[str, Any]:
    sts = imagelib.statefulset()
    template = copy.deepcopy(sts["spec"]["template"])
    spec = template["spec"]
    container = next(c for c in spec["containers"] if c["name"] == "kernelbridge")
    container["image"] = "localhost/" + image if "/" not in image.split(":")[0] else image
    for e in container["env"]:
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            ref["name"] = secret
    container["ports"][0]["hostIP"] = "127.0.0.1"
    container["ports"][0]["hostPort"] = port
    claim_template = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    spec["volumes"].append({"name": claim_template, "persistentVolumeClaim": {"claimName": claim}})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": template["metadata"]["labels"]}, "spec": spec}


def probe(url: str, p: Dict[str, Any]) -> bool:
    get_ = p["httpGet"]
    return get(url + get_["path"], timeout=p.get("timeoutSeconds", 1))[0] == 200


@pytest.fixture
def played(tmp_path: pathlib.Path) -> Iterator[Tuple[str, str, int, float]]:
    """The pod played: (pod name, token, port, seconds from play to the startup probe's success)."""
    image = imagelib.build_image()
    suffix = uuid.uuid4().hex[:8]
    name, secret, claim = f"kb-{suffix}", f"kernelbridge-token-{suffix}", f"state-kb-{suffix}"
    token = "kbkube-" + uuid.uuid4().hex
    port = free_port()
    conf = tmp_path / "containers.conf"  # this machine's hard limits, as build-image.sh sets them
    limits = imagelib.ulimits()
    conf.write_text("[containers]\ndefault_ulimits = [%s]\n" % ", ".join(
        f'"{limits[i + 1]}"' for i in range(0, len(limits), 2)))
    env = dict(os.environ, CONTAINERS_CONF=str(conf))
    kube = tmp_path / "pod.yaml"
    kube.write_text(yaml.safe_dump(pod_from_statefulset(name, image, secret, claim, port)))
    # a podman secret holding the Secret's data as JSON (key: base64 value),
    # which podman 4.3's kube play reads for a secretKeyRef
    secret_doc = {"token": base64.b64encode(token.encode()).decode()}
    try:
        podman("secret", "create", secret, "-", input=json.dumps(secret_doc))
        t0 = time.monotonic()
        podman("--runtime", imagelib.RUNTIME, "kube", "play", str(kube), env=env, timeout=300)
        startup = imagelib.container_spec()["startupProbe"]
        url = f"http://127.0.0.1:{port}"
        # the start, measured (every 50 ms), within the startup probe's budget
        started, budget = None, startup["periodSeconds"] * startup["failureThreshold"]
        while started is None and time.monotonic() - t0 < budget:
            if get(url + startup["httpGet"]["path"], timeout=startup["timeoutSeconds"])[0] == 200:
                started = time.monotonic() - t0
            time.sleep(0.05)
        assert started is not None, podman("pod", "logs", name, check=False).stdout[-4000:]
        assert probe(url, startup)  # and the probe itself, with its own timeout
        yield name, token, port, started
    finally:
        podman("pod", "rm", "-f", "-t", "0", name, check=False)
        podman("volume", "rm", "-f", claim, check=False)
        podman("secret", "rm", secret, check=False)


def test_the_statefulsets_pod_plays_and_passes_its_probes(played):
    name, token, port, started = played
    url = f"http://127.0.0.1:{port}"
    c = imagelib.container_spec()
    print(f"kube play to the first /health 200: {started:.2f} s")
    # the pod is the manifest's: sandbox id from metadata.name, the token from the secret
    code, health = get(url + "/health")
    assert code == 200 and health["sandbox_id"] == name, health
    assert get(url + "/contexts")[0] == 401 and get(url + "/contexts", token=token)[0] == 200
    ctr = f"{name}-kernelbridge"
    user = podman("inspect", "--format", "{{.Config.User}}", ctr).stdout.strip()
    assert user.split(":")[0] == str(imagelib.pod_spec()["securityContext"]["runAsUser"]), user
    assert podman("inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", ctr).stdout.strip() == "true"
    # readiness and liveness pass, each within its timeout
    for kind in ("readinessProbe", "livenessProbe"):
        assert probe(url, c[kind]), kind

    # timings: the startup probe allows far more than the measured start
    startup, ready, live = c["startupProbe"], c["readinessProbe"], c["livenessProbe"]
    budget = startup["periodSeconds"] * startup["failureThreshold"]
    assert started * 4 < budget, (started, budget)
    # a daemon crash is a restart within 2 s: shorter than readiness's and
    # liveness's windows, so neither the Service nor the kubelet reacts
    assert ready["periodSeconds"] * ready["failureThreshold"] > 2 * 2
    assert live["periodSeconds"] * live["failureThreshold"] > ready["periodSeconds"] * ready["failureThreshold"]
    assert all(p["timeoutSeconds"] >= 1 for p in (startup, ready, live))

    # in the pod (the pause process is PID 1, shareProcessNamespace) the supervisor
    # restarts a killed daemon too, well within readiness's window
    deadline = time.monotonic() + 60  # the warm kernel ready first (one still starting is waited for)
    while get(url + "/health")[1]["pool"]["python"]["ready"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    supervisor = int(podman("inspect", "--format", "{{.State.Pid}}", ctr).stdout.strip())
    assert imagelib.ns_pid(supervisor) != 1
    daemon = next(p for p in imagelib.children(supervisor)
                  if imagelib.cmdline(p)[:1] == ["/usr/local/bin/kernelbridge"])
    os.kill(daemon, signal.SIGKILL)
    t0 = time.monotonic()
    while not probe(url, ready):
        assert time.monotonic() - t0 < 2.0
        time.sleep(0.02)
    print(f"daemon killed in the pod: ready again in {time.monotonic() - t0:.2f} s")
    logs = podman("logs", ctr).stderr + podman("logs", ctr).stdout
    print(*[x for x in logs.splitlines() if "supervisor" in x or "serving" in x or "adopt" in x], sep="\n")

    # stopped as the kubelet stops a pod: its containers first (SIGTERM, SIGKILL
    # after the grace), then the sandbox; exit 0 within the grace
    t0 = time.monotonic()
    podman("stop", "-t", str(imagelib.grace_seconds()), ctr, timeout=imagelib.grace_seconds() + 30)
    took = time.monotonic() - t0
    assert podman("inspect", "--format", "{{.State.ExitCode}}", ctr).stdout.strip() == "0"
    assert took < imagelib.grace_seconds(), took
