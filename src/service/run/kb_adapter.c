/*  kb_adapter.c - per-run cwd/env on a persistent context: the silent
    snippets that apply them before a run and restore them after, one pair
    per language. The apply snippet saves what it changes first, so the
    restore snippet puts back exactly that even when applying failed half
    way (a cwd that does not exist). Saved state lives outside the user's
    namespace (a stack on Python's os module, R's options, a global of the
    JavaScript runtime under a registered symbol, Octave's appdata of the root object, a shell array
    with a reserved name, a Julia global in Main with a reserved name).
    kb_adapter_apply_code returns NULL when out of memory.
*/
#include "service/run/kb_adapter.h"
#include "util/kb_buf.h"

#include <jansson.h>

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/*  A double-quoted literal with C-style escapes, valid in Python, R,
    JavaScript, Octave (double quotes) and Julia (which also needs '$'
    escaped). Control characters become \xNN-free escapes: \n \t \r, others
    are dropped (environment values and paths do not carry them). */
static void s_quoted(kb_buf_t *buf, const char *text, bool escape_dollar)
{
    kb_buf_puts(buf, "\"");
    for (const char *p = text; *p; p++) {
        char c = *p;
        if (c == '"' || c == '\\' || (c == '$' && escape_dollar)) {
            char pair[3] = { '\\', c, 0 };
            kb_buf_puts(buf, pair);
        } else if (c == '\n')
            kb_buf_puts(buf, "\\n");
        else if (c == '\t')
            kb_buf_puts(buf, "\\t");
        else if (c == '\r')
            kb_buf_puts(buf, "\\r");
        else if ((unsigned char)c >= 0x20)
            kb_buf_putc(buf, c);
    }
    kb_buf_puts(buf, "\"");
}

/*  A single-quoted shell word: ' becomes '\''. */
static void s_shell_quoted(kb_buf_t *buf, const char *text)
{
    kb_buf_puts(buf, "'");
    for (const char *p = text; *p; p++) {
        if (*p == '\'')
            kb_buf_puts(buf, "'\\''");
        else
            kb_buf_putc(buf, *p);
    }
    kb_buf_puts(buf, "'");
}

/*  "a", "b", ... : the names (keys) or values of env, quoted. */
static void s_list(kb_buf_t *buf, const json_t *env, bool values, bool escape_dollar)
{
    const char *key;
    json_t *value;
    bool first = true;
    json_object_foreach((json_t *)env, key, value)
    {
        if (!first)
            kb_buf_puts(buf, ", ");
        first = false;
        s_quoted(buf, values ? json_string_value(value) : key, escape_dollar);
    }
}

static void s_cwd_or(kb_buf_t *buf, const char *cwd, const char *none, bool escape_dollar)
{
    if (cwd)
        s_quoted(buf, cwd, escape_dollar);
    else
        kb_buf_puts(buf, none);
}

/* ---- Python --------------------------------------------------------------- */

static void s_python_apply(kb_buf_t *b, const char *cwd, const json_t *env)
{
    kb_buf_puts(b, "(lambda o, c, k, v: (o.__dict__.setdefault('_kb_saved', []).append("
                   "(o.getcwd(), {n: o.environ.get(n) for n in k})), "
                   "o.environ.update(dict(zip(k, v))), "
                   "o.chdir(c) if c is not None else None))(__import__('os'), ");
    s_cwd_or(b, cwd, "None", false);
    kb_buf_puts(b, ", [");
    s_list(b, env, false, false);
    kb_buf_puts(b, "], [");
    s_list(b, env, true, false);
    kb_buf_puts(b, "])");
}

static const char s_python_restore[]
    = "(lambda o: (lambda s: (o.chdir(s[0]), [o.environ.pop(n, None) if v is None else "
      "o.environ.__setitem__(n, v) for n, v in s[1].items()]))(o.__dict__['_kb_saved'].pop()) "
      "if o.__dict__.get('_kb_saved') else None)(__import__('os'))";

/* ---- R ---------------------------------------------------------------------- */

static void s_r_apply(kb_buf_t *b, const char *cwd, const json_t *env)
{
    /*  IRkernel reports no error of a silent request (its status is "ok"),
        but an interrupt condition makes the reply "abort": a cwd that does
        not exist is refused that way, before anything is saved or changed,
        so that the code is not run. (Without IRkernel's handler, stop().) */
    kb_buf_puts(b, "local({ c <- ");
    s_cwd_or(b, cwd, "NULL", false);
    kb_buf_puts(b, "; if (!is.null(c) && !dir.exists(c)) { m <- paste(\"cannot change working "
                   "directory: no such directory:\", c); signalCondition(structure(class = "
                   "c(\"interrupt\", \"condition\"), list(message = m, call = NULL))); stop(m) }; "
                   "k <- as.character(c(");
    s_list(b, env, false, false);
    kb_buf_puts(b, ")); v <- as.character(c(");
    s_list(b, env, true, false);
    kb_buf_puts(b, ")); s <- getOption(\"kb.saved\", list()); "
                   "s[[length(s) + 1]] <- list(getwd(), Sys.getenv(k, unset = NA, names = TRUE)); "
                   "options(kb.saved = s); "
                   "if (length(k)) do.call(Sys.setenv, as.list(setNames(v, k))); "
                   "if (!is.null(c)) setwd(c); invisible(NULL) })");
}

static const char s_r_restore[]
    = "local({ s <- getOption(\"kb.saved\", list()); if (length(s)) { t <- s[[length(s)]]; "
      "options(kb.saved = s[-length(s)]); setwd(t[[1]]); v <- t[[2]]; "
      "for (n in names(v)) if (is.na(v[[n]])) Sys.unsetenv(n) else "
      "do.call(Sys.setenv, setNames(list(v[[n]]), n)) }; invisible(NULL) })";

/* ---- JavaScript / TypeScript (Deno, Node-based kernels) --------------------------- */

static void s_js_apply(kb_buf_t *b, const char *cwd, const json_t *env)
{
    /*  Plain JavaScript (also valid TypeScript) for Deno and Node runtimes.
        The saved stack is keyed by a registered symbol, so that it is not
        among the enumerable names of the global object. */
    kb_buf_puts(b, "((c, k, v) => { const g = globalThis; const D = g.Deno; const P = g.process; "
                   "const K = Symbol.for(\"kernelbridge.saved\"); "
                   "const get = (n) => D ? D.env.get(n) : P.env[n]; "
                   "const set = (n, x) => { if (D) D.env.set(n, x); else P.env[n] = x; }; "
                   "const cwd = () => D ? D.cwd() : P.cwd(); "
                   "const chdir = (d) => { if (D) D.chdir(d); else P.chdir(d); }; "
                   "(g[K] = g[K] || []).push([cwd(), k.map((n) => [n, get(n)])]); "
                   "k.forEach((n, i) => set(n, v[i])); if (c !== null) chdir(c); })(");
    s_cwd_or(b, cwd, "null", false);
    kb_buf_puts(b, ", [");
    s_list(b, env, false, false);
    kb_buf_puts(b, "], [");
    s_list(b, env, true, false);
    kb_buf_puts(b, "]);");
}

static const char s_js_restore[]
    = "(() => { const g = globalThis; const D = g.Deno; const P = g.process; "
      "const s = (g[Symbol.for(\"kernelbridge.saved\")] || []).pop(); if (!s) return; "
      "if (D) D.chdir(s[0]); else P.chdir(s[0]); "
      "for (const [n, x] of s[1]) { if (x === undefined) { if (D) D.env.delete(n); "
      "else delete P.env[n]; } else if (D) D.env.set(n, x); else P.env[n] = x; } })();";

/* ---- Octave ----------------------------------------------------------------------- */

static void s_octave_apply(kb_buf_t *b, const char *cwd, const json_t *env)
{
    /*  getenv cannot tell unset from empty: an empty saved value is restored
        as unset. Temporaries are cleared so that the workspace is as before.
        octave_kernel (0.32, on metakernel) answers every silent request with
        status "ok", Octave errors and interrupts included, so a failure here
        cannot fail the run: a cwd that does not exist is checked first and
        then nothing is applied (the code runs as if no cwd/env were given). */
    kb_buf_puts(b, "kb__c = ");
    s_cwd_or(b, cwd, "''", false);
    kb_buf_puts(b, "; if ~isempty(kb__c) && ~isfolder(kb__c), clear kb__c; "
                   "error('cannot change working directory: no such directory'); end; "
                   "kb__k = {");
    s_list(b, env, false, false);
    kb_buf_puts(b, "}; kb__v = {");
    s_list(b, env, true, false);
    kb_buf_puts(b, "}; kb__o = cellfun(@getenv, kb__k, 'UniformOutput', false); "
                   "kb__s = getappdata(0, 'kb_saved'); if isempty(kb__s) kb__s = {}; end; "
                   "kb__s{end + 1} = {pwd(), kb__k, kb__o}; setappdata(0, 'kb_saved', kb__s); "
                   "for kb__i = 1:numel(kb__k) setenv(kb__k{kb__i}, kb__v{kb__i}); end; "
                   "clear kb__k kb__v kb__o kb__s kb__i; "
                   "if ~isempty(kb__c) kb__d = kb__c; clear kb__c; cd(kb__d); clear kb__d; "
                   "else clear kb__c; end");
}

static const char s_octave_restore[]
    = "kb__s = getappdata(0, 'kb_saved'); if ~isempty(kb__s) kb__t = kb__s{end}; "
      "setappdata(0, 'kb_saved', kb__s(1:end - 1)); cd(kb__t{1}); "
      "for kb__i = 1:numel(kb__t{2}) if isempty(kb__t{3}{kb__i}) unsetenv(kb__t{2}{kb__i}); "
      "else setenv(kb__t{2}{kb__i}, kb__t{3}{kb__i}); end; end; clear kb__t kb__i; end; "
      "clear kb__s";

/* ---- bash ------------------------------------------------------------------------- */

/*  A name bash can hold as a variable: [A-Za-z_][A-Za-z0-9_]*. */
static bool s_shell_name(const char *name)
{
    static const char first[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_";
    static const char rest[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789";
    return *name && strchr(first, *name) && strspn(name, rest) == strlen(name);
}

static void s_bash_apply(kb_buf_t *b, const char *cwd, const json_t *env)
{
    /*  Every name, value and path is one single-quoted word, so nothing in
        them is expanded or parsed ($, backticks, quotes, newlines). What is
        saved, on two stacks pushed together: $PWD, and a line of commands
        (printf %q) that puts each variable back or unsets it; no subshell,
        so no fork. A name bash cannot hold fails the run before anything
        is saved; a missing cwd fails the cd, after the save, and the
        restore puts back what was saved. CDPATH is ignored for these cd's. */
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)env, key, value)
    {
        if (!s_shell_name(key)) {
            kb_buf_puts(b, "printf 'cannot set %s: not a shell variable name\\n' ");
            s_shell_quoted(b, key);
            kb_buf_puts(b, " >&2; false");
            return;
        }
    }
    kb_buf_puts(b, "__kb_e=''; for __kb_n in");
    json_object_foreach((json_t *)env, key, value)
    {
        kb_buf_puts(b, " ");
        kb_buf_puts(b, key);
    }
    kb_buf_puts(b,
                "; do if [ -n \"${!__kb_n+x}\" ]; then printf -v __kb_e '%sexport %q=%q; ' "
                "\"$__kb_e\" \"$__kb_n\" \"${!__kb_n}\"; else printf -v __kb_e '%sunset -v %q; ' "
                "\"$__kb_e\" \"$__kb_n\"; fi; done; __kb_saved+=(\"$PWD\"); "
                "__kb_saved_env+=(\"$__kb_e\"); unset -v __kb_e __kb_n; true");
    json_object_foreach((json_t *)env, key, value)
    {
        kb_buf_puts(b, " && export ");
        kb_buf_puts(b, key);
        kb_buf_puts(b, "=");
        s_shell_quoted(b, json_string_value(value));
    }
    if (cwd) {
        kb_buf_puts(b, " && CDPATH= cd -- ");
        s_shell_quoted(b, cwd);
    }
}

static const char s_bash_restore[]
    = "if [ ${#__kb_saved[@]} -gt 0 ]; then CDPATH= cd -- \"${__kb_saved[-1]}\"; "
      "eval \"${__kb_saved_env[-1]}\"; unset -v '__kb_saved[-1]' '__kb_saved_env[-1]'; fi";

/* ---- Julia -------------------------------------------------------------------------- */

static void s_julia_apply(kb_buf_t *b, const char *cwd, const json_t *env)
{
    kb_buf_puts(b, "let k = String[");
    s_list(b, env, false, true);
    kb_buf_puts(b, "], v = String[");
    s_list(b, env, true, true);
    kb_buf_puts(b, "], c = ");
    s_cwd_or(b, cwd, "nothing", true);
    kb_buf_puts(b,
                "; isdefined(Main, :__kb_saved) || Core.eval(Main, :(const __kb_saved = Any[])); "
                "push!(Main.__kb_saved, (pwd(), [(n, get(ENV, n, nothing)) for n in k])); "
                "for (n, x) in zip(k, v); ENV[n] = x; end; c === nothing || cd(c); nothing end");
}

static const char s_julia_restore[]
    = "let; if isdefined(Main, :__kb_saved) && !isempty(Main.__kb_saved); "
      "s = pop!(Main.__kb_saved); cd(s[1]); for (n, x) in s[2]; "
      "x === nothing ? delete!(ENV, n) : (ENV[n] = x); end; end; nothing end";

/* ---- the table -------------------------------------------------------------------- */

typedef struct {
    const char *language;
    void (*apply)(kb_buf_t *buf, const char *cwd, const json_t *env);
    const char *restore;
} kb_adapter_t;

static const kb_adapter_t s_adapters[] = {
    { "python", s_python_apply, s_python_restore }, { "r", s_r_apply, s_r_restore },
    { "javascript", s_js_apply, s_js_restore },     { "typescript", s_js_apply, s_js_restore },
    { "octave", s_octave_apply, s_octave_restore }, { "matlab", s_octave_apply, s_octave_restore },
    { "bash", s_bash_apply, s_bash_restore },       { "julia", s_julia_apply, s_julia_restore },
    { "sh", s_bash_apply, s_bash_restore },         { "shell", s_bash_apply, s_bash_restore },
};

static const kb_adapter_t *s_find(const char *language)
{
    for (size_t i = 0; i < sizeof s_adapters / sizeof s_adapters[0]; i++)
        if (strcasecmp(s_adapters[i].language, language) == 0)
            return &s_adapters[i];
    return NULL;
}

bool kb_adapter_supported(const char *language)
{
    return s_find(language) != NULL;
}

char *kb_adapter_apply_code(const char *language, const char *cwd, const json_t *env)
{
    const kb_adapter_t *adapter = s_find(language);
    assert(adapter);
    json_t *empty = env ? NULL : json_object();
    if (!env && !empty)
        return NULL;
    /* The appends fail sticky: one check, in kb_buf_take, for the lot. */
    kb_buf_t buf = KB_BUF_INIT;
    adapter->apply(&buf, cwd, env ? env : empty);
    json_decref(empty);
    return kb_buf_take(&buf, NULL);
}

char *kb_adapter_restore_code(const char *language)
{
    const kb_adapter_t *adapter = s_find(language);
    assert(adapter);
    return strdup(adapter->restore);
}
