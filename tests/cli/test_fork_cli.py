"""`kernelbridge fork`, `checkpoint` and `restore` against a running daemon
(SPEC section 13), as a person at a terminal or a script uses them: what
they print, that the daemon did what they say, and what they say when the
daemon refuses."""
import json
from functools import partial

import pytest

import clilib
from clilib import start_daemon, write_token_file

TOKEN = "fork-cli-s3cret"
kb = partial(clilib.kb, timeout=120)
at = partial(clilib.at, timeout=120)


@pytest.fixture(scope="module")
def daemon():
    d = start_daemon(TOKEN, "--max-checkpoints", "2")
    try:
        yield d
    finally:
        d.close()


@pytest.fixture(scope="module")
def token_file(daemon):
    return write_token_file(daemon, TOKEN)


def text(daemon, code, context_id):
    result = daemon.run(code, context_id=context_id)
    assert result["error"] is None, result["error"]
    return result["results"][0]["text"]


def new_python(daemon, context_id):
    daemon.ok("POST", "/contexts", {"language": "python", "context_id": context_id}, status=201)


def test_help_and_usage():
    top = kb("--help")
    for command in ("fork", "checkpoint", "restore"):
        assert command in top.stdout
        done = kb(command, "--help")
        assert done.returncode == 0 and "--url" in done.stdout and "--token-file" in done.stdout
    assert "--count" in kb("fork", "--help").stdout and "--id" in kb("fork", "--help").stdout
    assert "--list" in kb("checkpoint", "--help").stdout
    assert kb("fork").returncode == 2  # the context is required
    assert kb("restore", "ctx").returncode == 2  # and the checkpoint
    assert kb("restore", "a", "b", "c").returncode == 2
    both = kb("checkpoint", "c", "--list", "--delete", "cp_1")
    assert both.returncode == 2 and "not both" in both.stderr
    bad = kb("fork", "c", "--count", "two")
    assert bad.returncode == 2 and "--count" in bad.stderr
    bad = kb("fork", "c", "--memory-limit", "lots")
    assert bad.returncode == 2 and "--memory-limit" in bad.stderr
    too_many = kb("fork", "c", *[a for i in range(65) for a in ("--id", "f%d" % i)])
    assert too_many.returncode == 2 and "at most 64" in too_many.stderr


def test_fork_prints_the_new_ids(daemon, token_file):
    new_python(daemon, "cli-parent")
    daemon.run("x = 41", context_id="cli-parent")
    one = at(daemon, token_file, "fork", "cli-parent")
    assert one.returncode == 0, one.stderr
    (child,) = one.stdout.split()
    assert child.startswith("ctx_")
    assert text(daemon, "x + 1", child) == "42"
    assert daemon.ok("GET", "/contexts/" + child)["forked_from"]["context_id"] == "cli-parent"

    three = at(daemon, token_file, "fork", "cli-parent", "--count", "3")
    assert three.returncode == 0, three.stderr
    ids = three.stdout.split()
    assert len(ids) == 3 and len(set(ids)) == 3
    named = at(daemon, token_file, "fork", "cli-parent", "--id", "cli-f1", "-i", "cli-f2",
               "--memory-limit", "512M", "--pids-limit", "64", "--json")
    assert named.returncode == 0, named.stderr
    made = json.loads(named.stdout)["contexts"]
    assert [c["context_id"] for c in made] == ["cli-f1", "cli-f2"]
    assert all(c["memory_limit"] == 512 << 20 and c["pids_limit"] == 64 for c in made)
    assert all(c["forked_from"]["context_id"] == "cli-parent" for c in made)
    assert text(daemon, "x", "cli-f2") == "41"
    # a fork of a fork
    grand = at(daemon, token_file, "fork", "cli-f1", "--id", "cli-g1")
    assert grand.returncode == 0 and grand.stdout == "cli-g1\n", grand.stderr
    assert text(daemon, "x", "cli-g1") == "41"
    for cid in ids + [child, "cli-f1", "cli-f2", "cli-g1"]:
        assert daemon.delete("/contexts/" + cid).status == 204


def test_fork_refused(daemon, token_file):
    new_python(daemon, "cli-p2")
    for args, code in ((("nope",), "SESSION_NOT_FOUND"),
                       (("cli-p2", "--count", "0"), "BAD_REQUEST"),
                       (("cli-p2", "--count", "65"), "BAD_REQUEST"),
                       (("cli-p2", "--count", "2", "--id", "z"), "BAD_REQUEST"),
                       (("cli-p2", "--id", "a", "--id", "a"), "BAD_REQUEST"),
                       (("cli-p2", "--id", "cli-p2"), "CONTEXT_EXISTS")):
        done = at(daemon, token_file, "fork", *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert done.stderr.startswith("kernelbridge fork: " + code + ": "), (args, done.stderr)
        assert done.stdout == ""
    daemon.ok("POST", "/contexts", {"language": "bash", "context_id": "cli-bash"}, status=201)
    for args in (("fork", "cli-bash"), ("checkpoint", "cli-bash"),
                 ("restore", "cli-bash", "cp_x")):
        done = at(daemon, token_file, *args)
        assert done.returncode == 1 and "UNSUPPORTED_OPTION" in done.stderr, done.stderr
    wrong_token = kb("fork", "cli-p2", "--url", daemon.url)
    assert wrong_token.returncode == 1 and "UNAUTHORIZED" in wrong_token.stderr
    listed = sorted(c["context_id"] for c in daemon.ok("GET", "/contexts")["contexts"])
    assert "a" not in listed and "z" not in listed  # nothing half-made


def test_checkpoint_list_restore_delete(daemon, token_file):
    new_python(daemon, "cli-cp")
    new_python(daemon, "cli-other")
    daemon.run("x = 1", context_id="cli-cp")
    made = at(daemon, token_file, "checkpoint", "cli-cp")
    assert made.returncode == 0, made.stderr
    cp = made.stdout.strip()
    assert cp.startswith("cp_") and made.stdout == cp + "\n"
    daemon.run("x = 2", context_id="cli-cp")

    table = at(daemon, token_file, "checkpoint", "cli-cp", "--list")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["CHECKPOINT", "EXEC", "MEMORY", "CREATED"]
    assert len(rows) == 1 and rows[0].split()[:2] == [cp, "1"], rows
    assert rows[0].split()[3] == "MiB" and rows[0].split()[4].startswith("20"), rows
    listed = json.loads(at(daemon, token_file, "checkpoint", "cli-cp", "-l", "--json").stdout)
    assert [c["checkpoint_id"] for c in listed["checkpoints"]] == [cp]
    assert at(daemon, token_file, "checkpoint", "cli-other", "--list").stdout.splitlines()[1:] == []

    for generation in (2, 3):  # a checkpoint stays restorable
        done = at(daemon, token_file, "restore", "cli-cp", cp)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "cli-cp generation %d\n" % generation
        assert text(daemon, "x", "cli-cp") == "1"
        daemon.run("x = 3", context_id="cli-cp")
    as_json = json.loads(at(daemon, token_file, "restore", "cli-cp", cp, "--json").stdout)
    assert as_json["generation"] == 4
    assert as_json["restored_from"] == {"checkpoint_id": cp, "execution_count": 1}

    second = at(daemon, token_file, "checkpoint", "cli-cp", "--json")
    assert second.returncode == 0 and json.loads(second.stdout)["context_id"] == "cli-cp"
    full = at(daemon, token_file, "checkpoint", "cli-cp")  # --max-checkpoints 2
    assert full.returncode == 1 and full.stderr.startswith("kernelbridge checkpoint: LIMIT_EXCEEDED: ")
    other = at(daemon, token_file, "restore", "cli-other", cp)
    assert other.returncode == 1 and "CHECKPOINT_NOT_FOUND" in other.stderr

    gone = at(daemon, token_file, "checkpoint", "cli-cp", "--delete", cp)
    assert gone.returncode == 0 and gone.stdout == "", gone.stderr
    again = at(daemon, token_file, "checkpoint", "cli-cp", "-d", cp)
    assert again.returncode == 1 and "CHECKPOINT_NOT_FOUND" in again.stderr
    stale = at(daemon, token_file, "restore", "cli-cp", cp)
    assert stale.returncode == 1 and "CHECKPOINT_NOT_FOUND" in stale.stderr
    left = daemon.ok("GET", "/contexts/cli-cp/checkpoints")["checkpoints"]
    assert [c["checkpoint_id"] for c in left] == [json.loads(second.stdout)["checkpoint_id"]]
    unknown = at(daemon, token_file, "checkpoint", "nope")
    assert unknown.returncode == 1 and "SESSION_NOT_FOUND" in unknown.stderr


def test_daemon_not_there():
    done = kb("fork", "c", "--url", "http://127.0.0.1:9")
    assert done.returncode == 1 and done.stderr.startswith("kernelbridge fork: ")
