"""TypeScript and JavaScript through the daemon on Deno's own kernel
(`deno jupyter`, kernelspec deno, language typescript), installed by
scripts/setup.sh from npm into .cache/deno: language names, state, streams,
main result, errors, rich output (Deno.jupyter), timeout, kernel death and
per-run cwd/env through the JavaScript adapter.

Deno's kernel has habits the bridge meets (kb_kernelspec_quirks): it can
only listen on tcp endpoints, it publishes some output just after its idle
status, it colours its text/plain results unless NO_COLOR is set, and it
dies of SIGINT (interrupt_request is not supported)."""

import base64

import pytest

from kernels_testlib import (KERNEL_ARGS, Daemon, assert_ok, assert_raised, check_cwd_env,
                             check_kernel_death, check_timeout_kernel_dies, create,
                             kernel_daemon_factory, kernel_env, lines, require_deno, run, texts)

assert kernel_daemon_factory  # a fixture, used by name


@pytest.fixture(scope="module", autouse=True)
def deno_installed():
    require_deno()


@pytest.fixture(scope="module")
def kernel_daemon():
    """The daemon of this module's tests, on tcp: Deno's kernel cannot use
    ipc endpoints. (That the bridge picks tcp for it by itself, on a daemon
    configured for ipc, is test_ipc_daemon_reaches_deno_over_tcp.)"""
    d = Daemon(KERNEL_ARGS + ("--transport", "tcp"), env=kernel_env())
    yield d
    d.close()


def test_ipc_daemon_reaches_deno_over_tcp(kernel_daemon_factory):
    d = kernel_daemon_factory("--transport", "ipc")
    ctx = create(d, language="typescript")["context_id"]
    assert texts(run(d, ctx, "6 * 7")) == ["42"]
    # Kernels that can use ipc still do.
    python = create(d, language="python")["context_id"]
    assert texts(run(d, python, "6 * 7")) == ["42"]


@pytest.fixture(scope="module")
def ctx(kernel_daemon):
    return create(kernel_daemon, language="typescript")["context_id"]


@pytest.mark.parametrize("language", ["typescript", "javascript", "JavaScript", "TypeScript"])
def test_language_names(kernel_daemon, language):
    context = create(kernel_daemon, language=language)
    assert context["kernel_name"] == "deno"
    assert context["language"] == language.lower()
    kernel_daemon.ok("DELETE", "/contexts/%s" % context["context_id"], status=204)


def test_kernelspec_listed(kernel_daemon):
    specs = {s["name"]: s for s in kernel_daemon.ok("GET", "/kernelspecs")["kernelspecs"]}
    assert specs["deno"]["language"] == "typescript"


def test_state_streams_and_main_result(kernel_daemon, ctx):
    assert_ok(run(kernel_daemon, ctx, "let x: number = 41;"))
    result = run(kernel_daemon, ctx, 'console.log("to stdout"); console.error("to stderr"); x + 1')
    assert_ok(result)
    assert result["logs"]["stdout"] == "to stdout\n"
    assert result["logs"]["stderr"] == "to stderr\n"
    assert texts(result) == ["42"]  # no ANSI colours: the bridge sets NO_COLOR
    assert result["results"][0]["is_main_result"] is True
    assert result["execution_count"] >= 2


def test_javascript_context_runs_javascript(kernel_daemon):
    other = create(kernel_daemon, language="javascript")["context_id"]
    result = run(kernel_daemon, other, "const add = (a, b) => a + b;\nadd(20, 22)")
    assert_ok(result)
    assert texts(result) == ["42"]


def test_every_result_arrives(kernel_daemon, ctx):
    # Deno's kernel at times publishes a run's result just after its idle
    # status; the bridge waits for it (late_output), so no run loses one.
    for i in range(60):
        result = run(kernel_daemon, ctx, "%d * 2" % i)
        assert texts(result) == [str(i * 2)], (i, result)
    for i in range(20):
        result = run(kernel_daemon, ctx, 'console.log("line %d")' % i)
        assert result["logs"]["stdout"] == "line %d\n" % i, (i, result)


def test_error(kernel_daemon, ctx):
    error = assert_raised(run(kernel_daemon, ctx, 'throw new TypeError("bad thing")'))
    assert error["name"] == "TypeError"
    assert error["value"] == "bad thing"
    assert error["traceback"][0] == "TypeError: bad thing", error
    error = assert_raised(run(kernel_daemon, ctx, "noSuchName + 1"))
    assert error["name"] == "ReferenceError"
    assert "noSuchName is not defined" in error["value"], error
    # The context goes on.
    assert texts(run(kernel_daemon, ctx, "x")) == ["41"]


def test_rich_output(kernel_daemon, ctx):
    result = run(kernel_daemon, ctx, "Deno.jupyter.html`<b>bold</b>`")
    assert_ok(result)
    assert [r["html"] for r in result["results"]] == ["<b>bold</b>"]
    assert result["results"][0]["is_main_result"] is True
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 8).decode()
    result = run(kernel_daemon, ctx,
                 'await Deno.jupyter.display({"image/png": "%s", "text/plain": "img"}, '
                 '{raw: true}); Deno.jupyter.md`# title`' % png)
    assert_ok(result)
    shown = result["results"]
    assert [r["png"] for r in shown if r["png"]] == [png], shown
    assert any("# title" in (r["data"].get("text/markdown") or "") for r in shown), shown


def test_cwd_env(kernel_daemon, ctx, tmp_path):
    def parse(result):
        assert_ok(result)
        cwd, value = lines(result["logs"]["stdout"])
        return cwd, None if value == "<unset>" else value

    check_cwd_env(kernel_daemon, ctx,
                  'console.log(Deno.cwd()); console.log(Deno.env.get("KBT_VAR") ?? "<unset>")',
                  tmp_path, parse)


def test_adapter_leaves_no_global_names(kernel_daemon, ctx, tmp_path):
    run(kernel_daemon, ctx, "1", cwd=str(tmp_path))
    names = run(kernel_daemon, ctx, 'Object.keys(globalThis).filter((k) => /kb/i.test(k)).join(",")')
    assert texts(names) == ['""'], names


def test_timeout_kernel_dies_of_interrupt(kernel_daemon):
    other = create(kernel_daemon, language="typescript")["context_id"]
    check_timeout_kernel_dies(kernel_daemon, other, "while (true) {}")


def test_exit_during_run(kernel_daemon):
    other = create(kernel_daemon, language="typescript")["context_id"]
    result = run(kernel_daemon, other, "Deno.exit(3)")
    assert result["process"]["reason"] == "failed", result
    assert result["process"]["exit_code"] == 3, result
    assert result["error"]["name"] == "KernelDied", result
    assert kernel_daemon.get("/contexts/%s" % other).json["code"] == "SESSION_NOT_FOUND"


def test_kernel_killed_during_run(kernel_daemon):
    other = create(kernel_daemon, language="typescript")["context_id"]
    check_kernel_death(kernel_daemon, other, "await new Promise((r) => setTimeout(r, 60000))")
