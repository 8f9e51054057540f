"""Shell through the daemon on kernelbridge's own bash kernel (kernelspecs/bash,
on metakernel's REPLWrapper): language names, state (variables, functions,
cd), separate and live stdout/stderr, exit status as an ExitCode error, `exit`
as the kernel's death, interrupts (a timeout, SIGINT, a pipeline, a command
that ignores SIGINT and needs the kill), per-run cwd/env through the bash
adapter with hostile values, 1 MiB of output, concurrent contexts, the warm
pool and E2B's listener."""

import random
import string
import threading
import time

import pytest

from conftest import pid_alive, pids_with_marker
from kernels_testlib import (RUN_TIMEOUT, assert_ok, check_cwd_env, check_kernel_death,
                             check_timeout_interrupts, create, error_of, kernel_daemon,
                             kernel_daemon_factory, run, wait_until)
from test_e2b import start as start_e2b, types

assert kernel_daemon and kernel_daemon_factory  # fixtures, used by name


@pytest.fixture
def ctx(kernel_daemon):
    context = create(kernel_daemon, language="bash")
    yield context["context_id"]
    kernel_daemon.delete("/contexts/%s" % context["context_id"])


def assert_exit_status(result, status):
    """A run whose last command exited with a non-zero status: the code
    raised, in SPEC section 2's terms; the error says the status."""
    assert result["process"]["reason"] == "exited", result
    assert result["process"]["exit_code"] == 1, result
    error = result["error"]
    assert error["name"] == "ExitCode" and error["value"] == str(status), result
    assert error["traceback"] and "exit status %d" % status in error["traceback"][0], error
    return error


def test_kernelspec_and_language_names(kernel_daemon):
    specs = {s["name"]: s for s in kernel_daemon.ok("GET", "/kernelspecs")["kernelspecs"]}
    assert specs["bash"]["language"] == "bash"
    assert specs["bash"]["interrupt_mode"] == "signal"
    for language in ("bash", "sh", "shell", "Bash", "SH"):
        context = create(kernel_daemon, language=language)
        assert context["kernel_name"] == "bash", context
        assert context["language"] == language.lower()
        # each name has the adapter: a per-run cwd is accepted
        result = run(kernel_daemon, context["context_id"], "pwd", cwd="/")
        assert_ok(result)
        assert result["logs"]["stdout"] == "/\n"
        kernel_daemon.ok("DELETE", "/contexts/%s" % context["context_id"], status=204)


def test_state_persists_and_no_value_is_a_result(kernel_daemon, ctx, tmp_path):
    first = run(kernel_daemon, ctx, 'x=41; greet() { echo "hello $1"; }; cd %s' % tmp_path)
    assert_ok(first)
    assert first["results"] == [] and first["logs"]["stdout"] == ""
    second = run(kernel_daemon, ctx, 'echo $((x + 1)); greet you; pwd')
    assert_ok(second)
    assert second["logs"]["stdout"] == "42\nhello you\n%s\n" % tmp_path
    assert second["results"] == []  # a shell has no value: no execute_result
    assert second["execution_count"] == first["execution_count"] + 1
    # The context's cwd is the shell's (the kernel follows its cd).
    assert kernel_daemon.ok("GET", "/contexts/%s" % ctx)["cwd"] == str(tmp_path)


def test_stdout_and_stderr_are_separate(kernel_daemon, ctx):
    result = run(kernel_daemon, ctx, "echo out; echo err >&2; printf 'no newline'; "
                                     "ls /kb-no-such-dir; echo done")
    assert_ok(result)
    assert result["logs"]["stdout"] == "out\nno newlinedone\n"
    assert result["logs"]["stderr"].startswith("err\n"), result
    assert "kb-no-such-dir" in result["logs"]["stderr"], result
    # stdin is /dev/null: a command that reads it ends at once
    assert run(kernel_daemon, ctx, "read -r line; echo \"read: $?\"")["logs"]["stdout"] == "read: 1\n"


def test_output_streams_as_it_is_produced(kernel_daemon, ctx):
    code = "for i in 1 2 3 4; do echo line$i; echo warn$i >&2; sleep 0.4; done"
    stream = kernel_daemon.run_stream(code, context_id=ctx, timeout=RUN_TIMEOUT)
    arrivals = {"stdout": [], "stderr": []}
    try:
        for event in stream.events():
            if event.event in arrivals:
                arrivals[event.event].append((time.monotonic(), event.data["text"]))
            if event.event == "result":
                result, ended = event.data, time.monotonic()
    finally:
        stream.close()
    assert_ok(result)
    assert "".join(t for _, t in arrivals["stdout"]) == "line1\nline2\nline3\nline4\n"
    assert "".join(t for _, t in arrivals["stderr"]) == "warn1\nwarn2\nwarn3\nwarn4\n"
    for channel, frames in arrivals.items():
        assert len(frames) >= 3, (channel, frames)
        # the first line came well before the end of the loop (1.6 s)
        assert ended - frames[0][0] > 0.8, (channel, frames, ended)


def test_exit_status_is_an_error_and_the_context_goes_on(kernel_daemon, ctx):
    assert_ok(run(kernel_daemon, ctx, "kept=yes"))
    assert_exit_status(run(kernel_daemon, ctx, "false"), 1)
    result = run(kernel_daemon, ctx, "echo before; ls /kb-no-such-dir")
    assert_exit_status(result, 2)
    assert result["logs"]["stdout"] == "before\n" and "kb-no-such-dir" in result["logs"]["stderr"]
    # Only the last command counts, as in a script.
    assert_ok(run(kernel_daemon, ctx, "false; true"))
    assert_exit_status(run(kernel_daemon, ctx, "(exit 7)"), 7)
    # $? of the next run is the status the last run ended with
    assert run(kernel_daemon, ctx, "echo $?")["logs"]["stdout"] == "7\n"
    error = assert_exit_status(run(kernel_daemon, ctx, "if then"), 2)
    assert error["value"] == "2"
    assert_exit_status(run(kernel_daemon, ctx, "no-such-command-kb"), 127)
    after = run(kernel_daemon, ctx, "echo $kept")
    assert_ok(after)
    assert after["logs"]["stdout"] == "yes\n"
    assert kernel_daemon.ok("GET", "/contexts/%s" % ctx)["state"] == "idle"


def test_exit_ends_the_kernel_as_its_death(kernel_daemon):
    context = create(kernel_daemon, language="bash")
    cid, pid = context["context_id"], context["pid"]
    result = run(kernel_daemon, cid, "echo bye; exit 3")
    assert result["process"]["reason"] == "failed", result
    assert result["process"]["exit_code"] == 3, result
    assert result["error"]["name"] == "KernelDied", result
    body = error_of(kernel_daemon.get("/contexts/%s" % cid), 404, "SESSION_NOT_FOUND")
    assert body["message"], body
    assert wait_until(lambda: not pid_alive(pid), 10), pid


def test_exit_on_the_default_context_starts_it_afresh(kernel_daemon):
    assert_ok(kernel_daemon.run("mark=set", language="bash", timeout=RUN_TIMEOUT))
    before = kernel_daemon.ok("GET", "/contexts/default-bash")
    died = kernel_daemon.run("exit", language="bash", timeout=RUN_TIMEOUT)
    assert died["process"]["reason"] == "failed", died
    assert died["process"]["exit_code"] == 0, died
    assert died["error"]["name"] == "KernelDied", died
    fresh = kernel_daemon.run('echo "${mark:-unset}"', language="bash", timeout=RUN_TIMEOUT)
    assert_ok(fresh)
    assert fresh["logs"]["stdout"] == "unset\n"
    assert fresh["context"]["generation"] > before["generation"], (before, fresh)


@pytest.mark.parametrize("code", ["sleep 30; echo never", "sleep 30 | cat",
                                  "while :; do :; done"])
def test_timeout_interrupts_the_foreground_job(kernel_daemon, ctx, code):
    assert_ok(run(kernel_daemon, ctx, "x=7"))
    result = check_timeout_interrupts(kernel_daemon, ctx, code, "echo $x", "7", timeout=2)
    assert "never" not in result["logs"]["stdout"]


def test_sigint_signal_interrupts_and_the_context_lives_on(kernel_daemon, ctx):
    assert_ok(run(kernel_daemon, ctx, "x=8"))
    stream = kernel_daemon.run_stream("echo started; sleep 30 | cat; echo never",
                                      context_id=ctx, timeout=RUN_TIMEOUT)
    try:
        events = stream.events()
        process_id = next(events).data["process_id"]
        assert next(events).event == "stdout"
        time.sleep(0.5)  # the job is running (a signal as it starts may not stop the list)
        r = kernel_daemon.post("/processes/%s/signals" % process_id, {"signal": "SIGINT"})
        assert r.status == 202, r
        last = [e for e in events][-1]
    finally:
        stream.close()
    result = last.data
    assert result["process"]["reason"] == "signaled", result
    assert result["process"]["signal"] == "SIGINT", result
    assert result["error"]["name"] == "ExitCode" and result["error"]["value"] == "130", result
    assert "SIGINT" in result["error"]["traceback"][0], result
    assert "never" not in result["logs"]["stdout"]
    after = run(kernel_daemon, ctx, "echo $x")
    assert_ok(after)
    assert after["logs"]["stdout"] == "8\n"


def test_a_command_that_ignores_sigint_is_killed_after_the_grace(kernel_daemon):
    context = create(kernel_daemon, language="bash")
    marker = "%d.%06d" % (random.randrange(30, 40), random.randrange(10 ** 6))
    started = time.monotonic()
    result = kernel_daemon.run("trap '' INT; sleep %s" % marker, context_id=context["context_id"],
                               timeout=2)
    assert time.monotonic() - started < 15
    assert result["process"]["reason"] == "timed_out", result
    assert result["process"]["signal"] == "SIGKILL", result
    assert result["error"]["name"] == "TimeoutError", result
    error_of(kernel_daemon.get("/contexts/%s" % context["context_id"]), 404, "SESSION_NOT_FOUND")
    # and the shell's job went with the kernel
    assert wait_until(lambda: not pids_with_marker(marker), 10), pids_with_marker(marker)


def test_kernel_killed_during_run(kernel_daemon):
    check_kernel_death(kernel_daemon, create(kernel_daemon, language="bash")["context_id"],
                       "sleep 60")


def test_cwd_env_applied_and_restored(kernel_daemon, ctx, tmp_path):
    def parse(result):
        assert_ok(result)
        cwd, value = result["logs"]["stdout"].split("\n", 1)
        return cwd, None if value == "<unset>\n" else value[:-1]

    check_cwd_env(kernel_daemon, ctx, 'pwd; echo "${KBT_VAR-<unset>}"', tmp_path, parse)


HOSTILE = [
    "it's \"quoted\"",
    "$HOME and ${HOME} and $(echo injected) and `echo injected`",
    "line one\nline two\n",
    "back\\slash \\n not a newline; rm -rf /tmp/kb-never",
    " spaces  around ",
    "*.txt ? [a]",
    "",
    "'",
    "\t tab and unicode \u00e9\u4e2d",
]


def test_adapter_escapes_hostile_values_and_restores(kernel_daemon, ctx, tmp_path):
    workdir = tmp_path / "dir with 'quotes' \"and\" $dollar `tick` \u00e9"
    workdir.mkdir()
    (tmp_path / "a.txt").write_text("")
    assert_ok(run(kernel_daemon, ctx, "export KBT_KEPT='old value'; unset KBT_NEW; "
                                      "cd %s" % tmp_path))
    env = {"KBT_%d" % i: value for i, value in enumerate(HOSTILE)}
    env["KBT_KEPT"] = "new $value"
    env["KBT_NEW"] = "`touch %s/injected`" % tmp_path
    probe = ("pwd; for n in %s KBT_KEPT KBT_NEW; do printf '%%s=[%%s]\\0' \"$n\" \"${!n-<unset>}\"; done"
             % " ".join("KBT_%d" % i for i in range(len(HOSTILE))))
    during = run(kernel_daemon, ctx, probe, cwd=str(workdir), env=env)
    assert_ok(during)
    cwd, values = during["logs"]["stdout"].split("\n", 1)
    assert cwd == str(workdir)
    got = dict(item.split("=", 1) for item in values.split("\0") if item)
    assert got == {name: "[%s]" % value for name, value in env.items()}, got
    # nothing ran that the values spelled
    assert not (tmp_path / "injected").exists()
    # the child processes see them too, exported
    child = run(kernel_daemon, ctx, "/usr/bin/env | grep -c '^KBT_KEPT=new'", env=env)
    assert child["logs"]["stdout"] == "1\n", child
    after = run(kernel_daemon, ctx, probe)
    assert_ok(after)
    cwd, values = after["logs"]["stdout"].split("\n", 1)
    assert cwd == str(tmp_path)
    got = dict(item.split("=", 1) for item in values.split("\0") if item)
    assert got["KBT_KEPT"] == "[old value]" and got["KBT_NEW"] == "[<unset>]", got
    assert all(got["KBT_%d" % i] == "[<unset>]" for i in range(len(HOSTILE))), got
    # the adapter's stacks are empty again
    left = run(kernel_daemon, ctx, 'echo "${#__kb_saved[@]} ${#__kb_saved_env[@]}"')
    assert left["logs"]["stdout"] == "0 0\n", left


def test_adapter_refuses_a_name_bash_cannot_hold(kernel_daemon, ctx, tmp_path):
    assert_ok(run(kernel_daemon, ctx, "cd %s" % tmp_path))
    result = run(kernel_daemon, ctx, "echo ran", env={"NOT A NAME; touch x": "v"})
    assert result["error"] is not None, result
    assert result["logs"]["stdout"] == "", result
    assert not (tmp_path / "x").exists()
    after = run(kernel_daemon, ctx, 'pwd; echo "${#__kb_saved[@]}"')
    assert after["logs"]["stdout"] == "%s\n0\n" % tmp_path, after


def test_one_mib_of_output_arrives_intact(kernel_daemon, ctx):
    line = string.ascii_letters + string.digits + "\n"  # 63 bytes
    count = (1 << 20) // len(line) + 1
    result = run(kernel_daemon, ctx, "yes %s | head -n %d" % (line[:-1], count))
    assert_ok(result)
    assert result["logs"]["stdout"] == line * count
    assert len(result["logs"]["stdout"]) >= 1 << 20
    assert result["truncated"] is False


def test_concurrent_contexts_keep_their_own_state(kernel_daemon):
    contexts = [create(kernel_daemon, language="bash")["context_id"] for _ in range(4)]
    for i, cid in enumerate(contexts):
        assert_ok(run(kernel_daemon, cid, "me=ctx%d; cd /" % i))
    results = {}

    def work(i, cid):
        results[i] = run(kernel_daemon, cid, 'sleep 1; for n in 1 2 3; do echo "$me-$n"; done; '
                                            'echo "$me-err" >&2')

    started = time.monotonic()
    threads = [threading.Thread(target=work, args=(i, cid)) for i, cid in enumerate(contexts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(RUN_TIMEOUT)
    elapsed = time.monotonic() - started
    for i in range(4):
        assert_ok(results[i])
        assert results[i]["logs"]["stdout"] == "".join("ctx%d-%d\n" % (i, n) for n in (1, 2, 3))
        assert results[i]["logs"]["stderr"] == "ctx%d-err\n" % i
    assert elapsed < 3.5, elapsed  # four 1 s sleeps in parallel, not in turn
    for cid in contexts:
        kernel_daemon.ok("DELETE", "/contexts/%s" % cid, status=204)


def test_pool_keeps_a_warm_bash_kernel(kernel_daemon_factory):
    d = kernel_daemon_factory("--pool", "bash=1")

    def entry():
        return d.ok("GET", "/health")["pool"]["bash"]

    assert wait_until(lambda: entry()["ready"] == 1, 60), entry()
    assert entry()["kernel_name"] == "bash"
    pooled = entry()["ready_pids"][0]
    context = create(d, language="bash")
    assert context["pid"] == pooled
    first = run(d, context["context_id"], "echo $((6 * 7))")
    assert_ok(first)
    assert first["logs"]["stdout"] == "42\n" and first["execution_count"] == 1


def test_e2b_listener_runs_bash_with_env_vars(kernel_daemon_factory):
    d, e2b = start_e2b(kernel_daemon_factory)
    hostile = "v'$x`echo no`\"\\"
    lines = e2b.execute('echo "$KBT_E2B"; echo to-stderr >&2; n=5',
                        language="bash", env_vars={"KBT_E2B": hostile})
    assert types(lines) == ["number_of_executions", "stdout", "stderr", "end_of_execution"], lines
    assert lines[1]["text"] == hostile + "\n"
    assert lines[2]["text"] == "to-stderr\n"
    # the default bash context kept its state; the env var was for one run
    lines = e2b.execute('echo "$n ${KBT_E2B-unset}"; false', language="bash")
    assert [l["text"] for l in lines if l["type"] == "stdout"] == ["5 unset\n"], lines
    errors = [l for l in lines if l["type"] == "error"]
    assert len(errors) == 1 and errors[0]["name"] == "ExitCode" and errors[0]["value"] == "1"
    assert d.ok("GET", "/contexts/default-bash")["language"] == "bash"
