/*  test_mcp.c - the MCP server's parts without a transport
    (src/server/kb_mcp*.c): JSON-RPC envelopes, the lifecycle and version
    negotiation, sessions and their end, Origins, batches, arguments
    checked against the tools' schemas, the tools' list, and a run's
    result as content (ANSI removed, images, documents, the text bound).
    A real service (no kernel is started: every call here is refused
    before one would be). */
#include "kb_testutil.h"
#include "server/kb_mcp.h"
#include "server/kb_mcp_tools.h"

#include <stdio.h>
#include <string.h>

static json_t *s_msg(const char *text)
{
    json_t *message = json_loads(text, 0, NULL);
    CHECK(message != NULL);
    return message;
}

static json_t *s_handle(kb_mcp_t *mcp, kb_mcp_session_t **session, const char *text)
{
    json_t *message = s_msg(text);
    json_t *response = kb_mcp_handle(mcp, session, message, NULL, NULL);
    json_decref(message);
    return response;
}

static long long s_error_code(const json_t *response)
{
    return json_integer_value(json_object_get(json_object_get(response, "error"), "code"));
}

static const char *s_data(const json_t *response, const char *key)
{
    const json_t *data = json_object_get(json_object_get(response, "error"), "data");
    return json_string_value(json_object_get(data, key));
}

static void test_parse(void)
{
    json_t *error = NULL;
    CHECK(kb_mcp_parse("{", 1, &error) == NULL);
    CHECK(s_error_code(error) == KB_RPC_PARSE_ERROR);
    CHECK(json_is_null(json_object_get(error, "id")));
    json_decref(error);
    CHECK(kb_mcp_parse("", 0, &error) == NULL && s_error_code(error) == KB_RPC_PARSE_ERROR);
    json_decref(error);
    CHECK(kb_mcp_parse("[]", 2, &error) == NULL && s_error_code(error) == KB_RPC_INVALID_REQUEST);
    json_decref(error);
    CHECK(kb_mcp_parse("3", 1, &error) == NULL && s_error_code(error) == KB_RPC_INVALID_REQUEST);
    json_decref(error);
    const char *ok = "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{"
                     "\"_meta\":{\"progressToken\":\"t\"}}}";
    json_t *message = kb_mcp_parse(ok, strlen(ok), &error);
    CHECK(message && !error);
    CHECK_STR(kb_mcp_request_method(message), "tools/call");
    CHECK(kb_mcp_wants_progress(message));
    json_decref(message);
    message = s_msg("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    CHECK(kb_mcp_request_method(message) == NULL); /* a notification */
    json_decref(message);
}

static void test_lifecycle(kb_mcp_t *mcp)
{
    kb_mcp_session_t *session = NULL;
    json_t *r = s_handle(mcp, &session, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
    CHECK(s_error_code(r) == KB_RPC_INVALID_REQUEST); /* initialize first */
    json_decref(r);
    r = s_handle(mcp, &session, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
    CHECK(json_is_object(json_object_get(r, "result")));
    json_decref(r);
    const char *versions[][2] = { { "2025-03-26", "2025-03-26" },
                                  { "2025-06-18", "2025-06-18" },
                                  { "2025-11-25", "2025-11-25" },
                                  { "2024-11-05", "2025-11-25" } };
    for (size_t i = 0; i < 4; i++) {
        char text[256];
        snprintf(text, sizeof text,
                 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                 "\"protocolVersion\":\"%s\"}}",
                 versions[i][0]);
        r = s_handle(mcp, &session, text);
        const json_t *result = json_object_get(r, "result");
        CHECK_STR(json_string_value(json_object_get(result, "protocolVersion")), versions[i][1]);
        CHECK(session != NULL);
        CHECK_STR(kb_mcp_session_version(session), versions[i][1]);
        json_decref(r);
    }
    char id[KB_MCP_SESSION_ID_MAX + 1];
    snprintf(id, sizeof id, "%s", kb_mcp_session_id(session));
    kb_mcp_session_t *found = kb_mcp_session_find(mcp, id);
    CHECK(found == session);
    kb_mcp_session_release(mcp, &found);
    CHECK(kb_mcp_session_end(mcp, id) == 0);
    CHECK(kb_mcp_session_ended(mcp, session));
    CHECK(kb_mcp_session_find(mcp, id) == NULL);
    CHECK(kb_mcp_session_end(mcp, id) == -1);
    kb_mcp_session_release(mcp, &session); /* the last reference: freed */
    CHECK(kb_mcp_session_find(mcp, "") == NULL);
}

static void test_envelopes(kb_mcp_t *mcp)
{
    kb_mcp_session_t *session = NULL;
    json_decref(s_handle(mcp, &session,
                         "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
                         "\"protocolVersion\":\"2025-06-18\"}}"));
    json_t *r = s_handle(mcp, &session, "{\"id\":1,\"method\":\"ping\"}");
    CHECK(s_error_code(r) == KB_RPC_INVALID_REQUEST);
    CHECK_STR(s_data(r, "field"), "jsonrpc");
    json_decref(r);
    r = s_handle(mcp, &session, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"nope\"}");
    CHECK(s_error_code(r) == KB_RPC_METHOD_NOT_FOUND);
    CHECK_STR(s_data(r, "code"), "NOT_FOUND");
    json_decref(r);
    CHECK(s_handle(mcp, &session, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}") == NULL);
    CHECK(s_handle(mcp, &session, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}") == NULL);
    json_t *batch = s_msg("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]");
    r = kb_mcp_handle_batch(mcp, &session, batch);
    CHECK(s_error_code(r) == KB_RPC_INVALID_REQUEST); /* 2025-06-18: no batches */
    json_decref(r);
    json_decref(s_handle(mcp, &session,
                         "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
                         "\"protocolVersion\":\"2025-03-26\"}}"));
    r = kb_mcp_handle_batch(mcp, &session, batch);
    CHECK(json_is_array(r) && json_array_size(r) == 1);
    json_decref(r);
    json_decref(batch);
    kb_mcp_session_release(mcp, &session);
}

static json_t *s_call(kb_mcp_t *mcp, kb_mcp_session_t **session, const char *name,
                      const char *arguments)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
             "\"arguments\":%s}}",
             name, arguments);
    return s_handle(mcp, session, text);
}

static void test_tools(kb_mcp_t *mcp)
{
    json_t *list = kb_mcp_tools_list();
    const char *names[]
        = { "run_code",        "create_context",     "list_contexts",    "delete_context",
            "restart_context", "interrupt_context",  "list_kernelspecs", "get_process_logs",
            "fork_context",    "checkpoint_context", "restore_context" };
    size_t count = sizeof names / sizeof names[0];
    const json_t *tools = json_object_get(list, "tools");
    CHECK(json_array_size(tools) == count);
    for (size_t i = 0; i < count && i < json_array_size(tools); i++) {
        const json_t *tool = json_array_get(tools, i);
        CHECK_STR(json_string_value(json_object_get(tool, "name")), names[i]);
        CHECK(json_is_object(json_object_get(tool, "inputSchema")));
        CHECK(json_is_object(json_object_get(tool, "outputSchema")));
    }
    json_decref(list);
    kb_mcp_session_t *session = NULL;
    json_decref(s_handle(mcp, &session,
                         "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
                         "\"protocolVersion\":\"2025-11-25\"}}"));
    const char *bad[][3]
        = { { "run_code", "{}", "code" },
            { "run_code", "{\"code\":true}", "code" },
            { "run_code", "{\"code\":\"1\",\"x\":1}", "x" },
            { "run_code", "{\"code\":\"1\",\"timeout\":-2}", "timeout" },
            { "run_code", "{\"code\":\"1\",\"context_id\":\"a b\"}", "context_id" },
            { "create_context", "{\"context_id\":\"!\"}", "context_id" },
            { "get_process_logs", "{\"process_id\":\"p\",\"limit\":0}", "limit" },
            { "nothing", "{}", "name" } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *r = s_call(mcp, &session, bad[i][0], bad[i][1]);
        CHECK(s_error_code(r) == KB_RPC_INVALID_PARAMS);
        CHECK_STR(s_data(r, "field"), bad[i][2]);
        json_decref(r);
    }
    json_t *r = s_call(mcp, &session, "delete_context", "{\"context_id\":\"ctx_none\"}");
    const json_t *result = json_object_get(r, "result");
    CHECK(json_is_true(json_object_get(result, "isError")));
    const char *text = json_string_value(
        json_object_get(json_array_get(json_object_get(result, "content"), 0), "text"));
    CHECK(text && strncmp(text, "SESSION_NOT_FOUND: ", 19) == 0);
    json_decref(r);
    r = s_call(mcp, &session, "list_contexts", "{\"all\":null}");
    CHECK(json_is_array(json_object_get(
        json_object_get(json_object_get(r, "result"), "structuredContent"), "contexts")));
    json_decref(r);
    kb_mcp_session_release(mcp, &session);
}

static void test_origins(kb_mcp_t *mcp, kb_mcp_t *open)
{
    const char *good[] = { "http://localhost",   "http://localhost:6274", "https://127.0.0.1:1",
                           "http://127.200.3.4", "http://[::1]:80",       "https://app.example" };
    const char *bad[] = {
        "http://evil.example",   "http://127.0.0.1.evil.example", "null",         "file://",
        "http://localhost.evil", "https://app.example:1",         "http://[::2]", "http://256.0.0.1"
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK(kb_mcp_origin_allowed(mcp, good[i]));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(!kb_mcp_origin_allowed(mcp, bad[i]));
        CHECK(kb_mcp_origin_allowed(open, bad[i]));
    }
}

static void test_content(void)
{
    char ansi[] = "\x1b[31mred\x1b[0m \x1b]0;title\x07plain \x1b(B";
    kb_mcp_strip_ansi(ansi);
    CHECK_STR(ansi, "red plain ");
    json_t *result = s_msg(
        "{\"process\":{\"process_id\":\"prc_1\"},\"logs\":{\"stdout\":\"0123456789\","
        "\"stderr\":\"\\u00e9\\u00e9\"},\"results\":[{\"is_main_result\":false,\"png\":\"iVBO\","
        "\"text\":\"<Figure>\",\"data\":{}},{\"is_main_result\":false,\"html\":\"<b>x</b>\","
        "\"data\":{\"image/jpeg\":\"/9j/\"}},{\"is_main_result\":true,\"text\":\"42\","
        "\"data\":{}}],\"error\":{\"name\":\"E\",\"value\":\"v\",\"traceback\":[]}}");
    /* 10 of stdout, then not even one é of stderr: none; "4" of "42"; a note */
    json_t *out = kb_mcp_run_result(result, 11);
    const json_t *content = json_object_get(out, "content");
    const char *types[] = { "text", "image", "image", "resource", "text", "text" };
    CHECK(json_array_size(content) == 6);
    for (size_t i = 0; i < 6 && i < json_array_size(content); i++)
        CHECK_STR(json_string_value(json_object_get(json_array_get(content, i), "type")), types[i]);
    CHECK_STR(json_string_value(json_object_get(json_array_get(content, 0), "text")), "0123456789");
    CHECK_STR(json_string_value(json_object_get(json_array_get(content, 4), "text")), "4");
    const char *note = json_string_value(json_object_get(json_array_get(content, 5), "text"));
    CHECK(note && strstr(note, "get_process_logs") && strstr(note, "prc_1"));
    const json_t *structured = json_object_get(out, "structuredContent");
    CHECK(json_is_true(json_object_get(structured, "truncated")));
    CHECK_STR(json_string_value(json_object_get(json_object_get(structured, "logs"), "stderr")),
              "\xc3\xa9\xc3\xa9"); /* 4 bytes, within 11: kept */
    CHECK(json_is_true(json_object_get(out, "isError")));
    json_decref(out);
    out = kb_mcp_run_result(result, 1 << 20);
    content = json_object_get(out, "content");
    CHECK(json_array_size(content) == 7); /* stdout, stderr, png, jpeg, html, 42, E: v */
    CHECK_STR(json_string_value(json_object_get(json_array_get(content, 6), "text")), "E: v");
    json_decref(out);
    json_decref(result);
}

int main(void)
{
    kb_error_t err = { KB_OK, "" };
    kb_service_config_t config = { .state_dir = NULL };
    kb_service_t *service = kb_service_new(&config, &err);
    CHECK(service != NULL);
    const char *origins[] = { "https://app.example", NULL };
    kb_mcp_config_t config_mcp = { .allow_origins = origins };
    kb_mcp_t *mcp = kb_mcp_new(service, &config_mcp);
    const char *any[] = { "*", NULL };
    kb_mcp_config_t config_open = { .allow_origins = any };
    kb_mcp_t *open = kb_mcp_new(service, &config_open);
    RUN_TEST(test_parse);
    RUN_TEST(test_content);
    test_lifecycle(mcp);
    test_envelopes(mcp);
    test_tools(mcp);
    test_origins(mcp, open);
    kb_mcp_destroy(&open);
    kb_mcp_destroy(&mcp);
    CHECK(mcp == NULL);
    kb_service_destroy(&service);
    return kb_test_summary();
}
