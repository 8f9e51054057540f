"""Fork a running, idle ipykernel into a new, whole kernel.

The daemon asks the kernel with a silent execute_request on its shell channel
(so the request waits in the kernel's queue between runs, and neither the
execution count nor the outputs move):

    code:             __import__("kernelbridge_fork").fork({...connection...})
    user_expressions: {"fork": "__import__('kernelbridge_fork').last"}

and reads the child's pid from the reply's user expression
(``application/json`` ``{"pid": N}``, ``text/plain`` ``N``). A refusal or a
failure is an error reply: ``ForkRefused`` (this kernel cannot fork: not an
ipykernel, or a version this code does not know) or ``ForkFailed`` (the child
could not become a kernel, e.g. a port in use; it has exited and left
nothing behind). ``freeze(path)`` makes a frozen fork (a checkpoint) that
waits on a unix socket; ``request(path, connection)`` asks it for a fork.
``template(path, modules)`` imports modules into a pristine kernel and
freezes it: the template that new contexts are forked from.
docs/fork.md tells the whole story.
"""

from kernelbridge_fork.compat import TESTED, ForkError, ForkFailed, ForkRefused
from kernelbridge_fork.frozen import freeze, request, template
from kernelbridge_fork.spawn import ForkResult, ForkResults, fork, fork_many

last = None  # the latest fork()'s or freeze()'s ForkResult, for the reply

__all__ = ["ForkError", "ForkFailed", "ForkRefused", "ForkResult", "ForkResults", "TESTED",
           "fork", "fork_many", "freeze", "last", "request", "template"]
