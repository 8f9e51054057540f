"""Graceful stop: SIGTERM / SIGINT end runs as sandbox_stopped (their clients
still get the result), shut every kernel down, remove the daemon's files and
exit 0."""

import signal
import socket
import threading

import pytest

from conftest import pid_alive, wait_until


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_graceful_stop(daemon, sig):
    ctx = daemon.ok("POST", "/contexts", {"language": "python"}, status=201)["context_id"]
    daemon.run("1")  # starts default-python too
    pids = [c["pid"] for c in daemon.ok("GET", "/contexts?all=true")["contexts"]]
    assert len(pids) == 2 and all(pid_alive(p) for p in pids)

    # One client streams a long run, another waits for one as plain JSON.
    stream = daemon.run_stream("import time; print('going', flush=True); time.sleep(120)",
                               context_id=ctx)
    events = stream.events()
    assert next(events).event == "start"
    going = next(events)
    assert going.event == "stdout" and going.data["text"] == "going\n", going
    plain = {}

    def plain_run():
        plain["result"] = daemon.run("import time; time.sleep(120)")

    waiter = threading.Thread(target=plain_run)
    waiter.start()
    assert wait_until(lambda: len(daemon.ok("GET", "/processes?state=running")["processes"]) == 2,
                      15)

    daemon.signal(sig)
    rest = list(events)
    stream.close()
    waiter.join(30)
    assert not waiter.is_alive()
    assert daemon.wait() == 0

    assert rest[-1].event == "result", rest
    streamed = rest[-1].data
    assert streamed["process"]["reason"] == "sandbox_stopped"
    assert streamed["error"]["name"] == "SandboxStopped"
    assert streamed["logs"]["stdout"] == "going\n"
    assert plain["result"]["process"]["reason"] == "sandbox_stopped"

    # No kernel is left, the port is closed, the port file is gone.
    assert wait_until(lambda: not any(pid_alive(p) for p in pids), 10), pids
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", daemon.port), timeout=5).close()
    assert not daemon.port_file.exists()
    assert "stopping" in daemon.log


def test_idle_stop_is_quick(daemon):
    daemon.run("1")
    pid = daemon.ok("GET", "/contexts/default-python")["pid"]
    conn = daemon.connect()
    conn.request("GET", "/health")  # an idle kept-alive connection stays open
    conn.getresponse().read()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout=15) == 0
    conn.close()
    assert wait_until(lambda: not pid_alive(pid), 10)


def test_requests_while_stopping_get_503(daemon):
    """Once stopping, a kept-alive connection's next request is refused with
    UNAVAILABLE and never reaches the service."""
    import json

    daemon.run("1")
    stream = daemon.run_stream("import time; time.sleep(120)")
    events = stream.events()
    assert next(events).event == "start"
    conn = daemon.connect(timeout=10)
    conn.request("GET", "/health")
    assert conn.getresponse().read()
    daemon.signal(signal.SIGTERM)
    statuses = []
    try:
        # Until the daemon closes the connection: 200s, then 503s.
        for _ in range(5000):
            conn.request("GET", "/health")
            r = conn.getresponse()
            body = r.read()
            statuses.append(r.status)
            if r.status != 200:
                assert r.status == 503, body
                error = json.loads(body)
                assert error["code"] == "UNAVAILABLE" and error["status_code"] == 503
                break
    except (ConnectionError, OSError) as e:
        raise AssertionError("closed before any 503: %r after %d requests" % (e, len(statuses)))
    finally:
        conn.close()
    assert statuses[-1] == 503, statuses[-5:]
    assert list(events)[-1].data["process"]["reason"] == "sandbox_stopped"
    stream.close()
    assert daemon.wait() == 0
