"""The kernel-side backpressure (kernelbridge_display.backpressure), on real
ipykernel objects and real ZeroMQ sockets: an iopub socket whose reader
stops reading makes the sender wait, and nothing is dropped."""

import threading
import time

import pytest
import zmq
from ipykernel.kernelapp import IPKernelApp
from ipykernel.kernelbase import Kernel

from kernelbridge_display import backpressure

MESSAGES = 200


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setenv(backpressure.ENV, "1")
    backpressure.install()
    try:
        yield
    finally:
        backpressure.uninstall()


@pytest.fixture
def context():
    ctx = zmq.Context()
    try:
        yield ctx
    finally:
        ctx.destroy(linger=0)


def pair(ctx, rcvhwm):
    """A PUB socket bound as ipykernel binds its iopub, and a SUB that reads
    nothing yet, with a receive queue of rcvhwm messages."""
    pub = ctx.socket(zmq.PUB)
    port = IPKernelApp(ip="127.0.0.1", transport="tcp")._bind_socket(pub, 0)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, rcvhwm)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect("tcp://127.0.0.1:%d" % port)
    deadline = time.monotonic() + 10
    while True:  # the subscription has reached the PUB socket
        pub.send(b"hello")
        if sub.poll(50):
            sub.recv()
            break
        assert time.monotonic() < deadline, "the SUB never connected"
    return pub, sub


def send_all(pub, payload):
    """Sends MESSAGES numbered messages as ipykernel's IOPub thread would (a
    blocking send); returns the thread and a list of how many went."""
    sent = [0]

    def go():
        for i in range(MESSAGES):
            pub.send(b"%06d" % i + payload)
            sent[0] += 1

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, sent


def drain(sub, until):
    got = []
    while len(got) < until:
        assert sub.poll(10000), "messages stopped coming: %d of %d" % (len(got), until)
        while sub.poll(0):
            msg = sub.recv()
            if msg != b"hello":
                got.append(int(msg[:6]))
    return got


def test_a_full_reader_makes_the_sender_wait_and_nothing_is_lost(installed, context):
    pub, sub = pair(context, rcvhwm=2)
    sender, sent = send_all(pub, b"x" * (1 << 20))
    time.sleep(1.5)
    # the reader's queue (2), the kernel's (SNDHWM) and the TCP buffers hold
    # a few; the rest waits in the sender
    assert sent[0] < MESSAGES // 2, sent[0]
    assert sender.is_alive()
    assert drain(sub, MESSAGES) == list(range(MESSAGES))
    sender.join(10)
    assert sent[0] == MESSAGES


def test_without_it_a_pub_socket_drops_what_does_not_fit(context):
    """What the module prevents, on the same sockets: the sender never
    waits, and a reader that was slow loses messages without a word."""
    pub = context.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, backpressure.SNDHWM)  # as small a queue, dropping
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 2)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect("tcp://127.0.0.1:%d" % port)
    time.sleep(0.5)  # the subscription reaches the PUB socket
    sender, sent = send_all(pub, b"x" * (1 << 20))
    sender.join(30)
    assert sent[0] == MESSAGES  # nothing waited
    got = []
    while sub.poll(500):
        got.append(int(sub.recv()[:6]))
    assert 0 < len(got) < MESSAGES, len(got)


class EchoKernel(Kernel):
    """A kernel of ipykernel's base class, as wrapper kernels are written."""

    implementation = "echo"
    implementation_version = "1.0"
    language_info = {"name": "echo"}
    banner = "echo"


def kernel_info():
    """What its kernel_info_reply holds (kernel_info reads class fields)."""
    return EchoKernel.kernel_info.fget(EchoKernel.__new__(EchoKernel))


def test_the_sockets_options_and_the_kernel_info_marker(installed, context):
    pub = context.socket(zmq.PUB)
    IPKernelApp(ip="127.0.0.1", transport="tcp")._bind_socket(pub, 0)
    assert pub.getsockopt(zmq.SNDHWM) == backpressure.SNDHWM
    info = kernel_info()
    assert info[backpressure.MARKER] == {"iopub_nodrop": True}
    assert info["implementation"] == "echo"  # the kernel's own fields are kept


def test_not_asked_nothing_changes(monkeypatch, context):
    monkeypatch.delenv(backpressure.ENV, raising=False)
    backpressure.install()
    try:
        pub = context.socket(zmq.PUB)
        IPKernelApp(ip="127.0.0.1", transport="tcp")._bind_socket(pub, 0)
        assert pub.getsockopt(zmq.SNDHWM) == 1000  # ZeroMQ's default
        assert backpressure.MARKER not in kernel_info()
    finally:
        backpressure.uninstall()
