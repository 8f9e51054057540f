"""One limit on the frames of a kernel's message (KB_WIRE_MAX_FRAMES, 1024,
in src/wire/kb_wire.h): a message of up to that many frames is read and
handled whatever its count, and a longer one is dropped and counted, as
too_many_parts, in the context's and the daemon's dropped messages.

The kernel is ipykernel itself, publishing a stream message with binary
buffers through its own session (so signed with its key): on iopub a message
is its topic, the delimiter, five frames, then the buffers."""

from kernels_testlib import assert_ok, create, run

FRAMES_BESIDE_BUFFERS = 7  # topic, "<IDS|MSG>", signature, header, parent, metadata, content
LIMIT = 1024

SEND = """
k = get_ipython().kernel
k.session.send(k.iopub_socket, "stream", {"name": "stdout", "text": %r},
               parent=k.get_parent("shell"), ident=b"stream.stdout",
               buffers=[b"b"] * %d)
"""


def publish(d, ctx, text, frames):
    """Run code whose kernel publishes `text` as a stream message of `frames` frames."""
    return run(d, ctx, SEND % (text, frames - FRAMES_BESIDE_BUFFERS))


def too_many_parts(d):
    return d.ok("GET", "/health")["dropped_messages_by_reason"]["too_many_parts"]


def test_messages_up_to_the_limit_are_read_and_longer_ones_counted(daemon):
    ctx = create(daemon, language="python")["context_id"]
    assert too_many_parts(daemon) == 0

    for frames in (100, LIMIT):
        result = publish(daemon, ctx, "%d frames\n" % frames, frames)
        assert_ok(result)
        assert result["logs"]["stdout"] == "%d frames\n" % frames, result
    assert too_many_parts(daemon) == 0
    assert daemon.ok("GET", "/contexts/%s" % ctx)["dropped_messages"] == 0

    result = publish(daemon, ctx, "one frame too many\n", LIMIT + 1)
    assert_ok(result)
    assert result["logs"]["stdout"] == "", result
    assert too_many_parts(daemon) == 1
    health = daemon.ok("GET", "/health")
    assert health["dropped_messages"] == 1, health
    assert daemon.ok("GET", "/contexts/%s" % ctx)["dropped_messages"] == 1

    # The kernel goes on: its next message is read as ever.
    result = run(daemon, ctx, "print('after')")
    assert_ok(result)
    assert result["logs"]["stdout"] == "after\n", result
