"""Runs on different contexts proceed in parallel; runs on one context are
queued in submission order; many clients at once each get their own output."""

import json
import threading
import time
import uuid

from conftest import HTTP_TIMEOUT


def create_contexts(daemon, n):
    ids = [None] * n
    errors = []

    def create(i):
        try:
            ids[i] = daemon.ok("POST", "/contexts", {"language": "python"},
                               status=201)["context_id"]
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HTTP_TIMEOUT)
    assert not errors, errors
    return ids


def test_four_contexts_sleep_in_parallel(daemon):
    ids = create_contexts(daemon, 4)
    for cid in ids:  # warm: first run imports time
        daemon.run("import time", context_id=cid)
    results = {}

    def run(cid):
        results[cid] = daemon.run("time.sleep(1); 'slept'", context_id=cid)

    threads = [threading.Thread(target=run, args=(cid,)) for cid in ids]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    elapsed = time.monotonic() - began
    assert len(results) == 4
    assert all(r["results"][0]["text"] == "'slept'" for r in results.values())
    assert elapsed < 2.5, elapsed  # serial would take 4 s


def test_fifty_queued_runs_keep_submission_order(daemon):
    cid = daemon.ok("POST", "/contexts", {"language": "python"}, status=201)["context_id"]
    daemon.run("order = []", context_id=cid)
    streams = []
    try:
        # Each run is submitted once the previous one is accepted (its start
        # event came), so submission order is well defined; the first sleeps
        # so that the rest queue behind it.
        for i in range(50):
            code = ("import time; time.sleep(0.5)\n" if i == 0 else "") + \
                "order.append(%d); print(%d)" % (i, i)
            stream = daemon.run_stream(code, context_id=cid)
            events = stream.events()
            assert next(events).event == "start"
            streams.append((stream, events))
        results = []
        for stream, events in streams:
            last = list(events)[-1]
            assert last.event == "result"
            results.append(last.data)
    finally:
        for stream, _ in streams:
            stream.close()
    assert [r["logs"]["stdout"] for r in results] == ["%d\n" % i for i in range(50)]
    counts = [r["execution_count"] for r in results]
    assert counts == sorted(counts) and len(set(counts)) == 50
    final = daemon.run("print(order)", context_id=cid)["logs"]["stdout"]
    assert final.strip() == str(list(range(50)))


def test_500_runs_from_20_threads_on_5_contexts(daemon):
    ids = create_contexts(daemon, 5)
    runs_per_thread = 25
    failures = []
    seen = []
    lock = threading.Lock()

    def worker(w):
        conn = daemon.connect()
        try:
            for k in range(runs_per_thread):
                token = "tok-%d-%d-%s" % (w, k, uuid.uuid4().hex)
                cid = ids[(w + k) % len(ids)]
                body = json.dumps({"code": "print(%r)" % token, "context_id": cid}).encode()
                conn.request("POST", "/run", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                if r.status != 200:
                    failures.append((token, r.status, data[:300]))
                    continue
                result = json.loads(data)
                with lock:
                    seen.append((token, cid, result))
        except Exception as e:  # reported below
            failures.append(("worker %d" % w, repr(e)))
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(20)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads)
    assert not failures, failures[:5]
    assert len(seen) == 500
    tokens = [token for token, _, _ in seen]
    assert len(set(tokens)) == 500
    everything = "".join(result["logs"]["stdout"] for _, _, result in seen)
    for token, cid, result in seen:
        # Its own token, exactly once, and nothing else.
        assert result["logs"]["stdout"] == token + "\n", (token, result["logs"])
        assert result["context"]["context_id"] == cid
        assert result["process"]["exit_code"] == 0
        assert everything.count(token) == 1
    assert time.monotonic() - began < 300
