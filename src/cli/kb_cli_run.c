/*  kb_cli_run.c - `kernelbridge run` and `kernelbridge kernelspecs`: the
    service used in-process, with no daemon. A run gets a fresh kernel that
    is destroyed afterwards; its stdout/stderr stream live, then the result
    is printed for a person, or as InterpreterResult JSON. */
#include <getopt.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/kb_cli.h"
#include "kernel/kb_kernelspec.h"
#include "kernelbridge.h"
#include "util/kb_buf.h"

enum {
    KB_EXIT_OK = 0,
    KB_EXIT_RAISED = 1,
    KB_EXIT_USAGE = 2,
    KB_EXIT_TIMEOUT = 3,
    KB_EXIT_KERNEL = 4
};

static void s_run_usage(FILE *out)
{
    fprintf(out, "usage: kernelbridge run [-l LANG | -k KERNEL] [--timeout S] [--cwd DIR]\n"
                 "                        [-e NAME=VALUE]... [--json] [--save-dir DIR] (CODE | -)\n"
                 "\n"
                 "Run CODE (or standard input, with -) in a fresh kernel, streaming its\n"
                 "stdout and stderr, then print the result.\n"
                 "\n"
                 "  -l, --language LANG   language of the kernel (default python)\n"
                 "  -k, --kernel NAME     kernelspec to use instead of a language\n"
                 "  -t, --timeout S       interrupt after S seconds, kill 2 s later\n"
                 "  -C, --cwd DIR         working directory of the kernel\n"
                 "  -e, --env NAME=VALUE  environment variable for the kernel (repeatable)\n"
                 "  -j, --json            print the InterpreterResult JSON only\n"
                 "  -s, --save-dir DIR    write PNG and SVG outputs there and print their paths\n"
                 "  -h, --help            this help\n"
                 "\n"
                 "exit status: 0 ok, 1 the code raised, 2 usage, 3 timeout, 4 kernel failure\n");
}

/*  All of in as a string; NULL on a read error or out of memory. */
static char *s_read_all(FILE *in)
{
    kb_buf_t text = KB_BUF_INIT;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, in)) > 0)
        if (kb_buf_append(&text, chunk, n) != KB_BUF_OK)
            break;
    if (ferror(in)) {
        kb_buf_free(&text);
        return NULL;
    }
    return kb_buf_take(&text, NULL); /* NULL when an append failed */
}

static void s_on_event(const kb_event_t *event, void *arg)
{
    bool quiet = *(bool *)arg;
    if (quiet)
        return;
    const char *text = json_string_value(json_object_get(event->data, "text"));
    if (event->type == KB_EVENT_STDOUT && text) {
        fputs(text, stdout);
        fflush(stdout);
    } else if ((event->type == KB_EVENT_STDERR || event->type == KB_EVENT_SYSTEM) && text) {
        fputs(text, stderr);
        if (event->type == KB_EVENT_SYSTEM)
            fputc('\n', stderr);
        fflush(stderr);
    }
}

/*  Decode base64 (as sent for image/png; line breaks allowed) into a file. */
static int s_write_base64(const char *path, const char *b64)
{
    size_t len = strlen(b64);
    unsigned char *raw = malloc(len / 4 * 3 + 4);
    EVP_ENCODE_CTX *ctx = EVP_ENCODE_CTX_new();
    int rc = -1, part = 0, last = 0;
    FILE *out = NULL;
    if (!raw || !ctx)
        goto done;
    EVP_DecodeInit(ctx);
    if (EVP_DecodeUpdate(ctx, raw, &part, (const unsigned char *)b64, (int)len) < 0
        || EVP_DecodeFinal(ctx, raw + part, &last) < 0)
        goto done;
    out = fopen(path, "wb");
    if (out && fwrite(raw, 1, (size_t)(part + last), out) == (size_t)(part + last))
        rc = 0;
done:
    if (out && fclose(out) != 0)
        rc = -1;
    EVP_ENCODE_CTX_free(ctx);
    free(raw);
    return rc;
}

static int s_write_text(const char *path, const char *text)
{
    FILE *out = fopen(path, "w");
    if (!out)
        return -1;
    fputs(text, out);
    return fclose(out);
}

static void s_print_readable(const kb_result_t *result, const char *save_dir)
{
    for (size_t i = 0; i < result->outputs_len; i++) {
        const kb_output_t *out = &result->outputs[i];
        const char *png = json_string_value(json_object_get(out->data, "image/png"));
        json_t *svg_value = json_object_get(out->data, "image/svg+xml");
        const char *svg = json_string_value(svg_value);
        const char *html = json_string_value(json_object_get(out->data, "text/html"));
        const char *text = json_string_value(json_object_get(out->data, "text/plain"));
        if (png || svg) {
            const char *ext = png ? "png" : "svg";
            if (save_dir) {
                char path[4096];
                snprintf(path, sizeof path, "%s/output-%zu.%s", save_dir, i + 1, ext);
                int rc = png ? s_write_base64(path, png) : s_write_text(path, svg);
                if (rc == 0)
                    printf("[%s saved to %s]\n", ext, path);
                else
                    printf("[%s: cannot write %s]\n", ext, path);
            } else
                printf("[%s image, %zu bytes; --save-dir DIR to save it]\n", ext,
                       png ? strlen(png) * 3 / 4 : strlen(svg));
        } else if (html && !text)
            printf("[html, %zu bytes]\n", strlen(html));
        else if (text)
            printf("%s%s\n", out->is_main_result ? "" : "", text);
        else {
            const char *mime;
            json_t *value;
            json_object_foreach(out->data, mime, value)
            {
                printf("[%s]\n", mime);
                break;
            }
        }
    }
    if (result->error) {
        for (size_t i = 0; i < result->error->traceback_len; i++)
            fprintf(stderr, "%s\n", result->error->traceback[i]);
        if (result->error->traceback_len == 0)
            fprintf(stderr, "%s: %s\n", result->error->name, result->error->value);
    }
    if (result->truncated)
        fprintf(stderr, "[output truncated]\n");
}

static int s_exit_code(const kb_result_t *result)
{
    switch (result->reason) {
        case KB_REASON_EXITED:
            return result->error ? KB_EXIT_RAISED : KB_EXIT_OK;
        case KB_REASON_TIMED_OUT:
            return KB_EXIT_TIMEOUT;
        default:
            return KB_EXIT_KERNEL;
    }
}

/*  What `run`'s command line says. env is owned; strings are borrowed. */
typedef struct {
    kb_run_opts_t opts;
    const char *save_dir;
    bool json_out;
    json_t *env;
} s_run_args_t;

/*  One option of `run`: 0, or -1 after a message (usage status). */
static int s_run_option(s_run_args_t *args, int c, char *value)
{
    switch (c) {
        case 'l':
            args->opts.language = value;
            return 0;
        case 'k':
            args->opts.kernel_name = value;
            return 0;
        case 't': {
            char *end;
            args->opts.timeout = strtod(value, &end);
            if (*end || args->opts.timeout < 0) {
                fprintf(stderr, "kernelbridge run: --timeout wants seconds, not '%s'\n", value);
                return -1;
            }
            return 0;
        }
        case 'C':
            args->opts.cwd = value;
            return 0;
        case 'e': {
            char *eq = strchr(value, '=');
            if (!eq || eq == value) {
                fprintf(stderr, "kernelbridge run: -e wants NAME=VALUE, not '%s'\n", value);
                return -1;
            }
            *eq = 0;
            json_object_set_new(args->env, value, json_string(eq + 1));
            *eq = '=';
            return 0;
        }
        case 'j':
            args->json_out = true;
            return 0;
        case 's':
            args->save_dir = value;
            return 0;
        default:
            s_run_usage(stderr);
            return -1;
    }
}

/*  The options of `run`, up to its code argument: 0, 1 after --help, -1
    after a message. */
static int s_parse_run_args(s_run_args_t *args, int argc, char **argv)
{
    static const struct option options[] = { { "language", required_argument, NULL, 'l' },
                                             { "kernel", required_argument, NULL, 'k' },
                                             { "timeout", required_argument, NULL, 't' },
                                             { "cwd", required_argument, NULL, 'C' },
                                             { "env", required_argument, NULL, 'e' },
                                             { "json", no_argument, NULL, 'j' },
                                             { "save-dir", required_argument, NULL, 's' },
                                             { "help", no_argument, NULL, 'h' },
                                             { NULL, 0, NULL, 0 } };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "l:k:t:C:e:js:h", options, NULL)) != -1) {
        if (c == 'h') {
            s_run_usage(stdout);
            return 1;
        }
        if (s_run_option(args, c, optarg) < 0)
            return -1;
    }
    if (args->opts.language && args->opts.kernel_name) {
        fprintf(stderr, "kernelbridge run: give -l or -k, not both\n");
        return -1;
    }
    if (optind != argc - 1) {
        s_run_usage(stderr);
        return -1;
    }
    return 0;
}

/*  Run opts in a service of this process and print the result. The exit
    status. */
static int s_run_in_process(const kb_run_opts_t *opts, bool json_out, const char *save_dir)
{
    kb_error_t err;
    kb_service_t *service = kb_service_new(NULL, &err);
    if (!service) {
        fprintf(stderr, "kernelbridge run: %s\n", err.message);
        return KB_EXIT_KERNEL;
    }
    int status;
    kb_result_t *result = kb_service_run(service, opts, s_on_event, &json_out, &err);
    if (!result) {
        fprintf(stderr, "kernelbridge run: %s: %s\n", kb_code_name(err.code), err.message);
        status = err.code == KB_ERR_LANGUAGE_NOT_SUPPORTED || err.code == KB_ERR_BAD_REQUEST
                     ? KB_EXIT_USAGE
                     : KB_EXIT_KERNEL;
    } else {
        if (json_out) {
            json_t *json = kb_result_to_json(result);
            json_dumpf(json, stdout, JSON_INDENT(2));
            fputc('\n', stdout);
            json_decref(json);
        } else
            s_print_readable(result, save_dir);
        status = s_exit_code(result);
        kb_result_destroy(&result);
    }
    kb_service_destroy(&service);
    return status;
}

int kb_cli_run(int argc, char **argv)
{
    s_run_args_t args = { .opts = { .isolated = true }, .env = json_object() };
    int status = KB_EXIT_USAGE;
    char *code = NULL;
    int parsed = s_parse_run_args(&args, argc, argv);
    if (parsed != 0) {
        status = parsed > 0 ? KB_EXIT_OK : KB_EXIT_USAGE;
        goto done;
    }
    code = strcmp(argv[optind], "-") == 0 ? s_read_all(stdin) : strdup(argv[optind]);
    if (!code) {
        fprintf(stderr, "kernelbridge run: cannot read the code\n");
        goto done;
    }
    const char *save_dir = args.save_dir;
    if (save_dir && mkdir(save_dir, 0755) != 0 && access(save_dir, W_OK) != 0) {
        fprintf(stderr, "kernelbridge run: cannot use --save-dir %s\n", save_dir);
        goto done;
    }
    args.opts.code = code;
    args.opts.env = json_object_size(args.env) ? args.env : NULL;
    status = s_run_in_process(&args.opts, args.json_out, save_dir);
done:
    json_decref(args.env);
    free(code);
    return status;
}

static void s_warn(const char *message, void *arg)
{
    fprintf(stderr, "warning: %s\n", message);
}

int kb_cli_kernelspecs(int argc, char **argv)
{
    bool json_out = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json_out = true;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: kernelbridge kernelspecs [--json]\n\n"
                   "List the installed Jupyter kernelspecs in search order.\n");
            return 0;
        } else {
            fprintf(stderr, "usage: kernelbridge kernelspecs [--json]\n");
            return 2;
        }
    }
    kb_kernelspecs_t *specs = kb_kernelspecs_discover(s_warn, NULL);
    if (json_out) {
        json_t *json = kb_kernelspecs_to_json(specs);
        json_dumpf(json, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(json);
    } else {
        printf("%-20s %-12s %-32s %s\n", "NAME", "LANGUAGE", "DISPLAY NAME", "RESOURCE DIR");
        for (size_t i = 0; i < kb_kernelspecs_size(specs); i++) {
            const kb_kernelspec_t *spec = kb_kernelspecs_at(specs, i);
            printf("%-20s %-12s %-32s %s\n", spec->name, spec->language, spec->display_name,
                   spec->resource_dir);
        }
    }
    kb_kernelspecs_destroy(&specs);
    return 0;
}
