"""Timed requests to the daemon, shared by the bench scripts: `1+1` through
`POST /run` and `GET /health`, each answer parsed and checked as a client
would. `http` is an httpclient.Http (http.client, kept alive) or an httpclient.RawHttp."""

import json
import time
from typing import Any


def run_once(http: Any, body: bytes) -> float:
    """POST /run of a `1+1` body; seconds until the answer is parsed. Raises
    unless the status is 200 and the result is `2`."""
    t0 = time.perf_counter()
    status, data = http.request("POST", "/run", body)
    r = json.loads(data)
    dt = time.perf_counter() - t0
    if status != 200 or r["results"][0]["text"] != "2":
        raise RuntimeError(f"POST /run: {status} {data[:300]!r}")
    return dt


def health_once(http: Any) -> float:
    """GET /health; seconds until the answer is parsed. Raises unless 200."""
    t0 = time.perf_counter()
    status, data = http.request("GET", "/health")
    json.loads(data)
    dt = time.perf_counter() - t0
    if status != 200:
        raise RuntimeError(f"GET /health: {status} {data[:300]!r}")
    return dt
