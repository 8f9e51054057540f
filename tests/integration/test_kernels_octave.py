"""Octave through the daemon on octave_kernel (kernelspec octave): state,
output, errors, inline plots, timeout with interrupt, kernel death and
per-run cwd/env through the Octave adapter.

octave_kernel runs octave-cli on a pseudo-terminal: what Octave writes to
stdout and stderr comes as one stdout stream, lines end in \\r\\n, and values
are shown as output ("ans = 42"), not as results. Octave errors are shown
the same way ("error: ..."): octave_kernel 0.32 reports them as output with
status ok, so the run's error is null. It starts octave-cli when asked for
kernel_info, which takes seconds."""

import base64

import pytest

from kernels_testlib import (assert_ok, check_cwd_env, check_kernel_death,
                             check_timeout_interrupts, create, kernel_daemon, lines, run)

assert kernel_daemon  # a fixture, used by name


@pytest.fixture(scope="module")
def ctx(kernel_daemon):
    context = create(kernel_daemon, language="octave")
    assert context["kernel_name"] == "octave"
    assert context["language"] == "octave"
    return context["context_id"]


def test_state_and_output(kernel_daemon, ctx):
    assert_ok(run(kernel_daemon, ctx, "x = 41;"))
    result = run(kernel_daemon, ctx, "x + 1")
    assert_ok(result)
    assert lines(result["logs"]["stdout"]) == ["ans = 42"]
    assert result["results"] == []
    result = run(kernel_daemon, ctx, 'disp("to stdout"); fprintf(2, "to stderr\\n")')
    assert_ok(result)
    assert lines(result["logs"]["stdout"]) == ["to stdout", "to stderr"]
    assert result["execution_count"] >= 3


def test_no_terminal_escapes(kernel_daemon, ctx):
    # octave-cli's readline would wrap each output in bracketed-paste
    # escapes if the kernel inherited a terminal's TERM: the bridge launches
    # kernels with TERM=dumb.
    result = run(kernel_daemon, ctx, "disp(1)")
    assert "\x1b" not in result["logs"]["stdout"], result["logs"]
    assert lines(result["logs"]["stdout"]) == ["1"]
    assert run(kernel_daemon, ctx, 'disp(getenv("TERM"))')["logs"]["stdout"].strip() == "dumb"


def test_error_is_output(kernel_daemon, ctx):
    result = run(kernel_daemon, ctx, 'error("bad thing %d", 3)')
    assert result["error"] is None, result
    assert lines(result["logs"]["stdout"]) == ["error: bad thing 3"]
    result = run(kernel_daemon, ctx, "no_such_function(1)")
    assert "'no_such_function' undefined" in result["logs"]["stdout"], result
    # The context goes on, state intact.
    assert lines(run(kernel_daemon, ctx, "x")["logs"]["stdout"]) == ["x = 41"]


def test_plot_is_png(kernel_daemon, ctx):
    result = run(kernel_daemon, ctx, "plot([1 3 2]);")
    assert_ok(result)
    plots = [r for r in result["results"] if r["png"]]
    assert len(plots) == 1, result
    assert base64.b64decode(plots[0]["png"]).startswith(b"\x89PNG")
    assert plots[0]["is_main_result"] is False
    run(kernel_daemon, ctx, "close all;")


def test_timeout_interrupts(kernel_daemon, ctx):
    check_timeout_interrupts(kernel_daemon, ctx, "while true; pause(0.05); end", "disp(x)", "41")


def test_cwd_env(kernel_daemon, ctx, tmp_path):
    def parse(result):
        assert_ok(result)
        cwd, value = (lines(result["logs"]["stdout"]) + [""])[:2]
        return cwd, value or None  # Octave's getenv gives "" for an unset variable

    # octave_kernel answers every silent request "ok", so a cwd that does not
    # exist cannot fail the run: nothing is applied.
    check_cwd_env(kernel_daemon, ctx, 'printf("%s\\n%s\\n", pwd(), getenv("KBT_VAR"))', tmp_path,
                  parse, refuses_missing_cwd=False)


def test_kernel_killed_during_run(kernel_daemon):
    other = create(kernel_daemon, language="octave")["context_id"]
    check_kernel_death(kernel_daemon, other, "pause(60)")
