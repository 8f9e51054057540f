/*  test_buf.c - src/util: the byte buffer (kb_buf), the growth rule, and
    the arrays (kb_vec, kb_strv), including the paths where they refuse to
    grow: over a cap, a size that does not fit, an allocation that fails. */
#include "kb_testutil.h"
#include "util/kb_buf.h"
#include "util/kb_vec.h"

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/*  A failed allocation must come back as NULL, as it does without ASan,
    so that the out-of-memory paths run under the sanitizer too. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

/*  More than any address space holds: realloc must refuse it. */
#define HUGE_BYTES ((size_t)1 << 62)

static void test_empty(void)
{
    kb_buf_t buf = KB_BUF_INIT;
    CHECK(buf.data == NULL && buf.len == 0);
    CHECK_STR(kb_buf_cstr(&buf), "");
    CHECK(kb_buf_status(&buf) == KB_BUF_OK);
    size_t len = 99;
    char *text = kb_buf_take(&buf, &len);
    CHECK_STR(text, "");
    CHECK(len == 0);
    free(text);
    CHECK(kb_buf_append(&buf, "", 0) == KB_BUF_OK);
    CHECK(buf.data && buf.data[0] == '\0'); /* the NUL is kept from the first growth */
    kb_buf_free(&buf);
    kb_buf_free(&buf); /* twice is fine */
    kb_buf_free(NULL);
}

static void test_append(void)
{
    kb_buf_t buf = KB_BUF_INIT;
    CHECK(kb_buf_puts(&buf, "hello") == KB_BUF_OK);
    CHECK(kb_buf_putc(&buf, ',') == KB_BUF_OK);
    CHECK(kb_buf_append(&buf, " w\0rld", 6) == KB_BUF_OK);
    CHECK(buf.len == 12 && buf.data[12] == '\0');
    CHECK(memcmp(buf.data, "hello, w\0rld", 12) == 0);
    kb_buf_reset(&buf);
    CHECK(buf.len == 0 && buf.data && buf.data[0] == '\0' && buf.alloc > 0);
    /* printf into the room there is, and past it (a regrowth mid-format) */
    CHECK(kb_buf_printf(&buf, "%d-%s", 42, "x") == KB_BUF_OK);
    CHECK_STR(buf.data, "42-x");
    char wide[300];
    memset(wide, 'w', sizeof wide - 1);
    wide[sizeof wide - 1] = '\0';
    CHECK(kb_buf_printf(&buf, "[%s]", wide) == KB_BUF_OK);
    CHECK(buf.len == 4 + 2 + 299 && buf.data[buf.len] == '\0');
    CHECK(buf.data[5] == 'w' && buf.data[buf.len - 1] == ']');
    size_t len = 0;
    char *text = kb_buf_take(&buf, &len);
    CHECK(text && len == 305 && strlen(text) == 305);
    free(text);
    CHECK(buf.data == NULL && buf.len == 0 && buf.alloc == 0);
    char *made = kb_buf_sprintf("%s=%d", "n", 7);
    CHECK_STR(made, "n=7");
    free(made);
}

static void test_amortised_growth(void)
{
    /* One byte at a time: every allocation at least doubles the last, so
       a million appends cost about twenty reallocations. */
    kb_buf_t buf = KB_BUF_INIT;
    size_t growths = 0, last = 0;
    for (size_t i = 0; i < 1000000; i++) {
        CHECK(kb_buf_putc(&buf, (char)('a' + i % 26)) == KB_BUF_OK);
        if (buf.alloc != last) {
            CHECK(last == 0 || buf.alloc >= 2 * last);
            last = buf.alloc;
            growths++;
        }
    }
    CHECK(growths <= 16);
    CHECK(buf.alloc < 2 * (buf.len + 1) + 64); /* never far past what is used */
    CHECK(buf.data[999999] == (char)('a' + 999999 % 26) && buf.data[1000000] == '\0');
    kb_buf_trim(&buf, 4096);
    CHECK(buf.len == 0 && buf.alloc == 4096 && buf.data[0] == '\0');
    CHECK(kb_buf_puts(&buf, "again") == KB_BUF_OK);
    kb_buf_trim(&buf, 0);
    CHECK(buf.data == NULL && buf.alloc == 0);
    kb_buf_free(&buf);
}

/*  The page holding p is in memory (mincore). */
static bool s_present(const void *p)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    unsigned char in = 0;
    CHECK(mincore((void *)((uintptr_t)p & ~(page - 1)), 1, &in) == 0);
    return in & 1;
}

static void test_big_buffer_faulted_ahead(void)
{
    /*  Linux before 5.14 has no MADV_POPULATE_WRITE: appends then fault
        page by page, as before, and there is nothing to see. */
    void *probe = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(probe != MAP_FAILED);
    int rc = madvise(probe, 8192, MADV_POPULATE_WRITE);
    munmap(probe, 8192);
    if (rc != 0 && errno == EINVAL) {
        printf("  (this kernel has no MADV_POPULATE_WRITE: nothing to check)\n");
        return;
    }
    const size_t mib = 1u << 20;
    char line[1024];
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 1] = '\n';
    kb_buf_t buf = KB_BUF_INIT;
    size_t crossings = 0;
    while (buf.len < 9 * mib) {
        size_t before = buf.len;
        CHECK(kb_buf_append(&buf, line, sizeof line) == KB_BUF_OK);
        if (buf.alloc < 4 * mib || before / (2 * mib) == buf.len / (2 * mib))
            continue;
        /* crossed into another 2 MiB of a big buffer: what follows is there */
        crossings++;
        CHECK(s_present(buf.data + buf.len + 1));
        CHECK(s_present(buf.data + buf.len + mib));
        CHECK(s_present(buf.data + buf.len + 2 * mib - 4096));
    }
    CHECK(crossings == 4); /* at 2 (the buffer just grew to 4 MiB), 4, 6 and 8 MiB */
    /* no more than 2 MiB past the contents: the rest of the allocation is untouched */
    CHECK(buf.alloc >= 16 * mib);
    CHECK(!s_present(buf.data + 12 * mib));
    CHECK(!s_present(buf.data + buf.alloc - 1));
    for (size_t at = 0; at < buf.len; at += sizeof line)
        CHECK(memcmp(buf.data + at, line, sizeof line) == 0);
    CHECK(buf.data[buf.len] == '\0');
    kb_buf_free(&buf);
}

static void test_cap(void)
{
    kb_buf_t buf;
    kb_buf_init(&buf, 10);
    CHECK(kb_buf_puts(&buf, "0123456789") == KB_BUF_OK); /* exactly the cap */
    CHECK(buf.alloc <= 11);                              /* never more than cap + NUL */
    CHECK(kb_buf_putc(&buf, 'x') == KB_BUF_OVER_CAP);
    CHECK_STR(buf.data, "0123456789"); /* left as it was */
    /* sticky: nothing goes in until the buffer is emptied */
    CHECK(kb_buf_append(&buf, "", 0) == KB_BUF_OVER_CAP);
    CHECK(kb_buf_status(&buf) == KB_BUF_OVER_CAP);
    CHECK(kb_buf_code(kb_buf_status(&buf)) == KB_ERR_PAYLOAD_TOO_LARGE);
    CHECK(kb_buf_take(&buf, NULL) == NULL); /* a failed build hands out nothing */
    CHECK(buf.data == NULL && buf.cap == 10 && kb_buf_status(&buf) == KB_BUF_OK);

    CHECK(kb_buf_printf(&buf, "%s", "01234") == KB_BUF_OK);
    CHECK(kb_buf_printf(&buf, "%s", "567890") == KB_BUF_OVER_CAP);
    CHECK_STR(buf.data, "01234"); /* the partial output was not kept */
    kb_buf_reset(&buf);
    CHECK(kb_buf_status(&buf) == KB_BUF_OK && buf.len == 0);
    CHECK(kb_buf_reserve(&buf, 11) == KB_BUF_OVER_CAP);
    kb_buf_reset(&buf);

    json_t *value = json_pack("{s:s}", "key", "a long value");
    CHECK(kb_buf_puts(&buf, "ab") == KB_BUF_OK);
    CHECK(kb_buf_append_json(&buf, value, JSON_COMPACT) == KB_BUF_OVER_CAP);
    CHECK(buf.len == 2 && strcmp(buf.data, "ab") == 0); /* no half a dump */
    kb_buf_free(&buf);
    CHECK(buf.cap == 10);
    kb_buf_init(&buf, 0);
    CHECK(kb_buf_append_json(&buf, value, JSON_COMPACT) == KB_BUF_OK);
    CHECK(kb_buf_putc(&buf, ' ') == KB_BUF_OK);
    CHECK(kb_buf_append_json(&buf, NULL, 0) == KB_BUF_OK);
    CHECK_STR(buf.data, "{\"key\":\"a long value\"} null");
    json_decref(value);
    kb_buf_free(&buf);
}

static void test_out_of_memory(void)
{
    kb_buf_t buf = KB_BUF_INIT;
    CHECK(kb_buf_puts(&buf, "kept") == KB_BUF_OK);
    /* A size that cannot be counted fails before any allocation. */
    CHECK(kb_buf_reserve(&buf, SIZE_MAX) == KB_BUF_NOMEM);
    CHECK_STR(buf.data, "kept");
    kb_buf_reset(&buf);
    CHECK(kb_buf_puts(&buf, "kept") == KB_BUF_OK);
    /* One that can be counted but not allocated fails in realloc. */
    CHECK(kb_buf_reserve(&buf, HUGE_BYTES) == KB_BUF_NOMEM);
    CHECK_STR(buf.data, "kept");
    CHECK(buf.alloc < 4096);
    CHECK(kb_buf_puts(&buf, "more") == KB_BUF_NOMEM); /* sticky */
    CHECK(kb_buf_code(kb_buf_status(&buf)) == KB_ERR_INTERNAL);
    CHECK_STR(kb_buf_status_str(kb_buf_status(&buf)), "out of memory");
    CHECK(kb_buf_take(&buf, NULL) == NULL);
    CHECK(kb_buf_puts(&buf, "fresh") == KB_BUF_OK);
    CHECK_STR(buf.data, "fresh");
    kb_buf_free(&buf);

    /* A log drops what does not fit and takes what comes next. */
    kb_buf_init(&buf, 8);
    CHECK(kb_buf_puts(&buf, "abc") == KB_BUF_OK);
    CHECK(kb_buf_puts(&buf, "0123456789") == KB_BUF_OVER_CAP);
    kb_buf_recover(&buf);
    CHECK(kb_buf_status(&buf) == KB_BUF_OK);
    CHECK(kb_buf_puts(&buf, "de") == KB_BUF_OK);
    CHECK_STR(buf.data, "abcde");
    kb_buf_free(&buf);

    CHECK(kb_buf_code(KB_BUF_OK) == KB_OK);
    CHECK_STR(kb_buf_status_str(KB_BUF_OVER_CAP), "over the size limit");
}

static void test_truncate(void)
{
    kb_buf_t buf = KB_BUF_INIT;
    kb_buf_truncate(&buf, 0); /* nothing allocated yet */
    CHECK_STR(kb_buf_cstr(&buf), "");
    CHECK(kb_buf_append(&buf, "abc\0def", 7) == KB_BUF_OK);
    size_t alloc = buf.alloc;
    kb_buf_truncate(&buf, 4);
    CHECK(buf.len == 4 && buf.data[3] == '\0' && buf.data[4] == '\0' && buf.alloc == alloc);
    CHECK(kb_buf_puts(&buf, "x") == KB_BUF_OK);
    CHECK(buf.len == 5 && memcmp(buf.data, "abc\0x", 6) == 0);
    kb_buf_free(&buf);

    /* A failure stays: truncating undoes contents, not a failed write. */
    kb_buf_init(&buf, 4);
    CHECK(kb_buf_puts(&buf, "ab") == KB_BUF_OK);
    CHECK(kb_buf_puts(&buf, "cdef") == KB_BUF_OVER_CAP);
    kb_buf_truncate(&buf, 1);
    CHECK_STR(kb_buf_cstr(&buf), "a");
    CHECK(kb_buf_status(&buf) == KB_BUF_OVER_CAP);
    kb_buf_free(&buf);
}

static void test_overwrite(void)
{
    kb_buf_t buf = KB_BUF_INIT;
    kb_buf_overwrite(&buf, 0, NULL, 0); /* nothing allocated yet */
    CHECK(kb_buf_append(&buf, "0000tail", 8) == KB_BUF_OK);
    kb_buf_overwrite(&buf, 1, "ab", 2);
    kb_buf_overwrite(&buf, 8, "", 0);
    CHECK(buf.len == 8 && memcmp(buf.data, "0ab0tail", 9) == 0);
    kb_buf_free(&buf);
}

static void test_take_room_and_fit(void)
{
    kb_buf_t room, buf;
    kb_buf_init(&room, 0);
    kb_buf_init(&buf, 0);
    CHECK(kb_buf_reserve(&room, 1 << 20) == KB_BUF_OK);
    CHECK(kb_buf_append(&room, "old contents", 12) == KB_BUF_OK);
    CHECK(kb_buf_append(&buf, "a\0bc", 4) == KB_BUF_OK);
    char *big = room.data;
    size_t big_alloc = room.alloc;
    /* buf takes room's allocation: its own contents, room's gone */
    CHECK(kb_buf_take_room(&buf, &room));
    CHECK(buf.data == big && buf.alloc == big_alloc && buf.len == 4);
    CHECK(memcmp(buf.data, "a\0bc", 5) == 0); /* and the NUL */
    CHECK(room.data == NULL && room.alloc == 0 && room.len == 0);
    /* nothing to take, or not larger: nothing changes */
    CHECK(!kb_buf_take_room(&buf, &room));
    kb_buf_t small = KB_BUF_INIT;
    CHECK(kb_buf_append(&small, "xy", 2) == KB_BUF_OK);
    CHECK(!kb_buf_take_room(&buf, &small));
    CHECK(buf.data == big && small.len == 2 && strcmp(small.data, "xy") == 0);
    /* an empty buffer takes room too */
    kb_buf_t empty = KB_BUF_INIT;
    CHECK(kb_buf_take_room(&empty, &small) && empty.len == 0 && empty.data[0] == '\0');
    CHECK(small.data == NULL);
    kb_buf_free(&empty);
    /* fit: what is beyond the contents goes when over the slack */
    CHECK(kb_buf_append(&buf, "defg", 4) == KB_BUF_OK);
    kb_buf_fit(&buf, big_alloc); /* within the slack: kept */
    CHECK(buf.alloc == big_alloc);
    kb_buf_fit(&buf, 16);
    CHECK(buf.alloc == 9 && buf.len == 8 && memcmp(buf.data, "a\0bcdefg", 9) == 0);
    CHECK(kb_buf_append(&buf, "h", 1) == KB_BUF_OK && strcmp(buf.data + 4, "defgh") == 0);
    kb_buf_free(&buf);
    kb_buf_t none = KB_BUF_INIT;
    kb_buf_fit(&none, 0); /* no allocation: nothing to do */
    CHECK(none.data == NULL);
}

static void test_written(void)
{
    kb_buf_t buf = KB_BUF_INIT;
    CHECK(kb_buf_written(&buf) == 0);
    CHECK(kb_buf_append(&buf, "abc", 3) == KB_BUF_OK);
    CHECK(kb_buf_written(&buf) == buf.alloc); /* small: all of it */
    kb_buf_free(&buf);
    /* big: the contents and the fault-ahead after them, within the allocation */
    CHECK(kb_buf_reserve(&buf, 4 * KB_BUF_AHEAD_FROM) == KB_BUF_OK);
    size_t alloc = buf.alloc;
    CHECK(alloc >= 4 * KB_BUF_AHEAD_FROM);
    char chunk[4096];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 256; i++)
        CHECK(kb_buf_append(&buf, chunk, sizeof chunk) == KB_BUF_OK);
    CHECK(buf.alloc == alloc && buf.len == (size_t)1 << 20);
    CHECK(kb_buf_written(&buf) == buf.len + KB_BUF_AHEAD);
    while (buf.len + KB_BUF_AHEAD < alloc)
        CHECK(kb_buf_append(&buf, chunk, sizeof chunk) == KB_BUF_OK);
    CHECK(buf.alloc == alloc && kb_buf_written(&buf) == alloc);
    kb_buf_free(&buf);
}

static void test_grow_rule(void)
{
    size_t alloc = 0;
    CHECK(kb_buf_grow_rule(0, 1, 64, 0, 1, &alloc) == KB_BUF_OK && alloc == 64);
    CHECK(kb_buf_grow_rule(64, 65, 64, 0, 1, &alloc) == KB_BUF_OK && alloc == 128);
    CHECK(kb_buf_grow_rule(64, 1000, 64, 0, 1, &alloc) == KB_BUF_OK && alloc == 1024);
    CHECK(kb_buf_grow_rule(128, 100, 64, 0, 1, &alloc) == KB_BUF_OK && alloc == 128);
    CHECK(kb_buf_grow_rule(64, 100, 64, 101, 1, &alloc) == KB_BUF_OK && alloc == 101);
    CHECK(kb_buf_grow_rule(64, 102, 64, 101, 1, &alloc) == KB_BUF_OVER_CAP);
    CHECK(kb_buf_grow_rule(0, SIZE_MAX / 8 + 1, 8, 0, 8, &alloc) == KB_BUF_NOMEM);
    /* Near the top doubling would wrap: exactly what is needed instead. */
    CHECK(kb_buf_grow_rule(64, SIZE_MAX - 1, 64, 0, 1, &alloc) == KB_BUF_OK
          && alloc == SIZE_MAX - 1);
}

static void test_vec(void)
{
    kb_vec_t vec = KB_VEC_INIT(sizeof(int));
    for (int i = 0; i < 1000; i++)
        CHECK(kb_vec_push(&vec, &i) == KB_BUF_OK);
    CHECK(vec.len == 1000 && vec.alloc >= 1000 && vec.alloc < 2048);
    CHECK(*(int *)kb_vec_at(&vec, 0) == 0 && *(int *)kb_vec_at(&vec, 999) == 999);
    CHECK(((int *)vec.items)[500] == 500);
    size_t alloc = vec.alloc;
    CHECK(kb_vec_reserve(&vec, SIZE_MAX / 2) == KB_BUF_NOMEM); /* bytes overflow */
    CHECK(kb_vec_reserve(&vec, HUGE_BYTES / sizeof(int)) == KB_BUF_NOMEM);
    CHECK(vec.len == 1000 && vec.alloc == alloc && ((int *)vec.items)[999] == 999);
    kb_vec_free(&vec);
    CHECK(vec.items == NULL && vec.len == 0 && vec.size == sizeof(int));
    kb_vec_free(NULL);

    kb_vec_init(&vec, sizeof(double), 3);
    double x = 1.5;
    for (int i = 0; i < 3; i++)
        CHECK(kb_vec_push(&vec, &x) == KB_BUF_OK);
    CHECK(kb_vec_push(&vec, &x) == KB_BUF_OVER_CAP);
    CHECK(vec.len == 3 && vec.alloc == 3);
    kb_vec_free(&vec);
}

static void test_strv(void)
{
    kb_strv_t strv = KB_STRV_INIT;
    char **empty = kb_strv_take(&strv);
    CHECK(empty && empty[0] == NULL);
    kb_strv_free(empty);

    CHECK(kb_strv_push(&strv, strdup("a")) == KB_BUF_OK);
    CHECK(kb_strv_pushn(&strv, "bcd", 2) == KB_BUF_OK);
    CHECK(kb_strv_push(&strv, NULL) == KB_BUF_NOMEM); /* a failed strdup */
    for (int i = 0; i < 100; i++)
        CHECK(kb_strv_push(&strv, kb_buf_sprintf("n%d", i)) == KB_BUF_OK);
    CHECK(strv.len == 102 && strv.items[102] == NULL);
    free(strv.items[0]); /* the owner may replace an item */
    strv.items[0] = strdup("A");
    char **items = kb_strv_take(&strv);
    CHECK(strv.items == NULL && strv.len == 0);
    CHECK_STR(items[0], "A");
    CHECK_STR(items[1], "bc");
    CHECK_STR(items[101], "n99");
    CHECK(items[102] == NULL);
    kb_strv_free(items);
    kb_strv_free(NULL);

    CHECK(kb_strv_push(&strv, strdup("x")) == KB_BUF_OK);
    kb_strv_clear(&strv);
    CHECK(strv.items == NULL && strv.len == 0);
    kb_strv_clear(NULL);
}

int main(void)
{
    RUN_TEST(test_empty);
    RUN_TEST(test_append);
    RUN_TEST(test_amortised_growth);
    RUN_TEST(test_big_buffer_faulted_ahead);
    RUN_TEST(test_cap);
    RUN_TEST(test_out_of_memory);
    RUN_TEST(test_truncate);
    RUN_TEST(test_overwrite);
    RUN_TEST(test_take_room_and_fit);
    RUN_TEST(test_written);
    RUN_TEST(test_grow_rule);
    RUN_TEST(test_vec);
    RUN_TEST(test_strv);
    return kb_test_summary();
}
