/*  test_vanished.c - the ids of vanished contexts (kb_vanished): why one
    vanished, by context id and by kernel id; forgotten when the id is used
    again; the oldest evicted past the cap (1000), and only the oldest. */
#include "kb_testutil.h"

#include "service/engine/kb_vanished.h"

#include <stdio.h>
#include <string.h>

#define KEPT 1000

static void test_remember_and_forget(void)
{
    kb_vanished_t *v = kb_vanished_new("sandbox-1");
    CHECK(v != NULL);
    CHECK(kb_vanished_why(v, "ctx-a") == NULL);
    CHECK(kb_vanished_remember(v, "ctx-a", "its kernel died") == 0);
    const char *why = kb_vanished_why(v, "ctx-a");
    CHECK(why && strstr(why, "context ctx-a vanished at ") && strstr(why, ": its kernel died"));
    kb_vanished_forget(v, "ctx-a");
    CHECK(kb_vanished_why(v, "ctx-a") == NULL);
    kb_vanished_forget(v, "never-there"); /* harmless */
    kb_vanished_destroy(&v);
    CHECK(v == NULL);
    kb_vanished_destroy(&v); /* safe on NULL */
}

/*  An id forgotten (its context made again) and vanished again counts once
    towards the cap: KEPT - 1 others after it do not evict it. */
static void test_an_id_used_again_is_kept_once(void)
{
    kb_vanished_t *v = kb_vanished_new("sandbox-1");
    CHECK(kb_vanished_remember(v, "again", "first end") == 0);
    kb_vanished_forget(v, "again");
    CHECK(kb_vanished_remember(v, "again", "second end") == 0);
    char id[32];
    for (int i = 0; i < KEPT - 1; i++) {
        snprintf(id, sizeof id, "other-%d", i);
        CHECK(kb_vanished_remember(v, id, "ended") == 0);
    }
    const char *why = kb_vanished_why(v, "again");
    CHECK(why && strstr(why, "second end"));
    CHECK(kb_vanished_why(v, "other-0") != NULL);
    /* One more evicts the oldest, "again", and nothing else. */
    CHECK(kb_vanished_remember(v, "last", "ended") == 0);
    CHECK(kb_vanished_why(v, "again") == NULL);
    CHECK(kb_vanished_why(v, "other-0") != NULL);
    CHECK(kb_vanished_why(v, "last") != NULL);
    kb_vanished_destroy(&v);
}

int main(void)
{
    RUN_TEST(test_remember_and_forget);
    RUN_TEST(test_an_id_used_again_is_kept_once);
    return kb_test_summary();
}
