"""The kernel-side message size check (kernelbridge_display.guard), on a real
jupyter_client Session: what it serializes, signed and read back."""

import pytest
from jupyter_client.session import Session

from kernelbridge_display import guard

LIMIT = 4096


@pytest.fixture
def session(monkeypatch):
    monkeypatch.setenv(guard.ENV, str(LIMIT))
    guard.install()
    try:
        yield Session(key=b"secret")
    finally:
        guard.uninstall()


def read_back(session, frames):
    idents, parts = session.feed_identities(frames)
    return session.deserialize(parts)  # checks the signature


def test_a_message_within_the_limit_is_sent_as_it_is(session):
    msg = session.msg("stream", {"name": "stdout", "text": "x" * 100})
    back = read_back(session, session.serialize(msg))
    assert back["header"]["msg_type"] == "stream"
    assert back["content"]["text"] == "x" * 100


def test_a_published_message_over_the_limit_is_replaced_by_a_note(session):
    parent = session.msg("execute_request", {"code": "big"})
    msg = session.msg("stream", {"name": "stdout", "text": "x" * (LIMIT * 2)}, parent=parent)
    frames = session.serialize(msg, ident=b"stream.stdout")
    assert max(len(f) for f in frames) < LIMIT
    back = read_back(session, frames)
    assert back["header"]["msg_type"] == guard.REFUSED
    assert back["header"]["msg_id"] == msg["header"]["msg_id"]
    assert back["parent_header"]["msg_id"] == parent["header"]["msg_id"]
    content = back["content"]
    assert content["msg_type"] == "stream" and content["limit"] == LIMIT
    assert LIMIT * 2 < content["bytes"] < LIMIT * 2 + 1024


def test_metadata_over_the_limit_counts_too(session):
    msg = session.msg("display_data", {"data": {"text/plain": "x"}, "metadata": {}},
                      metadata={"big": "m" * LIMIT})
    assert read_back(session, session.serialize(msg))["header"]["msg_type"] == guard.REFUSED


def test_replies_are_left_to_the_socket_limit(session):
    msg = session.msg("execute_reply", {"status": "ok", "payload": ["p" * LIMIT]})
    assert read_back(session, session.serialize(msg))["header"]["msg_type"] == "execute_reply"


def test_no_limit_given_no_check(monkeypatch):
    monkeypatch.delenv(guard.ENV, raising=False)
    guard.install()
    try:
        session = Session(key=b"secret")
        msg = session.msg("stream", {"name": "stdout", "text": "x" * (1 << 20)})
        assert read_back(session, session.serialize(msg))["header"]["msg_type"] == "stream"
    finally:
        guard.uninstall()
