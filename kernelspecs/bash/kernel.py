"""kernelbridge's bash kernel: a stateful bash behind the Jupyter protocol.

One interactive bash per kernel, started and given a unique prompt by
metakernel's REPLWrapper (Debian's python3-metakernel) on a pseudo-terminal,
which gives it job control: a run's foreground job has the terminal, so an
interrupt can stop that job (a pipeline included) as Ctrl-C does in a
terminal, and the shell lives on. What this kernel adds:

- The code of a run is written to a private file and the shell is sent one
  line that reads it into a variable and evals it, with stdin from
  /dev/null and stdout and stderr on two FIFOs the shell opened at start.
  The two are read as the output comes and published as separate stdout
  and stderr streams. The terminal carries only the shell's prompts (and
  its job notices, passed on as stderr).
- The prompt is PS1 = __kb_<nonce>_<seq>_<$?>_>: the sequence number of the
  line the shell ran last and the exit status of its last command. A
  non-zero status is the run's error, ename "ExitCode", evalue the status.
  The next run starts with $? set to that status (function __kb_rc).
- SIGINT (the daemon's interrupt, interrupt_mode "signal") is counted by a
  handler during requests; the run's loop then sends SIGINT to the
  terminal's foreground job, every 0.25 s until a prompt comes, or to the
  shell itself when it holds the terminal (a loop of builtins); the run
  ends at the next prompt, and a sync line with a new sequence number
  drops any prompt an extra signal left behind.
- When the shell exits (`exit` in the code), the kernel exits with its
  status without replying: the daemon reports the kernel's death.
- The kernel's own working directory follows the shell's after each run,
  so /proc/<kernel>/cwd (the context's cwd) shows the shell's.

No execute_result: a shell has no value. Names starting with __kb_ are the
kernel's (and the daemon's bash adapter's) own.
"""

import codecs
import os
import re
import secrets
import select
import shutil
import signal
import tempfile
import threading
import time

BASH_ENV = dict(os.environ)  # before ipykernel adds anything of its own

from ipykernel.kernelapp import IPKernelApp  # noqa: E402
from ipykernel.kernelbase import Kernel  # noqa: E402
import pexpect  # noqa: E402 (metakernel's dependency)
from metakernel.replwrap import REPLWrapper  # noqa: E402

BASH = "/bin/bash"
NONCE = secrets.token_hex(8)
PS1 = "__kb_%s_${__kb_seq:-0}_$?_>" % NONCE
PS2 = "__kb_%s_more>" % NONCE
PROMPT = re.compile(r"__kb_%s_(\d+)_(\d+)_>" % NONCE)
READ_SIZE = 65536
WAKE_AT_LEAST = 0.25  # seconds: the loop looks at its signal count this often at least
INTERRUPT_AGAIN = 0.25  # seconds between SIGINTs while no prompt comes
INTERRUPT_LOOK = 0.02  # seconds between two looks at who holds the terminal
SYNC_WAIT = 1.0  # seconds to wait for the prompt of a sync line before sending another
SILENT_ERROR_KEEP = 4096  # bytes of a silent run's stderr kept for its error


def describe(status):
    """The traceback line of an exit status."""
    if status > 128 and status - 128 < signal.NSIG:
        try:
            return "exit status %d (%s)" % (status, signal.Signals(status - 128).name)
        except ValueError:
            pass
    return "exit status %d" % status


class Shell:
    """The interactive bash: start-up through REPLWrapper, then one line per run."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kb-bash-")
        self.cell = os.path.join(self.dir, "cell")
        fifos = [os.path.join(self.dir, name) for name in ("out", "err")]
        for path in fifos:
            os.mkfifo(path, 0o600)
        # Readers first, non-blocking, so that the shell's opening for
        # writing does not wait.
        self.out_fd, self.err_fd = (os.open(p, os.O_RDONLY | os.O_NONBLOCK) for p in fifos)
        env = {k: v for k, v in BASH_ENV.items() if k not in ("PS1", "PS2", "PROMPT_COMMAND")}
        env["PS1"], env["PS2"] = PS1, PS2  # the first prompt is already ours
        # The terminal's echo is off from the start (bash restores the
        # terminal state it found after a job). Python ignores SIGPIPE and
        # SIGXFSZ, and ipykernel SIGINT outside requests: a signal ignored
        # when bash starts stays ignored in it and its children (`yes |
        # head -1` would never end, ^C would stop nothing), so the child is
        # forked with them at their defaults, as metakernel's spawn does for
        # SIGINT.
        saved = {sig: signal.signal(sig, signal.SIG_DFL)
                 for sig in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ)}
        try:
            child = pexpect.spawn(BASH, ["--norc", "--noprofile", "--noediting", "-i"],
                                  echo=False, encoding="utf-8", codec_errors="replace",
                                  env=env, dimensions=(50, 200))
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
        init = ("export -n PS1 PS2; unset PROMPT_COMMAND HISTFILE MAILCHECK; set +o history +H; "
                "exec {__kb_out}>%s {__kb_err}>%s; __kb_rc() { return \"$1\"; }; "
                "echo \"$BASH_VERSION $__kb_out $__kb_err\"" % (fifos[0], fifos[1]))
        self.wrapper = REPLWrapper(child, PROMPT.pattern, None,
                                   continuation_prompt_regex=re.escape(PS2),
                                   extra_init_cmd=None)
        answer = self.wrapper.run_command(init, timeout=30).split()
        self.version, out_no, err_no = answer[-3], int(answer[-2]), int(answer[-1])
        for path in fifos:
            os.unlink(path)
        self.child = child
        self.pty_fd = child.child_fd
        self.redirect = "</dev/null >&%d 2>&%d" % (out_no, err_no)
        self.pty_text = child.buffer  # what the wrapper read past the last prompt
        child.buffer = ""
        self.pty_decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.seq = 0
        self.status = 0  # of the last run's last command

    def line_for(self, code):
        """Write code to the cell file; the line that runs it."""
        with open(self.cell, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(code)
        self.seq += 1
        run = 'eval "$__kb_code"'
        return ("__kb_seq=%d; IFS= read -r -d '' __kb_code <'%s' || :; "
                "if __kb_rc %d; then %s; else %s; fi %s"
                % (self.seq, self.cell, self.status, run, run, self.redirect))

    def send(self, line):
        os.write(self.pty_fd, (line + "\n").encode())

    def interrupt_step(self, shell_seen):
        """One step of an interrupt: SIGINT to the terminal's foreground
        process group, the running job, as Ctrl-C would, but never to the
        shell in the instant it starts a job (it would abandon the job,
        which keeps the terminal, and the shell's next read fails). When the
        shell itself holds the terminal (a builtin loop) at two looks in a
        row, the shell gets it. Returns whether the shell held it now."""
        try:
            foreground = os.tcgetpgrp(self.pty_fd)
            if foreground != self.child.pid:  # the shell leads its own group
                os.killpg(foreground, signal.SIGINT)
                return False
            if shell_seen:
                os.kill(self.child.pid, signal.SIGINT)
        except OSError:
            pass
        return True

    def children(self):
        """The shell's child processes now (pids)."""
        try:
            with open("/proc/%d/task/%d/children" % (self.child.pid, self.child.pid)) as f:
                return {int(pid) for pid in f.read().split()}
        except OSError:
            return set()

    def interrupt_groups(self, old_children):
        """SIGINT to the process group of each child the shell started
        since old_children was taken: a job can miss the terminal's ^C when
        it comes as the job starts (the shell takes the terminal back while
        the job runs on in its own group)."""
        for pid in self.children() - old_children:
            try:
                pgid = os.getpgid(pid)
                if pgid == os.getpgid(self.child.pid):
                    os.kill(pid, signal.SIGINT)
                else:
                    os.killpg(pgid, signal.SIGINT)
            except OSError:
                pass

    def read_pty(self):
        """Prompts and other text from the terminal: ([(seq, status)], text
        before them). Raises EOFError when the shell has gone."""
        try:
            data = os.read(self.pty_fd, READ_SIZE)
        except OSError:
            data = b""
        if not data:
            raise EOFError
        self.pty_text += self.pty_decoder.decode(data)
        prompts, chatter, pos = [], [], 0
        for match in PROMPT.finditer(self.pty_text):
            chatter.append(self.pty_text[pos:match.start()])
            prompts.append((int(match.group(1)), int(match.group(2))))
            pos = match.end()
        rest = self.pty_text[pos:]
        # Keep what may be the start of a prompt; pass whole lines on.
        cut = rest.rfind("\n") + 1
        chatter.append(rest[:cut])
        self.pty_text = rest[cut:]
        text = "".join(chatter).replace("\r", "")
        return prompts, text if text.strip() else ""

    def wait_exit(self):
        """The shell's exit status once it has gone (128 + signal if killed)."""
        try:
            _, status = os.waitpid(self.child.pid, 0)
        except ChildProcessError:
            return 1
        if os.WIFSIGNALED(status):
            return 128 + os.WTERMSIG(status)
        return os.WEXITSTATUS(status)

    def cwd(self):
        return os.readlink("/proc/%d/cwd" % self.child.pid)

    def close(self):
        try:
            self.child.close(force=True)
        except Exception:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


class BashKernel(Kernel):
    implementation = "kernelbridge-bash"
    implementation_version = "1.0"
    language = "bash"
    banner = "bash, driven by kernelbridge's bash kernel (metakernel's REPLWrapper)"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._execute_sleep = 0  # ipykernel sleeps 0.5 ms before each reply by default
        self.bash = Shell()
        self.language_info = {
            "name": "bash", "version": self.bash.version, "mimetype": "text/x-sh",
            "file_extension": ".sh", "codemirror_mode": "shell", "pygments_lexer": "bash",
        }
        self._wake_r, self._wake_w = os.pipe()
        self._sigints = 0
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    # SIGINT during a request: a count, never an exception that could land
    # between a read and its use. The signal may be delivered to any of the
    # kernel's threads, and Python runs the handler in the main thread only
    # when it next runs: the wakeup fd makes the loop's select return.
    def pre_handler_hook(self):
        self._sigints = 0
        self.saved_sigint_handler = signal.signal(signal.SIGINT, self._on_sigint)
        self._saved_wakeup_fd = signal.set_wakeup_fd(self._wake_w)

    def post_handler_hook(self):
        signal.set_wakeup_fd(self._saved_wakeup_fd)
        signal.signal(signal.SIGINT, self.saved_sigint_handler)

    def _on_sigint(self, signum, frame):
        self._sigints += 1

    def _drain_wake(self):
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _publish(self, name, text):
        if text:
            self.send_response(self.iopub_socket, "stream", {"name": name, "text": text})

    def do_execute(self, code, silent, store_history=True, user_expressions=None,
                   allow_stdin=False, **kwargs):
        self._drain_wake()
        handled = 0  # SIGINTs taken; the count starts with each request
        shell = self.bash
        decoders = {fd: codecs.getincrementaldecoder("utf-8")("replace")
                    for fd in (shell.out_fd, shell.err_fd)}
        names = {shell.out_fd: "stdout", shell.err_fd: "stderr"}
        kept_err = []

        def take(fd, final=False):
            """Read what fd holds now; publish it (silent: keep stderr)."""
            while True:
                try:
                    data = os.read(fd, READ_SIZE)
                except BlockingIOError:
                    data = b""
                text = decoders[fd].decode(data, final=final or not data)
                if silent:
                    if fd == shell.err_fd and sum(map(len, kept_err)) < SILENT_ERROR_KEEP:
                        kept_err.append(text)
                else:
                    self._publish(names[fd], text)
                if len(data) < READ_SIZE:
                    return

        old_children = shell.children()  # background jobs of earlier runs
        shell.send(shell.line_for(code))
        seq, interrupted, status = shell.seq, False, None
        sync_deadline = again = None
        while True:
            deadlines = [d for d in (sync_deadline, again) if d is not None]
            timeout = min([WAKE_AT_LEAST] + [max(0, d - time.monotonic()) for d in deadlines])
            ready, _, _ = select.select([shell.pty_fd, shell.out_fd, shell.err_fd, self._wake_r],
                                        [], [], timeout)
            if self._wake_r in ready:
                self._drain_wake()
            if self._sigints != handled and status is None:
                handled, interrupted, again, shell_seen = self._sigints, True, 0, False
            if again is not None and status is None and time.monotonic() >= again:
                # Until a prompt comes: a signal that came as a job was
                # being started can miss it, and a job may ignore it.
                shell_seen = shell.interrupt_step(shell_seen)
                again = time.monotonic() + (INTERRUPT_LOOK if shell_seen else INTERRUPT_AGAIN)
            for fd in (shell.out_fd, shell.err_fd):
                if fd in ready:
                    take(fd)
            if shell.pty_fd in ready:
                try:
                    prompts, chatter = shell.read_pty()
                except EOFError:
                    self._shell_gone(take)
                if not silent:
                    self._publish("stderr", chatter)
                for got_seq, got_status in prompts:
                    if status is None and (got_seq == seq or interrupted):
                        status = got_status
                        if not interrupted:
                            break
                        # An extra ^C may leave a prompt behind: sync on a new line.
                        shell.send("__kb_seq=%d; __kb_rc %d" % (shell.seq + 1, status))
                        shell.seq += 1
                        seq = shell.seq
                        sync_deadline = time.monotonic() + SYNC_WAIT
                    elif status is not None and got_seq == seq:
                        sync_deadline = None
                        break
                if status is not None and sync_deadline is None:
                    break
            if sync_deadline is not None and time.monotonic() >= sync_deadline:
                # No prompt for the sync line: a job that started as the
                # shell took the ^C may hold the terminal. Stop it, sync again.
                shell.interrupt_groups(old_children)
                shell.send("__kb_seq=%d; __kb_rc %d" % (shell.seq + 1, status))
                shell.seq += 1
                seq = shell.seq
                sync_deadline = time.monotonic() + SYNC_WAIT
        for fd in (shell.out_fd, shell.err_fd):
            take(fd, final=True)
        if not silent:
            shell.status = status
        try:
            os.chdir(shell.cwd())
        except OSError:
            pass
        return self._reply(status, silent, "".join(kept_err))

    def _reply(self, status, silent, kept_err):
        if status == 0:
            return {"status": "ok", "execution_count": self.execution_count,
                    "payload": [], "user_expressions": {}}
        traceback = [describe(status)]
        if silent and kept_err.strip():
            traceback.append(kept_err.strip())
        error = {"ename": "ExitCode", "evalue": str(status), "traceback": traceback}
        if not silent:
            self.send_response(self.iopub_socket, "error", error)
        return dict(error, status="error", execution_count=self.execution_count)

    def _shell_gone(self, take):
        """The shell exited (`exit` in the code): publish what it wrote, and
        exit with its status, without a reply."""
        for fd in (self.bash.out_fd, self.bash.err_fd):
            try:
                take(fd, final=True)
            except OSError:
                pass
        status = self.bash.wait_exit()
        done = threading.Event()
        self.iopub_thread.schedule(done.set)
        done.wait(2)
        time.sleep(0.05)  # let ZeroMQ's I/O thread send what is queued
        shutil.rmtree(self.bash.dir, ignore_errors=True)
        os._exit(status)

    def _abort_queues(self):
        """A non-zero exit status does not abort the requests queued behind
        it: a shell goes on after a failed command (unless `set -e`), and
        ipykernel's abort would also catch a request that arrives just
        after the reply (the daemon sends the next one at once)."""

    def do_shutdown(self, restart):
        self.bash.close()
        return {"status": "ok", "restart": restart}


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=BashKernel)
