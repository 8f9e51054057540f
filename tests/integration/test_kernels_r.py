"""R through the daemon on IRkernel (kernelspec ir, language "R"): language
names, state, streams, values, errors, plots as PNG, timeout with interrupt,
kernel death and per-run cwd/env through the R adapter.

IRkernel shows values as display_data, never as execute_result: a value is
a result entry with is_main_result false (SPEC section 2)."""

import base64

import pytest

from kernels_testlib import (assert_ok, assert_raised, check_cwd_env, check_kernel_death,
                             check_timeout_interrupts, create, kernel_daemon, lines, run, texts)

assert kernel_daemon  # a fixture, used by name


@pytest.fixture(scope="module")
def ctx(kernel_daemon):
    return create(kernel_daemon, language="r")["context_id"]


@pytest.mark.parametrize("language", ["r", "R"])
def test_language_names(kernel_daemon, language):
    context = create(kernel_daemon, language=language)
    assert context["kernel_name"] == "ir"
    assert context["language"] == "r"
    kernel_daemon.ok("DELETE", "/contexts/%s" % context["context_id"], status=204)


def test_state_streams_and_values(kernel_daemon, ctx):
    assert_ok(run(kernel_daemon, ctx, "x <- 41"))
    result = run(kernel_daemon, ctx, 'cat("to stdout\\n")\nmessage("to stderr")\nx + 1')
    assert_ok(result)
    assert result["logs"]["stdout"] == "to stdout\n"
    assert lines(result["logs"]["stderr"])[0] == "to stderr"
    assert texts(result) == ["[1] 42"]
    value = result["results"][0]
    assert value["is_main_result"] is False  # IRkernel's display_data
    assert value["data"]["text/plain"] == "[1] 42"
    assert "text/html" in value["data"]
    assert result["execution_count"] >= 2


def test_error(kernel_daemon, ctx):
    error = assert_raised(run(kernel_daemon, ctx, 'stop("bad thing")'))
    assert error["name"] == "ERROR"  # IRkernel's name for every R error
    assert "bad thing" in error["value"], error
    assert error["traceback"] and "bad thing" in error["traceback"][0], error
    error = assert_raised(run(kernel_daemon, ctx, "no_such_function(1)"))
    assert 'could not find function "no_such_function"' in error["value"], error
    # The context goes on.
    assert texts(run(kernel_daemon, ctx, "x")) == ["[1] 41"]


def test_warning_is_stderr_not_error(kernel_daemon, ctx):
    result = run(kernel_daemon, ctx, 'warning("careful")')
    assert_ok(result)
    assert "careful" in result["logs"]["stderr"]


def test_plot_is_png(kernel_daemon, ctx):
    result = run(kernel_daemon, ctx, "plot(1:10)")
    assert_ok(result)
    plots = [r for r in result["results"] if r["png"]]
    assert len(plots) == 1, result["results"]
    assert base64.b64decode(plots[0]["png"]).startswith(b"\x89PNG")
    assert plots[0]["is_main_result"] is False


def test_timeout_interrupts(kernel_daemon, ctx):
    check_timeout_interrupts(kernel_daemon, ctx, "while (TRUE) Sys.sleep(0.05)", "x", "[1] 41")


def test_cwd_env(kernel_daemon, ctx, tmp_path):
    def parse(result):
        assert_ok(result)
        cwd, value = lines(result["logs"]["stdout"])
        return cwd, None if value == "<unset>" else value

    check_cwd_env(kernel_daemon, ctx,
                  'cat(getwd(), "\\n", Sys.getenv("KBT_VAR", unset = "<unset>"), "\\n", sep = "")',
                  tmp_path, parse)


def test_exit_during_run(kernel_daemon):
    # IRkernel's own quit() only asks the front end to stop the kernel; R's
    # internal quit ends the process.
    other = create(kernel_daemon, language="r")["context_id"]
    result = run(kernel_daemon, other, '.Internal(quit("no", 3L, FALSE))')
    assert result["process"]["reason"] == "failed", result
    assert result["process"]["exit_code"] == 3, result
    assert result["error"]["name"] == "KernelDied", result
    assert kernel_daemon.get("/contexts/%s" % other).json["code"] == "SESSION_NOT_FOUND"


def test_kernel_killed_during_run(kernel_daemon):
    other = create(kernel_daemon, language="r")["context_id"]
    check_kernel_death(kernel_daemon, other, "Sys.sleep(60)")
