/*  kb_kernelspec.h - Jupyter kernelspecs: find them where jupyter_client
    looks, parse kernel.json, pick one for a language, and build the argv and
    environment a kernel is launched with. Three files implement it, one
    concept each: kb_kernelspec.c (one kernelspec: kernel.json, copies,
    quirks), kb_kernelspec_launch.c (argv and environment of a launch) and
    kb_kernelspecs.c (discovery and lookups).

    Not for launching: this module spawns nothing and opens no sockets; the
    launcher takes the argv and environment built here.

    Names follow jupyter_client: a kernelspec's name is its directory name in
    lower case, and lookups by name are case-insensitive. */
#ifndef KB_KERNELSPEC_H_INCLUDED
#define KB_KERNELSPEC_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernelbridge/kb_error.h"

#include "util/kb_vec.h" /* kb_strv_free for the vectors built here */

/*  sys.prefix of the system Python: {prefix} in argv, {prefix}/share/jupyter
    in the search path. */
#define KB_KERNELSPEC_PREFIX "/usr"

typedef struct {
    char *name;           /* directory name, e.g. "python3" (lower case when discovered) */
    char *display_name;   /* as written in kernel.json */
    char *language;       /* as written in kernel.json */
    char *resource_dir;   /* absolute path of the kernelspec directory */
    char *interrupt_mode; /* "signal" (default) or "message" */
    char **argv;          /* NULL-terminated, as written (with {connection_file} etc.) */
    size_t argc;          /* entries in argv before the NULL, at least 1 */
    json_t *env;          /* object of strings, or NULL */
    json_t *metadata;     /* object, or NULL */
} kb_kernelspec_t;

/*  Load <dir>/kernel.json as the kernelspec called name. Returns NULL and
    writes "<dir>/kernel.json: <problem>" to err (may be NULL) when the file
    cannot be read or is broken: not JSON or not an object, argv missing,
    empty, not all strings or argv[0] empty, display_name or language missing
    or not strings, interrupt_mode not "signal"/"message" (any case), env not
    an object of strings with names free of '=', metadata not an object.
    Unknown keys are ignored. Caller owns the result. */
kb_kernelspec_t *kb_kernelspec_load(const char *dir, const char *name, kb_error_t *err);

/*  Free a kernelspec; safe on NULL, sets *self_p to NULL. */
void kb_kernelspec_destroy(kb_kernelspec_t **self_p);

/*  Deep copy, or NULL when out of memory. Caller owns the result. */
kb_kernelspec_t *kb_kernelspec_dup(const kb_kernelspec_t *self);

/*  A deep copy of self with arg appended to its argv (written as is: no
    {name} in it is expanded later unless it was meant to be). NULL when
    out of memory. Caller owns the result. */
kb_kernelspec_t *kb_kernelspec_with_arg(const kb_kernelspec_t *self, const char *arg);

/*  NULL when env is an object of environment variables (names non-empty
    without '=', values strings without NUL); else the problem, starting
    with what (e.g. "env"), in buf. */
const char *kb_kernelspec_env_problem(const json_t *env, const char *what, char *buf,
                                      size_t buflen);

/*  The argv to launch: in every argument {connection_file}, {resource_dir}
    and {prefix} ("/usr", the system Python's sys.prefix) are replaced, other
    {names} are left as written (connection_file NULL leaves it as written
    too). As jupyter_client does, argv[0] "python", "python3", or
    "python3.<minor>" when <minor> is the system Python's own, becomes
    system_python (NULL: "/usr/bin/python3"); absolute paths are never
    rewritten. NULL-terminated; caller frees with kb_strv_free; NULL when out
    of memory. */
char **kb_kernelspec_build_argv(const kb_kernelspec_t *self, const char *connection_file,
                                const char *system_python);

/*  The environment to launch with, NULL-terminated "K=V" strings:
    - base_env (e.g. environ; may be NULL) minus every variable whose name
      starts with one of drop_prefixes (NULL-terminated, may be NULL; the daemon
      passes {"KB_", NULL}); entries without '=' and repeated names (after the
      first) are left out;
    - TERM=KB_KERNEL_TERM in place of the base's TERM, and NO_COLOR=1 for a
      kernel whose quirks say no_color (see kb_kernelspec_quirks);
    - plus the kernelspec env, each value expanded like Python's
      string.Template.safe_substitute: $VAR and ${VAR} from the filtered base
      environment (so dropped variables are never expanded into a kernel),
      unknown names left as written, $$ -> $;
    - plus extra_env (object of strings, may be NULL), which wins over both.
    Returns NULL when out of memory, or when extra_env holds a value that is
    not a string (or contains NUL) or a name that is empty or contains '=':
    callers validate user input before. Caller frees with kb_strv_free. */
char **kb_kernelspec_build_env(const kb_kernelspec_t *self, char *const *base_env,
                               const char *const *drop_prefixes, const json_t *extra_env);

/*  A copy of envp ("K=V" strings, NULL-terminated; borrowed) with dir
    appended to the search path variable name (":" between entries; the
    variable set to dir alone when envp has none or it is empty).
    NULL-terminated; caller frees with kb_strv_free; NULL when out of
    memory. */
char **kb_kernelspec_env_add_path(char *const *envp, const char *name, const char *dir);

/*  A copy of envp with name=value, in place of any value it had; as
    kb_kernelspec_env_add_path otherwise. */
char **kb_kernelspec_env_set(char *const *envp, const char *name, const char *value);

/*  The environment variables every kernel is launched with unless its
    kernelspec env or the caller's extra_env set them: kernels have no
    terminal, so TERM is "dumb" (octave_kernel's readline, run on a pty,
    otherwise wraps every output in bracketed-paste escapes). */
#define KB_KERNEL_TERM "dumb"

/*  How the bridge meets a kernel's habits. Known kernels are recognised by
    what their argv launches; kernel.json may say it too, in an object
    metadata.kernelbridge, whose members win:
    - transport: "tcp" or "ipc" when the kernel can only use that one (Deno's
      kernel reads every endpoint as host:port, so ipc:// fails); NULL: the
      daemon's configured transport. Member "transport": "tcp" | "ipc".
    - late_output: seconds during which a run still takes the kernel's
      output after both its execute_reply and its idle status came, the
      wait starting again with each message of the run (Deno's kernel
      publishes results from its JavaScript thread and streams from a task
      of their own, at times just after idle); 0: a run completes at once.
      Member "late_output": a number of seconds, 0 to 10.
    - no_color: launch with NO_COLOR=1 unless the kernelspec env or the
      caller's extra_env set NO_COLOR (Deno's kernel colours its text/plain
      results with ANSI escapes otherwise). Member "no_color": true | false.
    - no_rlimit_data: a context's memory limit is not set as the kernel's
      RLIMIT_DATA, because its runtime maps far more writable memory at
      start than it uses (Deno's V8 maps about 1.2 GiB of data for 200 MiB
      resident; the JVM and Julia do the same): the sampler alone enforces
      the limit. Member "rlimit_data": false (true: set it).
    - ipykernel: the kernel is IPython's (argv runs `-m ipykernel_launcher`,
      `-m ipykernel` or a path to ipykernel_launcher.py), which takes
      IPython's options (`--ext=NAME` loads an extension at start). Member
      "ipykernel": true | false.
    Members of another type or out of range are ignored. */
typedef struct {
    const char *transport; /* static string or NULL */
    double late_output;
    bool no_color;
    bool no_rlimit_data;
    bool ipykernel;
} kb_kernelspec_quirks_t;

/*  Seconds of late_output for Deno's kernel (2.x). In 5 to 15% of runs its
    result comes after idle, within a millisecond of it (at most 0.7 ms
    idle, 1.0 ms with both CPUs of a 2-CPU machine busy, 400 runs each); the
    wait is twenty times that. */
#define KB_DENO_LATE_OUTPUT 0.02

kb_kernelspec_quirks_t kb_kernelspec_quirks(const kb_kernelspec_t *self);

/*  Whether a context of this kernelspec can be forked and checkpointed
    (SPEC section 13): metadata.kernelbridge.fork (true or false) when the
    kernelspec says, else whether its kernel is ipykernel: argv runs the
    module ipykernel_launcher or ipykernel (`-m ipykernel_launcher`), the
    one kernel the kernel side (python/kernelbridge_fork) knows how to
    fork. When not, *why (may be NULL) gets the reason (static). */
bool kb_kernelspec_forkable(const kb_kernelspec_t *self, const char **why);

typedef struct kb_kernelspecs kb_kernelspecs_t;

/*  Called once per problem found during discovery; message is borrowed for
    the duration of the call. */
typedef void(kb_kernelspec_warn_fn)(const char *message, void *arg);

/*  Discover every installed kernelspec. Searched, in this order, the kernels/
    subdirectory of: every entry of $JUPYTER_PATH (split on ':', empty entries
    skipped); $JUPYTER_DATA_DIR, else $XDG_DATA_HOME/jupyter, else
    $HOME/.local/share/jupyter (the passwd home when $HOME is unset);
    /usr/share/jupyter ({prefix}/share/jupyter); /usr/local/share/jupyter;
    /usr/share/jupyter. A directory reached twice (also via a symlink) is read
    once. A kernelspec is a subdirectory holding a kernel.json; its name is
    the directory name in lower case; within one kernels/ directory names are
    visited in sorted order. The first valid kernelspec of a name wins. A
    broken kernel.json is skipped (a valid one of the same name further down
    the path may then be used) and warn (may be NULL) is told which file and
    why; unreadable directories and invalid names are warned about too; none
    of this is fatal. Returns NULL only when out of memory. Caller owns the
    result. */
kb_kernelspecs_t *kb_kernelspecs_discover(kb_kernelspec_warn_fn *warn, void *arg);

/*  Free a set of kernelspecs; safe on NULL, sets *self_p to NULL. */
void kb_kernelspecs_destroy(kb_kernelspecs_t **self_p);

/*  Number of kernelspecs found. */
size_t kb_kernelspecs_size(const kb_kernelspecs_t *self);

/*  The index-th kernelspec in discovery order (search-path order, then
    name), index < size. Borrowed. */
const kb_kernelspec_t *kb_kernelspecs_at(const kb_kernelspecs_t *self, size_t index);

/*  The kernelspec of this name, compared case-insensitively, or NULL.
    Borrowed. */
const kb_kernelspec_t *kb_kernelspecs_find(const kb_kernelspecs_t *self, const char *name);

/*  The kernelspec for a language (SPEC section 3). kernel_map
    (NULL-terminated "language=kernelspec" strings, may be NULL) wins: its
    language compared case-insensitively, the last entry for a language wins
    (so a later flag overrides an earlier one), and an entry naming a missing
    kernelspec gives NULL. Else the kernelspec whose name equals the language
    case-insensitively; else the first in discovery order whose language
    equals it case-insensitively; else, for a language with an alias
    (javascript: typescript, whose kernels run JavaScript too, e.g. Deno's),
    the kernelspec for the alias by these same rules; else NULL. Borrowed. */
const kb_kernelspec_t *kb_kernelspecs_for_language(const kb_kernelspecs_t *self,
                                                   const char *language,
                                                   const char *const *kernel_map);

/*  "python3, xpython, ..." (names in discovery order; "" when none) for error
    messages. Caller frees; NULL when out of memory. */
char *kb_kernelspecs_names(const kb_kernelspecs_t *self);

/*  {"kernelspecs": [{name, display_name, language, interrupt_mode,
    resource_dir, argv, env, metadata}]} in discovery order (env and
    metadata null when kernel.json has none). Caller owns; NULL when out
    of memory. */
json_t *kb_kernelspecs_to_json(const kb_kernelspecs_t *self);

/*  Check a kernel map (NULL-terminated, may be NULL): every entry
    "language=kernelspec" with both sides non-empty. 0 when valid; -1 with a
    message in err (may be NULL) naming the first bad entry. */
int kb_kernel_map_validate(const char *const *kernel_map, kb_error_t *err);

#endif
