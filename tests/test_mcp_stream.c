/*  test_mcp_stream.c - the resumable SSE streams of /mcp
    (src/server/kb_mcp_stream.c): event ids, the priming event, what a
    Last-Event-ID finds (the events after it; unknown ids; ids whose
    events were dropped past the bound; another session's ids), a reader
    taken over by a resume, the idle streams forgotten past the number
    kept. */
#include "kb_testutil.h"
#include "server/kb_mcp_stream.h"

#include <stdio.h>
#include <string.h>

static json_t *s_note(int i)
{
    json_t *message = json_pack("{s:s, s:s, s:{s:i}}", "jsonrpc", "2.0", "method",
                                "notifications/progress", "params", "progress", i);
    CHECK(message != NULL);
    return message;
}

static unsigned s_count(const char *text, const char *needle)
{
    unsigned n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_ids_and_resume(void)
{
    kb_mcp_streams_t *streams = kb_mcp_streams_new();
    kb_mcp_stream_t *stream = kb_mcp_streams_open(streams, "s1", false, true);
    unsigned long long n = (unsigned long long)kb_mcp_stream_number(stream);
    unsigned ticket = kb_mcp_stream_attach(streams, stream);
    for (int i = 1; i <= 3; i++)
        kb_mcp_stream_push(streams, stream, s_note(i));
    kb_buf_t out = KB_BUF_INIT;
    CHECK(kb_mcp_stream_read(streams, stream, ticket, 10, &out) == KB_MCP_READ_EVENTS);
    char id[64];
    snprintf(id, sizeof id, "id: %llu-1\ndata: \n\n", n); /* the priming event */
    CHECK(strncmp(kb_buf_cstr(&out), id, strlen(id)) == 0);
    snprintf(id, sizeof id, "id: %llu-4\nevent: message\ndata: {", n);
    CHECK(strstr(kb_buf_cstr(&out), id) != NULL);
    CHECK(s_count(kb_buf_cstr(&out), "id: ") == 4);
    kb_mcp_stream_detach(streams, stream, ticket);

    /* the client had up to 2: it gets 3 and 4, then the end */
    kb_mcp_stream_end(streams, stream);
    kb_mcp_stream_t *again = NULL;
    snprintf(id, sizeof id, "%llu-2", n);
    CHECK(kb_mcp_streams_resume(streams, "s1", id, &again) == KB_MCP_RESUME_OK);
    CHECK(again == stream);
    ticket = kb_mcp_stream_attach(streams, again);
    kb_buf_reset(&out);
    CHECK(kb_mcp_stream_read(streams, again, ticket, 10, &out) == KB_MCP_READ_FINISHED);
    CHECK(s_count(kb_buf_cstr(&out), "id: ") == 2);
    snprintf(id, sizeof id, "id: %llu-3\n", n);
    CHECK(strncmp(kb_buf_cstr(&out), id, strlen(id)) == 0);
    kb_mcp_stream_detach(streams, again, ticket);
    kb_mcp_stream_release(streams, &again);

    /* ids this server never gave the session */
    const char *unknown[] = { "", "x", "1", "1-", "-1", "1-2x", "99999-1", "1-1-1", NULL };
    for (const char **u = unknown; *u; u++) {
        CHECK(kb_mcp_streams_resume(streams, "s1", *u, &again) == KB_MCP_RESUME_UNKNOWN);
        CHECK(again == NULL);
    }
    snprintf(id, sizeof id, "%llu-99", n); /* not given yet */
    CHECK(kb_mcp_streams_resume(streams, "s1", id, &again) == KB_MCP_RESUME_UNKNOWN);
    snprintf(id, sizeof id, "%llu-2", n); /* another session's stream */
    CHECK(kb_mcp_streams_resume(streams, "s2", id, &again) == KB_MCP_RESUME_UNKNOWN);
    CHECK(again == NULL);

    /* the session ended: its streams are forgotten */
    kb_mcp_streams_forget_session(streams, "s1");
    CHECK(kb_mcp_streams_resume(streams, "s1", id, &again) == KB_MCP_RESUME_GONE);
    kb_mcp_stream_release(streams, &stream);
    kb_buf_free(&out);
    kb_mcp_streams_destroy(&streams);
    CHECK(streams == NULL);
}

static void test_bound(void)
{
    kb_mcp_streams_t *streams = kb_mcp_streams_new();
    kb_mcp_stream_t *stream = kb_mcp_streams_open(streams, "s1", false, false);
    unsigned long long n = (unsigned long long)kb_mcp_stream_number(stream);
    int total = KB_MCP_STREAM_EVENTS + 50;
    for (int i = 1; i <= total; i++)
        kb_mcp_stream_push(streams, stream, s_note(i));
    kb_mcp_stream_end(streams, stream);
    char id[64];
    kb_mcp_stream_t *again = NULL;
    snprintf(id, sizeof id, "%llu-10", n); /* 11.. were dropped in part */
    CHECK(kb_mcp_streams_resume(streams, "s1", id, &again) == KB_MCP_RESUME_GONE);
    CHECK(again == NULL);
    snprintf(id, sizeof id, "%llu-%d", n, total - 5);
    CHECK(kb_mcp_streams_resume(streams, "s1", id, &again) == KB_MCP_RESUME_OK);
    unsigned ticket = kb_mcp_stream_attach(streams, again);
    kb_buf_t out = KB_BUF_INIT;
    CHECK(kb_mcp_stream_read(streams, again, ticket, 10, &out) == KB_MCP_READ_FINISHED);
    CHECK(s_count(kb_buf_cstr(&out), "id: ") == 5);
    kb_mcp_stream_detach(streams, again, ticket);
    kb_mcp_stream_release(streams, &again);

    /* a reader that has not read what was dropped has lost the stream */
    kb_mcp_stream_t *slow = kb_mcp_streams_open(streams, "s1", false, false);
    ticket = kb_mcp_stream_attach(streams, slow);
    for (int i = 1; i <= KB_MCP_STREAM_EVENTS + 1; i++)
        kb_mcp_stream_push(streams, slow, s_note(i));
    kb_buf_reset(&out);
    CHECK(kb_mcp_stream_read(streams, slow, ticket, 10, &out) == KB_MCP_READ_LOST);
    kb_mcp_stream_detach(streams, slow, ticket);
    kb_mcp_stream_release(streams, &slow);
    kb_mcp_stream_release(streams, &stream);
    kb_buf_free(&out);
    kb_mcp_streams_destroy(&streams);
}

static void test_takeover_and_idle(void)
{
    kb_mcp_streams_t *streams = kb_mcp_streams_new();
    kb_mcp_stream_t *stream = kb_mcp_streams_open(streams, "s1", true, true);
    unsigned long long n = (unsigned long long)kb_mcp_stream_number(stream);
    unsigned old = kb_mcp_stream_attach(streams, stream);
    kb_buf_t out = KB_BUF_INIT;
    CHECK(kb_mcp_stream_read(streams, stream, old, 10, &out) == KB_MCP_READ_EVENTS);
    CHECK(kb_mcp_stream_read(streams, stream, old, 10, &out) == KB_MCP_READ_IDLE);
    /* a resume while the old connection still reads: the new one wins */
    char id[64];
    snprintf(id, sizeof id, "%llu-1", n);
    kb_mcp_stream_t *again = NULL;
    CHECK(kb_mcp_streams_resume(streams, "s1", id, &again) == KB_MCP_RESUME_OK);
    unsigned ticket = kb_mcp_stream_attach(streams, again);
    CHECK(kb_mcp_stream_read(streams, stream, old, 10, &out) == KB_MCP_READ_LOST);
    CHECK(kb_mcp_stream_read(streams, again, ticket, 10, &out) == KB_MCP_READ_IDLE);
    kb_mcp_stream_detach(streams, stream, old); /* the old one's end changes nothing */
    kb_mcp_stream_detach(streams, again, ticket);
    kb_mcp_stream_release(streams, &again);
    kb_mcp_stream_release(streams, &stream);

    /* idle streams past the number kept per session are forgotten, the
       oldest first; another session's are not */
    kb_mcp_stream_t *other = kb_mcp_streams_open(streams, "s2", false, true);
    kb_mcp_stream_end(streams, other);
    unsigned long long other_n = (unsigned long long)kb_mcp_stream_number(other);
    kb_mcp_stream_release(streams, &other);
    for (int i = 0; i < KB_MCP_STREAMS_IDLE_KEPT + 1; i++) {
        kb_mcp_stream_t *call = kb_mcp_streams_open(streams, "s1", false, true);
        kb_mcp_stream_end(streams, call);
        kb_mcp_stream_release(streams, &call);
    }
    CHECK(kb_mcp_streams_resume(streams, "s1", id, &again) == KB_MCP_RESUME_GONE);
    snprintf(id, sizeof id, "%llu-1", other_n);
    CHECK(kb_mcp_streams_resume(streams, "s2", id, &again) == KB_MCP_RESUME_OK);
    kb_mcp_stream_release(streams, &again);
    kb_buf_free(&out);
    kb_mcp_streams_destroy(&streams);
}

int main(void)
{
    RUN_TEST(test_ids_and_resume);
    RUN_TEST(test_bound);
    RUN_TEST(test_takeover_and_idle);
    return kb_test_summary();
}
