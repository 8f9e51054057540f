"""GET /openapi.json: the daemon serves api/openapi.yaml as JSON from its
own binary, without the token (like /health), with the daemon's version;
and the document's checker (conftest's OPENAPI) refuses what the document
does not allow, so the suites' checks can fail."""

import json

import pytest
import yaml

from conftest import OPENAPI, REPO, Daemon


@pytest.fixture(scope="module")
def token_daemon():
    d = Daemon(token="openapi-token")
    try:
        yield d
    finally:
        d.close()


def test_served_document_is_the_source(token_daemon):
    r = token_daemon.request("GET", "/openapi.json", token="")
    assert r.status == 200, r
    assert r.header("Content-Type") == "application/json"
    served = r.json
    with open(REPO / "api" / "openapi.yaml", encoding="utf-8") as f:
        source = yaml.safe_load(f)
    health = token_daemon.ok("GET", "/health", token="")
    assert served["info"].pop("version") == health["version"]
    source["info"].pop("version")
    assert served == source


def test_token_still_needed_elsewhere(token_daemon):
    r = token_daemon.request("GET", "/kernelspecs", token="")
    assert r.status == 401 and r.json["code"] == "UNAUTHORIZED"


def test_openapi_json_takes_only_get(token_daemon):
    r = token_daemon.request("POST", "/openapi.json", body={})
    assert r.status == 405 and r.header("Allow") == "GET"


def _refused(method, path, status, body, media="application/json"):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(AssertionError):
        OPENAPI.check(method, path, status, media, raw)


def test_checker_refuses_what_the_document_does_not_allow():
    error = {"code": "SESSION_NOT_FOUND", "message": "gone", "status_code": 404,
             "path": "/contexts/x", "method": "GET", "timestamp": "2026-01-01T00:00:00.000Z"}
    OPENAPI.check("GET", "/contexts/x", 404, "application/json", json.dumps(error).encode())
    _refused("GET", "/contexts/x", 404, dict(error, code="NO_SUCH_CODE"))
    _refused("GET", "/contexts/x", 404, {k: v for k, v in error.items() if k != "timestamp"})
    _refused("GET", "/contexts/x", 404, dict(error, extra=1))
    _refused("GET", "/processes/p/wait", 200, {"state": "done", "exit_code": None, "signal": None,
                                               "reason": None, "raw_reason": None})
    _refused("GET", "/processes/p/logs", 200, {"frames": [{"cursor": "0", "channel": "stdout",
                                                           "data": "", "timestamp": "x"}],
                                               "next_cursor": 1, "eof": True})
    _refused("DELETE", "/contexts/x", 204, b"{}")
    _refused("GET", "/contexts", 200, b"x", media="text/plain")
    _refused("GET", "/nope", 404, {"message": "not our error body"})
