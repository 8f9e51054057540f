/*  bench_scan.c - how fast kb_scan_stream reads stream content frames,
    next to jansson's json_loadb on the same bytes. Built with the tests
    but not registered with CTest: a timing says nothing on a busy
    machine, so it is run by hand on a Release build and read:

        cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release
        cmake --build build-release --target bench_scan
        build-release/bench_scan            # KB_BENCH_MIB=n: frame size

    Each figure is the best of several rounds, in GB/s of frame bytes. */
#include "wire/kb_scan.h"

#include "kb_testutil.h"

#include <jansson.h>
#include <stdint.h>

#define ROUNDS 7

typedef struct {
    char *data;
    size_t len;
} frame_t;

/*  {"name":"stdout","text":"..."} with about size bytes of text, made of
    lines of line_len bytes (each ending in an escaped newline) drawn from
    alphabet, whose characters are char_len bytes each. */
static frame_t make_frame(size_t size, size_t line_len, const char *alphabet, size_t char_len)
{
    const char *head = "{\"name\":\"stdout\",\"text\":\"";
    size_t head_len = strlen(head), chars = strlen(alphabet) / char_len;
    frame_t f = { malloc(head_len + size + size / 8 + 64), 0 };
    memcpy(f.data, head, head_len);
    f.len = head_len;
    for (size_t column = 0, i = 0; f.len < head_len + size; i++) {
        if (line_len && column + char_len > line_len) {
            memcpy(f.data + f.len, "\\n", 2);
            f.len += 2;
            column = 0;
            continue;
        }
        memcpy(f.data + f.len, alphabet + (i * 7 % chars) * char_len, char_len);
        f.len += char_len;
        column += char_len;
    }
    memcpy(f.data + f.len, "\"}", 2);
    f.len += 2;
    return f;
}

static double best_scan(const frame_t *f, size_t max, size_t repeat, size_t *text_bytes)
{
    kb_buf_t out = KB_BUF_INIT;
    double best = 1e9;
    for (int round = 0; round < ROUNDS; round++) {
        double start = kb_test_now();
        for (size_t r = 0; r < repeat; r++) {
            kb_buf_reset(&out); /* the allocation stays, as in a daemon's run */
            kb_scan_stream_t res;
            if (kb_scan_stream(f->data, f->len, max, &out, &res, NULL) != 0)
                abort();
            *text_bytes = res.text_bytes;
        }
        double seconds = kb_test_now() - start;
        if (seconds < best)
            best = seconds;
    }
    kb_buf_free(&out);
    return (double)f->len * (double)repeat / best / 1e9;
}

static double best_jansson(const frame_t *f, size_t repeat)
{
    double best = 1e9;
    for (int round = 0; round < 3; round++) {
        double start = kb_test_now();
        for (size_t r = 0; r < repeat; r++) {
            json_error_t error;
            json_t *value = json_loadb(f->data, f->len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &error);
            if (!value)
                abort();
            json_decref(value);
        }
        double seconds = kb_test_now() - start;
        if (seconds < best)
            best = seconds;
    }
    return (double)f->len * (double)repeat / best / 1e9;
}

static void row(const char *what, const frame_t *f, size_t repeat, bool jansson)
{
    size_t text = 0, capped = 0;
    double all = best_scan(f, SIZE_MAX, repeat, &text);
    double cap = best_scan(f, (size_t)1 << 20, repeat, &capped);
    printf("| %-34s | %9zu | %8.2f | %8.2f |", what, f->len, all, cap);
    if (jansson)
        printf(" %8.2f |\n", best_jansson(f, repeat));
    else
        printf("        - |\n");
}

int main(void)
{
    const char *mib = getenv("KB_BENCH_MIB");
    size_t size = (size_t)(mib && *mib ? atoi(mib) : 64) << 20;
    const char *ascii = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:()";
    const char *cjk = "\xe4\xb8\xad\xe6\x96\x87\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xed\x95\x9c";
    /* GB/s of frame bytes: kept whole, kept to 1 MiB, and jansson's json_loadb */
    printf("| %-34s | %9s | %8s | %8s | %8s |\n", "frame", "bytes", "all", "1 MiB", "jansson");
    printf("|---|---:|---:|---:|---:|\n");
    frame_t plain = make_frame(size, 0, ascii, 1);
    row("ASCII, one line", &plain, 1, true);
    frame_t lines = make_frame(size, 80, ascii, 1);
    row("ASCII, lines of 80 (escaped \\n)", &lines, 1, true);
    frame_t wide = make_frame(size, 120, cjk, 3);
    row("CJK (3-byte UTF-8), lines of 120", &wide, 1, false);
    frame_t small = make_frame(200, 80, ascii, 1);
    row("ASCII, 200 bytes (x 100000)", &small, 100000, true);
    free(plain.data);
    free(lines.data);
    free(wide.data);
    free(small.data);
    return 0;
}
