/*  test_execution.c - the fold of one run (kb_execution) and the result
    JSON (kb_result), driven by crafted Jupyter messages: every message
    type, both completion orders, other parents, display updates,
    clear_output, errors, the output cap, and the events a follower sees.
    The typed errors: test_error.c. */
#include "kb_testutil.h"

#include "kernelbridge/kb_error.h"
#include "service/run/kb_execution.h"
#include "service/output/kb_result_doc.h"
#include "service/run/kb_result_internal.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RUN_ID "run-1"

/* ---- Crafted messages ---------------------------------------------------- */

/*  A message as the wire codec would hand it out. Freed by free_msg; the
    test does not depend on the codec's own destructor. */
static kb_msg_t *make_msg(const char *msg_type, const char *parent, const char *content_json)
{
    static int counter;
    char msg_id[32];
    snprintf(msg_id, sizeof msg_id, "k_%d", ++counter);
    kb_msg_t *msg = calloc(1, sizeof *msg);
    json_error_t jerr;
    msg->header_json = json_pack("{s:s, s:s, s:s, s:s}", "msg_id", msg_id, "msg_type", msg_type,
                                 "session", "kernel-session", "version", "5.3");
    msg->parent_json
        = parent ? json_pack("{s:s, s:s}", "msg_id", parent, "msg_type", "execute_request")
                 : json_object();
    msg->metadata_json = json_object();
    msg->content = json_loads(content_json, 0, &jerr);
    if (!msg->content) {
        fprintf(stderr, "bad test JSON %s: %s\n", content_json, jerr.text);
        abort();
    }
    msg->msg_type = json_string_value(json_object_get(msg->header_json, "msg_type"));
    msg->msg_id = json_string_value(json_object_get(msg->header_json, "msg_id"));
    const char *pid = json_string_value(json_object_get(msg->parent_json, "msg_id"));
    msg->parent_msg_id = pid ? pid : "";
    return msg;
}

static void free_msg(kb_msg_t *msg)
{
    json_decref(msg->header_json);
    json_decref(msg->parent_json);
    json_decref(msg->metadata_json);
    json_decref(msg->content);
    free(msg);
}

static int iopub_from(kb_execution_t *exe, const char *parent, const char *type,
                      const char *content)
{
    kb_msg_t *msg = make_msg(type, parent, content);
    int rc = kb_execution_fold_iopub(exe, msg);
    free_msg(msg);
    return rc;
}

static int iopub(kb_execution_t *exe, const char *type, const char *content)
{
    return iopub_from(exe, RUN_ID, type, content);
}

static int shell_from(kb_execution_t *exe, const char *parent, const char *type,
                      const char *content)
{
    kb_msg_t *msg = make_msg(type, parent, content);
    int rc = kb_execution_fold_shell(exe, msg);
    free_msg(msg);
    return rc;
}

static int shell(kb_execution_t *exe, const char *content)
{
    return shell_from(exe, RUN_ID, "execute_reply", content);
}

static int idle(kb_execution_t *exe)
{
    return iopub(exe, "status", "{\"execution_state\": \"idle\"}");
}

/* ---- Recorded events ----------------------------------------------------- */

typedef struct {
    kb_event_type_t type[64];
    json_t *data[64];
    size_t count;
} events_t;

static void record(kb_event_type_t type, json_t *data, long long cursor, void *arg)
{
    (void)cursor; /* no log: text comes as data */
    events_t *events = arg;
    if (events->count >= 64) {
        json_decref(data);
        return;
    }
    events->type[events->count] = type;
    events->data[events->count] = data;
    events->count++;
}

static void events_reset(events_t *events)
{
    for (size_t i = 0; i < events->count; i++)
        json_decref(events->data[i]);
    events->count = 0;
}

static bool json_is(const json_t *value, const char *expected_json)
{
    json_t *expected = json_loads(expected_json, JSON_DECODE_ANY, NULL);
    bool same = expected && value && json_equal(value, expected);
    if (!same) {
        char *got = value ? json_dumps(value, JSON_ENCODE_ANY | JSON_SORT_KEYS) : NULL;
        fprintf(stderr, "   expected %s\n   got      %s\n", expected_json, got ? got : "(null)");
        free(got);
    }
    json_decref(expected);
    return same;
}

static kb_execution_t *new_run(events_t *events, size_t max_output, bool strip)
{
    kb_execution_opts_t opts = { .max_output_bytes = max_output, .strip_ansi = strip };
    memset(events, 0, sizeof *events);
    return kb_execution_new(RUN_ID, &opts, record, events);
}

/*  Finish as a normal end and return the result JSON. */
static json_t *finish_json(kb_execution_t *exe, kb_result_t **result_out)
{
    kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED,
                                              kb_execution_has_error(exe) ? 1 : 0, NULL, NULL);
    json_t *json = result ? kb_result_to_json(result) : NULL;
    if (result_out)
        *result_out = result;
    else
        kb_result_destroy(&result);
    return json;
}

/* ---- Tests ----------------------------------------------------------------- */

static void test_stream(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"hello \"}") == 1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stderr\", \"text\": \"warn\\n\"}") == 1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": [\"wor\", \"ld\\n\"]}") == 1);
    /* Malformed: ignored, no event. */
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\"}") == -1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": 5}") == -1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdin\", \"text\": \"x\"}") == -1);
    CHECK(iopub(exe, "stream", "{\"text\": \"x\"}") == -1);
    CHECK(ev.count == 3);
    if (ev.count == 3) {
        CHECK(ev.type[0] == KB_EVENT_STDOUT);
        CHECK(json_is(ev.data[0], "{\"text\": \"hello \"}"));
        CHECK(ev.type[1] == KB_EVENT_STDERR);
        CHECK(json_is(ev.data[1], "{\"text\": \"warn\\n\"}"));
        CHECK(ev.type[2] == KB_EVENT_STDOUT);
        CHECK(json_is(ev.data[2], "{\"text\": \"world\\n\"}"));
    }
    kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED, 0, NULL, NULL);
    CHECK_STR(result->stdout_text, "hello world\n");
    CHECK(result->stdout_len == 12);
    CHECK_STR(result->stderr_text, "warn\n");
    CHECK(result->stderr_len == 5);
    CHECK(result->outputs_len == 0);
    CHECK(result->error == NULL);
    CHECK(!result->truncated);
    kb_result_destroy(&result);
    CHECK(result == NULL);
    kb_execution_destroy(&exe);
    CHECK(exe == NULL);
    events_reset(&ev);
}

static void test_display_and_execute_result(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(kb_execution_count(exe) == -1);
    CHECK(iopub(exe, "status", "{\"execution_state\": \"busy\"}") == 1);
    CHECK(iopub(exe, "execute_input", "{\"code\": \"1+1\", \"execution_count\": 7}") == 1);
    CHECK(kb_execution_count(exe) == 7);
    /* A negative count is no count: kept at 7, no INPUT event. */
    CHECK(iopub(exe, "execute_input", "{\"code\": \"1+1\", \"execution_count\": -1}") == 1);
    CHECK(kb_execution_count(exe) == 7);
    CHECK(iopub(exe, "display_data",
                "{\"data\": {\"text/plain\": \"<Figure>\", \"image/png\": \"iVBOR\"},"
                " \"metadata\": {\"image/png\": {\"width\": 10}},"
                " \"transient\": {\"display_id\": \"fig1\"}}")
          == 1);
    CHECK(iopub(exe, "execute_result",
                "{\"data\": {\"text/plain\": \"2\"}, \"metadata\": {}, \"execution_count\": 8}")
          == 1);
    CHECK(kb_execution_count(exe) == 8);
    /* Malformed outputs: no data object. */
    CHECK(iopub(exe, "display_data", "{\"metadata\": {}}") == -1);
    CHECK(iopub(exe, "execute_result", "{\"data\": \"2\"}") == -1);
    CHECK(ev.count == 3);
    if (ev.count == 3) {
        CHECK(ev.type[0] == KB_EVENT_INPUT);
        CHECK(json_is(ev.data[0], "{\"execution_count\": 7}"));
        CHECK(ev.type[1] == KB_EVENT_DISPLAY);
        CHECK(json_is(ev.data[1], "{\"data\": {\"text/plain\": \"<Figure>\", \"image/png\": "
                                  "\"iVBOR\"}, \"is_main_result\": false, \"text\": \"<Figure>\","
                                  " \"html\": null, \"png\": \"iVBOR\", \"svg\": null, \"json\":"
                                  " null, \"metadata\": {\"image/png\": {\"width\": 10}},"
                                  " \"display_id\": \"fig1\"}"));
        CHECK(ev.type[2] == KB_EVENT_DISPLAY);
        CHECK(json_is(ev.data[2], "{\"data\": {\"text/plain\": \"2\"}, \"is_main_result\": true,"
                                  " \"text\": \"2\", \"html\": null, \"png\": null, \"svg\":"
                                  " null, \"json\": null, \"metadata\": {}}"));
    }
    kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED, 0, NULL, NULL);
    CHECK(result->outputs_len == 2);
    CHECK(result->execution_count == 8);
    if (result->outputs_len == 2) {
        CHECK(!result->outputs[0].is_main_result);
        CHECK_STR(result->outputs[0].display_id, "fig1");
        CHECK(result->outputs[1].is_main_result);
        CHECK(result->outputs[1].display_id == NULL);
    }
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

static void test_completion_orders(void)
{
    events_t ev;
    /* Reply first, then idle. */
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(!kb_execution_complete(exe));
    CHECK(shell(exe, "{\"status\": \"ok\", \"execution_count\": 3}") == 1);
    CHECK(kb_execution_has_reply(exe));
    CHECK(!kb_execution_has_idle(exe));
    CHECK(!kb_execution_complete(exe));
    CHECK(kb_execution_count(exe) == 3);
    CHECK(iopub(exe, "status", "{\"execution_state\": \"busy\"}") == 1);
    CHECK(!kb_execution_complete(exe));
    CHECK(idle(exe) == 1);
    CHECK(kb_execution_has_idle(exe));
    CHECK(kb_execution_complete(exe));
    CHECK(!kb_execution_has_error(exe));
    /* A second reply is not folded. */
    CHECK(shell(exe, "{\"status\": \"ok\", \"execution_count\": 4}") == -1);
    CHECK(kb_execution_count(exe) == 3);
    CHECK(ev.count == 0);
    kb_execution_destroy(&exe);

    /* Idle first, then reply. */
    exe = new_run(&ev, 0, false);
    CHECK(idle(exe) == 1);
    CHECK(kb_execution_has_idle(exe));
    CHECK(!kb_execution_complete(exe));
    CHECK(shell(exe, "{\"status\": \"ok\", \"execution_count\": 1}") == 1);
    CHECK(kb_execution_complete(exe));
    /* Malformed shell messages. */
    kb_execution_destroy(&exe);
    exe = new_run(&ev, 0, false);
    CHECK(shell(exe, "{\"execution_count\": 1}") == -1);
    CHECK(shell_from(exe, RUN_ID, "kernel_info_reply", "{\"status\": \"ok\"}") == -1);
    CHECK(!kb_execution_has_reply(exe));
    CHECK(iopub(exe, "status", "{}") == -1);
    CHECK(!kb_execution_has_idle(exe));
    /* Types with no meaning for a result are accepted and change nothing. */
    CHECK(iopub(exe, "comm_msg", "{\"comm_id\": \"c\", \"data\": {}}") == 1);
    CHECK(ev.count == 0);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

static void test_other_parents(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(iopub_from(exe, "other", "stream", "{\"name\": \"stdout\", \"text\": \"x\"}") == 0);
    CHECK(iopub_from(exe, "other", "display_data", "{\"data\": {\"text/plain\": \"x\"}}") == 0);
    CHECK(iopub_from(exe, "other", "error", "{\"ename\": \"E\", \"evalue\": \"v\"}") == 0);
    CHECK(iopub_from(exe, "other", "clear_output", "{\"wait\": false}") == 0);
    CHECK(iopub_from(exe, "other", "execute_input", "{\"execution_count\": 9}") == 0);
    CHECK(iopub_from(exe, "other", "status", "{\"execution_state\": \"idle\"}") == 0);
    CHECK(iopub_from(exe, NULL, "status", "{\"execution_state\": \"idle\"}") == 0);
    /* Malformed but not ours: still "not for us". */
    CHECK(iopub_from(exe, "other", "stream", "{}") == 0);
    CHECK(shell_from(exe, "other", "execute_reply", "{\"status\": \"error\", \"ename\": \"E\"}")
          == 0);
    CHECK(shell_from(exe, NULL, "execute_reply", "{\"status\": \"ok\"}") == 0);
    CHECK(iopub_from(exe, RUN_ID "x", "stream", "{\"name\": \"stdout\", \"text\": \"x\"}") == 0);
    CHECK(!kb_execution_has_idle(exe));
    CHECK(!kb_execution_has_reply(exe));
    CHECK(!kb_execution_has_error(exe));
    CHECK(kb_execution_count(exe) == -1);
    CHECK(ev.count == 0);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"mine\"}") == 1);
    kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED, 0, NULL, NULL);
    CHECK_STR(result->stdout_text, "mine");
    CHECK(result->outputs_len == 0);
    CHECK(result->error == NULL);
    /* After finish nothing is folded any more. */
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"late\"}") == 0);
    CHECK(shell(exe, "{\"status\": \"ok\"}") == 0);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

static void test_update_display(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "display_data",
                "{\"data\": {\"text/plain\": \"0%\"}, \"metadata\": {\"m\": 0},"
                " \"transient\": {\"display_id\": \"bar\"}}")
          == 1);
    CHECK(iopub(exe, "display_data",
                "{\"data\": {\"text/plain\": \"other\"}, \"metadata\": {},"
                " \"transient\": {\"display_id\": \"other\"}}")
          == 1);
    CHECK(iopub(exe, "display_data", "{\"data\": {\"text/plain\": \"plain\"}, \"metadata\": {}}")
          == 1);
    CHECK(iopub(exe, "display_data",
                "{\"data\": {\"text/plain\": \"0% again\"}, \"metadata\": {},"
                " \"transient\": {\"display_id\": \"bar\"}}")
          == 1);
    events_reset(&ev);
    CHECK(iopub(exe, "update_display_data",
                "{\"data\": {\"text/plain\": \"100%\", \"text/html\": \"<b>100%</b>\"},"
                " \"metadata\": {\"m\": 1}, \"transient\": {\"display_id\": \"bar\"}}")
          == 1);
    /* An id of no entry of this run: nothing replaced, still emitted. */
    CHECK(iopub(exe, "update_display_data",
                "{\"data\": {\"text/plain\": \"x\"}, \"metadata\": {},"
                " \"transient\": {\"display_id\": \"from-earlier-run\"}}")
          == 1);
    /* No display id: malformed. */
    CHECK(iopub(exe, "update_display_data", "{\"data\": {\"text/plain\": \"x\"}, \"metadata\": {}}")
          == -1);
    CHECK(iopub(exe, "update_display_data",
                "{\"metadata\": {}, \"transient\": {\"display_id\": \"bar\"}}")
          == -1);
    CHECK(ev.count == 2);
    if (ev.count == 2) {
        CHECK(ev.type[0] == KB_EVENT_DISPLAY_UPDATE);
        CHECK(json_is(ev.data[0], "{\"display_id\": \"bar\", \"data\": {\"text/plain\": "
                                  "\"100%\", \"text/html\": \"<b>100%</b>\"}}"));
        CHECK(ev.type[1] == KB_EVENT_DISPLAY_UPDATE);
        CHECK(json_is(ev.data[1], "{\"display_id\": \"from-earlier-run\", \"data\": "
                                  "{\"text/plain\": \"x\"}}"));
    }
    kb_result_t *result = NULL;
    json_t *json = finish_json(exe, &result);
    CHECK(result->outputs_len == 4);
    json_t *results = json_object_get(json, "results");
    CHECK(json_array_size(results) == 4);
    CHECK(json_is(json_array_get(results, 0),
                  "{\"data\": {\"text/plain\": \"100%\", \"text/html\": \"<b>100%</b>\"},"
                  " \"is_main_result\": false, \"text\": \"100%\", \"html\": \"<b>100%</b>\","
                  " \"png\": null, \"svg\": null, \"json\": null, \"metadata\": {\"m\": 1},"
                  " \"display_id\": \"bar\"}"));
    CHECK_STR(json_string_value(json_object_get(json_array_get(results, 1), "text")), "other");
    CHECK_STR(json_string_value(json_object_get(json_array_get(results, 2), "text")), "plain");
    CHECK(json_is(json_array_get(results, 3),
                  "{\"data\": {\"text/plain\": \"100%\", \"text/html\": \"<b>100%</b>\"},"
                  " \"is_main_result\": false, \"text\": \"100%\", \"html\": \"<b>100%</b>\","
                  " \"png\": null, \"svg\": null, \"json\": null, \"metadata\": {\"m\": 1},"
                  " \"display_id\": \"bar\"}"));
    json_decref(json);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

static void test_clear_output_now(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"old out\"}") == 1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stderr\", \"text\": \"old err\"}") == 1);
    CHECK(iopub(exe, "display_data", "{\"data\": {\"text/plain\": \"old\"}, \"metadata\": {}}")
          == 1);
    events_reset(&ev);
    CHECK(iopub(exe, "clear_output", "{\"wait\": false}") == 1);
    CHECK(ev.count == 1 && ev.type[0] == KB_EVENT_CLEAR_OUTPUT);
    CHECK(ev.count == 1 && json_is(ev.data[0], "{\"wait\": false}"));
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"new\"}") == 1);
    kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED, 0, NULL, NULL);
    CHECK_STR(result->stdout_text, "new");
    CHECK_STR(result->stderr_text, "");
    CHECK(result->stderr_len == 0);
    CHECK(result->outputs_len == 0);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

static void test_clear_output_wait(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"frame 1\"}") == 1);
    CHECK(iopub(exe, "display_data",
                "{\"data\": {\"text/plain\": \"d\"}, \"metadata\": {},"
                " \"transient\": {\"display_id\": \"d\"}}")
          == 1);
    events_reset(&ev);
    CHECK(iopub(exe, "clear_output", "{\"wait\": true}") == 1);
    CHECK(ev.count == 1 && ev.type[0] == KB_EVENT_CLEAR_OUTPUT);
    CHECK(ev.count == 1 && json_is(ev.data[0], "{\"wait\": true}"));
    /* An update is not "the next output" (an error is: below): still kept. */
    CHECK(iopub(exe, "update_display_data",
                "{\"data\": {\"text/plain\": \"d2\"}, \"metadata\": {},"
                " \"transient\": {\"display_id\": \"d\"}}")
          == 1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stderr\", \"text\": \"frame 2\"}") == 1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \" more\"}") == 1);
    kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED, 0, NULL, NULL);
    CHECK_STR(result->stdout_text, " more");
    CHECK_STR(result->stderr_text, "frame 2");
    CHECK(result->outputs_len == 0);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);

    /* A pending clear with no output after it clears nothing. */
    exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "display_data", "{\"data\": {\"text/plain\": \"kept\"}, \"metadata\": {}}")
          == 1);
    CHECK(iopub(exe, "clear_output", "{\"wait\": true}") == 1);
    result = kb_execution_finish(exe, KB_REASON_EXITED, 0, NULL, NULL);
    CHECK(result->outputs_len == 1);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);

    /* The next output being display_data also applies it. */
    exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"gone\"}") == 1);
    CHECK(iopub(exe, "clear_output", "{\"wait\": true}") == 1);
    CHECK(iopub(exe, "execute_result", "{\"data\": {\"text/plain\": \"r\"}, \"metadata\": {}}")
          == 1);
    result = kb_execution_finish(exe, KB_REASON_EXITED, 0, NULL, NULL);
    CHECK_STR(result->stdout_text, "");
    CHECK(result->outputs_len == 1);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

/*  clear_output(wait=true), then an error: the error is the next output
    (nbclient, JupyterLab), so what was waiting is cleared; a reply's error
    alone is no output and clears nothing. */
static void test_clear_then_error(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"gone\\n\"}") == 1);
    CHECK(iopub(exe, "display_data", "{\"data\": {\"text/plain\": \"d\"}, \"metadata\": {}}") == 1);
    CHECK(iopub(exe, "clear_output", "{\"wait\": true}") == 1);
    CHECK(iopub(exe, "error",
                "{\"ename\": \"RuntimeError\", \"evalue\": \"\", \"traceback\": [\"tb\"]}")
          == 1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"after\"}") == 1);
    kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED, 1, NULL, NULL);
    CHECK_STR(result->stdout_text, "after");
    CHECK(result->outputs_len == 0);
    CHECK(result->error && strcmp(result->error->name, "RuntimeError") == 0);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);

    exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"kept\"}") == 1);
    CHECK(iopub(exe, "clear_output", "{\"wait\": true}") == 1);
    CHECK(shell(exe, "{\"status\": \"error\", \"ename\": \"E\", \"evalue\": \"v\","
                     " \"traceback\": []}")
          == 1);
    CHECK(idle(exe) == 1);
    result = kb_execution_finish(exe, KB_REASON_EXITED, 1, NULL, NULL);
    CHECK_STR(result->stdout_text, "kept");
    CHECK(result->error && strcmp(result->error->name, "E") == 0);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

/*  execute_reply's page payloads: results entries (not main) after the
    run's others, whichever of reply and idle comes first; other payload
    kinds are left out. */
static void test_pages(void)
{
    static const char *reply
        = "{\"status\": \"ok\", \"execution_count\": 1, \"payload\": ["
          "{\"source\": \"page\", \"data\": {\"text/plain\": \"Signature: len(obj)\"},"
          " \"start\": 0},"
          "{\"source\": \"set_next_input\", \"text\": \"x = 1\", \"replace\": false},"
          "{\"source\": \"ask_exit\", \"keepkernel\": false},"
          "{\"source\": \"page\", \"data\": \"not a bundle\"},"
          "{\"source\": \"page\", \"data\": {\"text/plain\": \"two\", \"text/html\": "
          "\"<b>2</b>\"}}]}";
    for (int reply_first = 0; reply_first < 2; reply_first++) {
        events_t ev;
        kb_execution_t *exe = new_run(&ev, 0, false);
        CHECK(iopub(exe, "display_data", "{\"data\": {\"text/plain\": \"d\"}, \"metadata\": {}}")
              == 1);
        if (reply_first) {
            CHECK(shell(exe, reply) == 1);
            /* held until idle: an output still coming goes before the pages */
            CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"late\"}") == 1);
            CHECK(kb_execution_has_reply(exe) && !kb_execution_complete(exe));
            CHECK(idle(exe) == 1);
        } else {
            CHECK(idle(exe) == 1);
            CHECK(shell(exe, reply) == 1);
        }
        kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED, 0, NULL, NULL);
        CHECK(result->outputs_len == 3);
        if (result->outputs_len == 3) {
            CHECK(json_is(json_object_get(result->outputs[0].data, "text/plain"), "\"d\""));
            CHECK(json_is(result->outputs[1].data, "{\"text/plain\": \"Signature: len(obj)\"}"));
            CHECK(json_is(result->outputs[2].data,
                          "{\"text/plain\": \"two\", \"text/html\": \"<b>2</b>\"}"));
            CHECK(!result->outputs[1].is_main_result && !result->outputs[2].is_main_result);
        }
        int displays = 0;
        for (size_t i = 0; i < ev.count; i++)
            displays += ev.type[i] == KB_EVENT_DISPLAY;
        CHECK(displays == 3);
        kb_result_destroy(&result);
        kb_execution_destroy(&exe);
        events_reset(&ev);
    }
}

#define TB_LINE "\x1b[0;31mValueError\x1b[0m: bad"

static void test_error_iopub(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "error",
                "{\"ename\": \"ValueError\", \"evalue\": \"bad\","
                " \"traceback\": [\"\\u001b[0;31mValueError\\u001b[0m: bad\", \"line 2\"]}")
          == 1);
    CHECK(kb_execution_has_error(exe));
    CHECK(ev.count == 1 && ev.type[0] == KB_EVENT_ERROR);
    CHECK(ev.count == 1
          && json_is(ev.data[0], "{\"name\": \"ValueError\", \"value\": \"bad\", \"traceback\":"
                                 " [\"\\u001b[0;31mValueError\\u001b[0m: bad\", \"line 2\"]}"));
    /* The reply's error does not replace the kernel's own. */
    CHECK(shell(exe, "{\"status\": \"error\", \"ename\": \"Other\", \"evalue\": \"x\","
                     " \"traceback\": [], \"execution_count\": 2}")
          == 1);
    CHECK(idle(exe) == 1);
    CHECK(ev.count == 1);
    /* Malformed errors. */
    CHECK(iopub(exe, "error", "{\"ename\": 5}") == -1);
    CHECK(iopub(exe, "error", "{\"ename\": \"E\", \"traceback\": [1]}") == -1);
    CHECK(iopub(exe, "error", "{\"ename\": \"E\", \"traceback\": \"tb\"}") == -1);
    kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED, 1, NULL, NULL);
    CHECK(result->error != NULL);
    if (result->error) {
        CHECK_STR(result->error->name, "ValueError");
        CHECK_STR(result->error->value, "bad");
        CHECK(result->error->traceback_len == 2);
        if (result->error->traceback_len == 2)
            CHECK_STR(result->error->traceback[0], TB_LINE);
    }
    CHECK(result->execution_count == 2);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

/*  A message the kernel refused to send (over the max message size): the
    result is truncated, its error says so, a system line too; output after
    it is kept, and an error the code raises later wins. */
static void test_refused_message(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "kernelbridge_refused",
                "{\"msg_type\": \"stream\", \"bytes\": 9000000,"
                " \"limit\": 4194304}")
          == 1);
    CHECK(iopub(exe, "kernelbridge_refused", "{\"msg_type\": \"stream\"}") == -1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"after\\n\"}") == 1);
    CHECK(ev.count == 3 && ev.type[0] == KB_EVENT_SYSTEM && ev.type[1] == KB_EVENT_ERROR
          && ev.type[2] == KB_EVENT_STDOUT);
    CHECK(shell(exe, "{\"status\": \"ok\", \"execution_count\": 1}") == 1);
    CHECK(idle(exe) == 1);
    kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED, 1, NULL, NULL);
    CHECK(result->truncated);
    CHECK(result->error && strcmp(result->error->name, "MessageTooLarge") == 0
          && strstr(result->error->value, "a stream message of 9000000 bytes")
          && strstr(result->error->value, "max message size of 4194304 bytes"));
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);

    exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "kernelbridge_refused",
                "{\"msg_type\": \"stream\", \"bytes\": 9000000,"
                " \"limit\": 4194304}")
          == 1);
    CHECK(iopub(exe, "error",
                "{\"ename\": \"ZeroDivisionError\", \"evalue\": \"x\","
                " \"traceback\": []}")
          == 1);
    result = kb_execution_finish(exe, KB_REASON_EXITED, 1, NULL, NULL);
    CHECK(result->truncated && result->error
          && strcmp(result->error->name, "ZeroDivisionError") == 0);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

/*  xeus-python names errors by the class's repr; the result names the class. */
static void test_error_class_repr(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "error",
                "{\"ename\": \"<class 'ValueError'>\", \"evalue\": \"bad\", \"traceback\": []}")
          == 1);
    kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED, 1, NULL, NULL);
    CHECK(result->error && strcmp(result->error->name, "ValueError") == 0);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);

    exe = new_run(&ev, 0, false);
    CHECK(
        iopub(exe, "error", "{\"ename\": \"<class 'broken\", \"evalue\": \"x\", \"traceback\": []}")
        == 1);
    result = kb_execution_finish(exe, KB_REASON_EXITED, 1, NULL, NULL);
    CHECK(result->error && strcmp(result->error->name, "<class 'broken") == 0);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

static void test_error_reply_only(void)
{
    events_t ev;
    /* Reply error before idle: held back until idle, then emitted. */
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(shell(exe, "{\"status\": \"error\", \"ename\": \"NameError\", \"evalue\": \"x\","
                     " \"traceback\": [\"tb1\", \"tb2\"], \"execution_count\": 1}")
          == 1);
    CHECK(kb_execution_has_error(exe));
    CHECK(ev.count == 0);
    CHECK(idle(exe) == 1);
    CHECK(ev.count == 1 && ev.type[0] == KB_EVENT_ERROR);
    CHECK(ev.count == 1
          && json_is(ev.data[0], "{\"name\": \"NameError\", \"value\": \"x\","
                                 " \"traceback\": [\"tb1\", \"tb2\"]}"));
    json_t *json = finish_json(exe, NULL);
    CHECK(
        json_is(json_object_get(json, "error"),
                "{\"name\": \"NameError\", \"value\": \"x\", \"traceback\": [\"tb1\", \"tb2\"]}"));
    CHECK(json_is(json_object_get(json_object_get(json, "process"), "exit_code"), "1"));
    json_decref(json);
    kb_execution_destroy(&exe);
    events_reset(&ev);

    /* Idle before the reply error: emitted at once. No ename: "Error". */
    exe = new_run(&ev, 0, false);
    CHECK(idle(exe) == 1);
    CHECK(shell(exe, "{\"status\": \"error\", \"ename\": \"\", \"evalue\": \"failed\"}") == 1);
    CHECK(ev.count == 1 && ev.type[0] == KB_EVENT_ERROR);
    CHECK(
        ev.count == 1
        && json_is(ev.data[0], "{\"name\": \"Error\", \"value\": \"failed\", \"traceback\": []}"));
    kb_execution_destroy(&exe);
    events_reset(&ev);

    /* The reply comes first, the iopub error after it on the other socket:
       the iopub error wins and is the only ERROR event. */
    exe = new_run(&ev, 0, false);
    CHECK(shell(exe, "{\"status\": \"error\", \"ename\": \"FromReply\", \"evalue\": \"r\"}") == 1);
    CHECK(iopub(exe, "error", "{\"ename\": \"FromIopub\", \"evalue\": \"i\", \"traceback\": []}")
          == 1);
    CHECK(idle(exe) == 1);
    CHECK(ev.count == 1);
    CHECK(ev.count == 1
          && json_is(ev.data[0], "{\"name\": \"FromIopub\", \"value\": \"i\","
                                 " \"traceback\": []}"));
    kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED, 1, NULL, NULL);
    CHECK(result->error && strcmp(result->error->name, "FromIopub") == 0);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);

    /* The idle never came: finish still takes the reply's error. */
    exe = new_run(&ev, 0, false);
    CHECK(shell(exe, "{\"status\": \"error\", \"ename\": \"E\", \"evalue\": \"v\"}") == 1);
    result = kb_execution_finish(exe, KB_REASON_EXITED, 1, NULL, NULL);
    CHECK(result->error && strcmp(result->error->name, "E") == 0);
    CHECK(ev.count == 1 && ev.type[0] == KB_EVENT_ERROR);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

static void test_aborted(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(shell(exe, "{\"status\": \"aborted\"}") == 1);
    CHECK(kb_execution_has_error(exe));
    CHECK(idle(exe) == 1);
    CHECK(kb_execution_complete(exe));
    CHECK(ev.count == 1 && ev.type[0] == KB_EVENT_ERROR);
    json_t *json = finish_json(exe, NULL);
    json_t *error = json_object_get(json, "error");
    CHECK_STR(json_string_value(json_object_get(error, "name")), "ExecutionAborted");
    CHECK(json_string_length(json_object_get(error, "value")) > 0);
    CHECK(json_is(json_object_get(error, "traceback"), "[]"));
    CHECK(json_is(json_object_get(json, "execution_count"), "null"));
    json_decref(json);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

static void test_strip_ansi(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, true);
    CHECK(iopub(exe, "error",
                "{\"ename\": \"ValueError\", \"evalue\": \"bad\", \"traceback\": ["
                "\"\\u001b[0;31mValueError\\u001b[0m: bad\","
                " \"\\u001b[1;32m\\u001b[38;5;241mfile.py\\u001b[39m in \\u001b[0;36m<module>\","
                " \"\\u001b]8;;http://x\\u0007link\\u001b]8;;\\u001b\\\\ done\","
                " \"caf\\u00e9 \\u001b(Bplain\\u001b[K\", \"trailing \\u001b\"]}")
          == 1);
    CHECK(ev.count == 1
          && json_is(ev.data[0], "{\"name\": \"ValueError\", \"value\": \"bad\", \"traceback\": ["
                                 "\"ValueError: bad\", \"file.py in <module>\", \"link done\","
                                 " \"caf\\u00e9 plain\", \"trailing \"]}"));
    /* The reply's traceback is stripped too. */
    kb_execution_t *exe2
        = kb_execution_new("r2", &(kb_execution_opts_t){ .strip_ansi = true }, NULL, NULL);
    CHECK(shell_from(exe2, "r2", "execute_reply",
                     "{\"status\": \"error\", \"ename\": \"E\", \"evalue\": \"v\","
                     " \"traceback\": [\"\\u001b[31mred\\u001b[0m\"]}")
          == 1);
    kb_result_t *result = kb_execution_finish(exe2, KB_REASON_EXITED, 1, NULL, NULL);
    CHECK(result->error && result->error->traceback_len == 1
          && strcmp(result->error->traceback[0], "red") == 0);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe2);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

static void test_output_cap(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 10, false);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"123456\"}") == 1);
    /* 4 bytes of room; "abc\u00e9" is a b c 0xC3 0xA9: the cut may not
       split the two-byte character, so only "abc" fits. */
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"abc\\u00e9\"}") == 1);
    /* 1 byte of room, and the text starts with a two-byte character. */
    CHECK(iopub(exe, "stream", "{\"name\": \"stderr\", \"text\": \"\\u00e9x\"}") == 1);
    CHECK(iopub(exe, "display_data", "{\"data\": {\"text/plain\": \"big\"}, \"metadata\": {}}")
          == 1);
    CHECK(ev.count == 3);
    if (ev.count == 3) {
        CHECK(ev.type[0] == KB_EVENT_STDOUT && json_is(ev.data[0], "{\"text\": \"123456\"}"));
        CHECK(ev.type[1] == KB_EVENT_STDOUT && json_is(ev.data[1], "{\"text\": \"abc\"}"));
        CHECK(ev.type[2] == KB_EVENT_SYSTEM
              && json_is(ev.data[2], "{\"text\": \"output beyond 10 bytes was dropped\"}"));
    }
    /* A clear gives the room back; the notice is not repeated. */
    CHECK(iopub(exe, "clear_output", "{\"wait\": false}") == 1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stderr\", \"text\": \"after\"}") == 1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stderr\", \"text\": \"123456\"}") == 1);
    CHECK(ev.count == 6);
    if (ev.count == 6) {
        CHECK(ev.type[3] == KB_EVENT_CLEAR_OUTPUT);
        CHECK(ev.type[4] == KB_EVENT_STDERR && json_is(ev.data[4], "{\"text\": \"after\"}"));
        CHECK(ev.type[5] == KB_EVENT_STDERR && json_is(ev.data[5], "{\"text\": \"12345\"}"));
    }
    json_t *json = finish_json(exe, NULL);
    CHECK(json_is(json_object_get(json, "logs"), "{\"stdout\": \"\", \"stderr\": \"after12345\"}"));
    CHECK(json_is_true(json_object_get(json, "truncated")));
    json_decref(json);
    kb_execution_destroy(&exe);
    events_reset(&ev);

    /* Outputs count by their bundle; an update that would overflow is
       dropped, one that fits replaces. */
    exe = new_run(&ev, 100, false);
    CHECK(iopub(exe, "display_data",
                "{\"data\": {\"text/plain\": \"small\"}, \"metadata\": {},"
                " \"transient\": {\"display_id\": \"d\"}}")
          == 1);
    CHECK(iopub(exe, "update_display_data",
                "{\"data\": {\"text/plain\": \"" /* 120 bytes */
                "0123456789012345678901234567890123456789012345678901234567890123456789"
                "01234567890123456789012345678901234567890123456789\"},"
                " \"metadata\": {}, \"transient\": {\"display_id\": \"d\"}}")
          == 1);
    CHECK(iopub(exe, "update_display_data",
                "{\"data\": {\"text/plain\": \"medium size\"}, \"metadata\": {},"
                " \"transient\": {\"display_id\": \"d\"}}")
          == 1);
    CHECK(ev.count == 3);
    if (ev.count == 3) {
        CHECK(ev.type[0] == KB_EVENT_DISPLAY);
        CHECK(ev.type[1] == KB_EVENT_SYSTEM);
        CHECK(ev.type[2] == KB_EVENT_DISPLAY_UPDATE);
    }
    json = finish_json(exe, NULL);
    CHECK_STR(json_string_value(
                  json_object_get(json_array_get(json_object_get(json, "results"), 0), "text")),
              "medium size");
    CHECK(json_is_true(json_object_get(json, "truncated")));
    json_decref(json);
    kb_execution_destroy(&exe);
    events_reset(&ev);

    /* Under the cap: not truncated, no notice. */
    exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"fine\"}") == 1);
    json = finish_json(exe, NULL);
    CHECK(json_is_false(json_object_get(json, "truncated")));
    CHECK(ev.count == 1);
    json_decref(json);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

static void test_set_error_and_system(void)
{
    events_t ev;
    /* The kernel's error stays unless forced. */
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "error", "{\"ename\": \"KeyboardInterrupt\", \"evalue\": \"\"}") == 1);
    kb_execution_set_error(exe, "KernelDied", "kernel died", false);
    CHECK(ev.count == 1);
    kb_execution_set_error(exe, "TimeoutError", "run exceeded 1.5 s", true);
    CHECK(ev.count == 2 && ev.type[1] == KB_EVENT_ERROR);
    CHECK(ev.count == 2
          && json_is(ev.data[1], "{\"name\": \"TimeoutError\", \"value\":"
                                 " \"run exceeded 1.5 s\", \"traceback\": []}"));
    kb_execution_system(exe, "interrupt sent");
    CHECK(ev.count == 3 && ev.type[2] == KB_EVENT_SYSTEM);
    CHECK(ev.count == 3 && json_is(ev.data[2], "{\"text\": \"interrupt sent\"}"));
    kb_result_t *result
        = kb_execution_finish(exe, KB_REASON_TIMED_OUT, -1, "SIGINT", "interrupted after timeout");
    CHECK(result->error && strcmp(result->error->name, "TimeoutError") == 0);
    CHECK(!result->has_exit_code);
    CHECK_STR(result->signal, "SIGINT");
    CHECK_STR(result->raw_reason, "interrupted after timeout");
    CHECK(result->stdout_len == 0); /* system lines are not kept */
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);

    /* No kernel error: set. */
    exe = new_run(&ev, 0, false);
    CHECK(!kb_execution_has_error(exe));
    kb_execution_set_error(exe, "KernelDied", "kernel exited with status 1", false);
    CHECK(kb_execution_has_error(exe));
    CHECK(ev.count == 1 && ev.type[0] == KB_EVENT_ERROR);
    kb_execution_destroy(&exe); /* destroyed unfinished: no leak */
    events_reset(&ev);

    /* A held-back reply error counts as the kernel's. */
    exe = new_run(&ev, 0, false);
    CHECK(shell(exe, "{\"status\": \"error\", \"ename\": \"ZeroDivisionError\"}") == 1);
    kb_execution_set_error(exe, "KernelDied", "gone", false);
    CHECK(ev.count == 1
          && json_is(ev.data[0],
                     "{\"name\": \"ZeroDivisionError\", \"value\": \"\", \"traceback\": []}"));
    kb_execution_destroy(&exe);
    events_reset(&ev);

    /* No emit function at all. */
    exe = kb_execution_new(RUN_ID, NULL, NULL, NULL);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"quiet\"}") == 1);
    kb_execution_system(exe, "line");
    kb_execution_set_error(exe, "SandboxStopped", "daemon stopped", false);
    result = kb_execution_finish(exe, KB_REASON_SANDBOX_STOPPED, -1, NULL, NULL);
    CHECK_STR(result->stdout_text, "quiet");
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    kb_execution_destroy(&exe); /* twice: safe */
    kb_execution_destroy(NULL);
}

/*  Every key of obj, sorted, as one comma-separated string. */
static char *keys_of(json_t *obj)
{
    static char buf[512];
    json_t *sorted = json_array();
    const char *key;
    json_t *value;
    json_object_foreach(obj, key, value)
    {
        json_array_append_new(sorted, json_string(key));
    }
    /* Insertion sort of a handful of keys. */
    size_t n = json_array_size(sorted);
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
            json_t *a = json_array_get(sorted, j - 1), *b = json_array_get(sorted, j);
            if (strcmp(json_string_value(a), json_string_value(b)) <= 0)
                break;
            json_incref(a);
            json_array_set(sorted, j - 1, b);
            json_array_set_new(sorted, j, a);
        }
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(buf, ",");
        strcat(buf, json_string_value(json_array_get(sorted, i)));
    }
    json_decref(sorted);
    return buf;
}

static void test_to_json_shape(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "execute_input", "{\"code\": \"x\", \"execution_count\": 4}") == 1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"out\\n\"}") == 1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stderr\", \"text\": \"err\\n\"}") == 1);
    CHECK(iopub(exe, "display_data",
                "{\"data\": {\"text/plain\": [\"line 1\\n\", \"line 2\"],"
                " \"text/html\": \"<p>hi</p>\", \"image/png\": \"iVBORw0KGgo=\","
                " \"image/svg+xml\": [\"<svg>\", \"</svg>\"],"
                " \"application/json\": {\"a\": [1, 2, null]}},"
                " \"metadata\": {\"isolated\": true}, \"transient\": {\"display_id\": \"dd\"}}")
          == 1);
    CHECK(iopub(exe, "execute_result",
                "{\"data\": {\"text/plain\": \"2\"}, \"metadata\": {}, \"execution_count\": 4}")
          == 1);
    CHECK(shell(exe, "{\"status\": \"ok\", \"execution_count\": 4}") == 1);
    CHECK(idle(exe) == 1);
    CHECK(kb_execution_complete(exe));
    kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED, 0, NULL, NULL);
    result->process_id = strdup("prc_1");
    result->sandbox_id = strdup("sb_1");
    result->context_id = strdup("default-python");
    result->language = strdup("python");
    json_t *live = kb_result_to_json(result);
    /* Through text, as a client sees it. */
    char *text = json_dumps(live, JSON_COMPACT);
    json_t *json = json_loads(text, 0, NULL);
    free(text);
    json_decref(live);
    CHECK(json != NULL);
    CHECK_STR(keys_of(json),
              "context,error,execution_count,logs,process,resources,results,truncated");
    json_t *process = json_object_get(json, "process");
    CHECK_STR(keys_of(process), "exit_code,process_id,raw_reason,reason,signal");
    CHECK(json_is(process, "{\"process_id\": \"prc_1\", \"exit_code\": 0, \"signal\": null,"
                           " \"reason\": \"exited\", \"raw_reason\": null}"));
    json_t *results = json_object_get(json, "results");
    CHECK(json_array_size(results) == 2);
    json_t *first = json_array_get(results, 0);
    CHECK_STR(keys_of(first), "data,display_id,html,is_main_result,json,metadata,png,svg,text");
    CHECK(json_is(first, "{\"data\": {\"text/plain\": [\"line 1\\n\", \"line 2\"],"
                         " \"text/html\": \"<p>hi</p>\", \"image/png\": \"iVBORw0KGgo=\","
                         " \"image/svg+xml\": [\"<svg>\", \"</svg>\"],"
                         " \"application/json\": {\"a\": [1, 2, null]}},"
                         " \"is_main_result\": false, \"text\": \"line 1\\nline 2\","
                         " \"html\": \"<p>hi</p>\", \"png\": \"iVBORw0KGgo=\","
                         " \"svg\": \"<svg></svg>\", \"json\": {\"a\": [1, 2, null]},"
                         " \"metadata\": {\"isolated\": true}, \"display_id\": \"dd\"}"));
    json_t *second = json_array_get(results, 1);
    CHECK_STR(keys_of(second), "data,html,is_main_result,json,metadata,png,svg,text");
    CHECK(json_is(second, "{\"data\": {\"text/plain\": \"2\"}, \"is_main_result\": true,"
                          " \"text\": \"2\", \"html\": null, \"png\": null, \"svg\": null,"
                          " \"json\": null, \"metadata\": {}}"));
    CHECK(
        json_is(json_object_get(json, "logs"), "{\"stdout\": \"out\\n\", \"stderr\": \"err\\n\"}"));
    CHECK(json_is(json_object_get(json, "error"), "null"));
    CHECK(json_is(json_object_get(json, "execution_count"), "4"));
    CHECK(json_is(json_object_get(json, "context"),
                  "{\"sandbox_id\": \"sb_1\", \"context_id\":"
                  " \"default-python\", \"language\": \"python\"}"));
    CHECK(json_is(json_object_get(json, "truncated"), "false"));
    /* The JSON shares nothing with the result: changing it leaves the
       result as it was. */
    json_t *again = kb_result_to_json(result);
    json_object_set_new(
        json_object_get(json_array_get(json_object_get(again, "results"), 0), "data"), "text/plain",
        json_string("changed"));
    CHECK(json_is(result->outputs[0].data, "{\"text/plain\": [\"line 1\\n\", \"line 2\"],"
                                           " \"text/html\": \"<p>hi</p>\", \"image/png\":"
                                           " \"iVBORw0KGgo=\", \"image/svg+xml\": [\"<svg>\","
                                           " \"</svg>\"], \"application/json\": {\"a\": [1, 2,"
                                           " null]}}"));
    json_decref(again);
    json_decref(json);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);

    /* The nulls of a run that ended without anything: killed kernel. */
    exe = new_run(&ev, 0, false);
    kb_execution_set_error(exe, "KernelDied", "kernel killed by SIGSEGV", false);
    result = kb_execution_finish(exe, KB_REASON_FAILED, -1, "SIGSEGV", "kernel killed by SIGSEGV");
    json = kb_result_to_json(result);
    CHECK(json_is(json, "{\"process\": {\"process_id\": null, \"exit_code\": null, \"signal\":"
                        " \"SIGSEGV\", \"reason\": \"failed\", \"raw_reason\": \"kernel killed by"
                        " SIGSEGV\"}, \"results\": [], \"logs\": {\"stdout\": \"\", \"stderr\":"
                        " \"\"}, \"error\": {\"name\": \"KernelDied\", \"value\": \"kernel killed"
                        " by SIGSEGV\", \"traceback\": []}, \"execution_count\": null,"
                        " \"context\": {\"sandbox_id\": null, \"context_id\": null, \"language\":"
                        " null}, \"truncated\": false, \"resources\": {\"wall_time_s\": 0.0,"
                        " \"cpu_time_s\": null, \"peak_memory_bytes\": null}}"));
    json_decref(json);
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
    events_reset(&ev);

    /* An empty fresh result renders too; reason none is null. */
    result = kb_result_new();
    json = kb_result_to_json(result);
    CHECK(json_is(json_object_get(json_object_get(json, "process"), "reason"), "null"));
    CHECK(json_is(json_object_get(json, "execution_count"), "null"));
    json_decref(json);
    kb_result_destroy(&result);
    kb_result_destroy(&result);
    kb_result_destroy(NULL);
}

static void test_event_order(void)
{
    events_t ev;
    kb_execution_t *exe = new_run(&ev, 0, false);
    CHECK(iopub(exe, "status", "{\"execution_state\": \"busy\"}") == 1);
    CHECK(iopub(exe, "execute_input", "{\"code\": \"c\", \"execution_count\": 1}") == 1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stdout\", \"text\": \"a\"}") == 1);
    CHECK(iopub(exe, "display_data",
                "{\"data\": {\"text/plain\": \"p\"}, \"metadata\": {},"
                " \"transient\": {\"display_id\": \"x\"}}")
          == 1);
    CHECK(iopub(exe, "update_display_data",
                "{\"data\": {\"text/plain\": \"q\"}, \"metadata\": {},"
                " \"transient\": {\"display_id\": \"x\"}}")
          == 1);
    CHECK(iopub(exe, "clear_output", "{\"wait\": true}") == 1);
    CHECK(iopub(exe, "stream", "{\"name\": \"stderr\", \"text\": \"b\"}") == 1);
    CHECK(iopub(exe, "execute_result", "{\"data\": {\"text/plain\": \"r\"}, \"metadata\": {}}")
          == 1);
    CHECK(iopub(exe, "error", "{\"ename\": \"E\", \"evalue\": \"v\", \"traceback\": [\"t\"]}")
          == 1);
    kb_execution_system(exe, "note");
    CHECK(shell(exe, "{\"status\": \"error\", \"ename\": \"E\", \"evalue\": \"v\"}") == 1);
    CHECK(idle(exe) == 1);
    const kb_event_type_t want[]
        = { KB_EVENT_INPUT,          KB_EVENT_STDOUT,       KB_EVENT_DISPLAY,
            KB_EVENT_DISPLAY_UPDATE, KB_EVENT_CLEAR_OUTPUT, KB_EVENT_STDERR,
            KB_EVENT_DISPLAY,        KB_EVENT_ERROR,        KB_EVENT_SYSTEM };
    size_t n = sizeof want / sizeof want[0];
    CHECK(ev.count == n);
    for (size_t i = 0; i < n && i < ev.count; i++)
        CHECK(ev.type[i] == want[i]);
    if (ev.count == n) {
        CHECK(json_is(ev.data[0], "{\"execution_count\": 1}"));
        CHECK(json_is(ev.data[1], "{\"text\": \"a\"}"));
        CHECK_STR(json_string_value(json_object_get(ev.data[2], "display_id")), "x");
        CHECK(json_is(ev.data[3], "{\"display_id\": \"x\", \"data\": {\"text/plain\": \"q\"}}"));
        CHECK(json_is(ev.data[4], "{\"wait\": true}"));
        CHECK(json_is(ev.data[5], "{\"text\": \"b\"}"));
        CHECK(json_is_true(json_object_get(ev.data[6], "is_main_result")));
        CHECK(json_is(ev.data[7], "{\"name\": \"E\", \"value\": \"v\", \"traceback\": [\"t\"]}"));
        CHECK(json_is(ev.data[8], "{\"text\": \"note\"}"));
    }
    json_t *json = finish_json(exe, NULL);
    CHECK(json_is(json_object_get(json, "logs"), "{\"stdout\": \"\", \"stderr\": \"b\"}"));
    CHECK(json_array_size(json_object_get(json, "results")) == 1);
    CHECK(json_is(json_object_get(json_object_get(json, "process"), "exit_code"), "1"));
    json_decref(json);
    kb_execution_destroy(&exe);
    events_reset(&ev);
}

static void test_many_appends(void)
{
    /* Growth of logs and outputs stays correct over many small steps. */
    kb_execution_t *exe = kb_execution_new(RUN_ID, NULL, NULL, NULL);
    for (int i = 0; i < 1000; i++) {
        char content[128];
        snprintf(content, sizeof content, "{\"name\": \"stdout\", \"text\": \"%03d\"}", i % 1000);
        CHECK(iopub(exe, "stream", content) == 1);
        snprintf(content, sizeof content, "{\"data\": {\"text/plain\": \"%d\"}, \"metadata\": {}}",
                 i);
        CHECK(iopub(exe, "display_data", content) == 1);
    }
    kb_result_t *result = kb_execution_finish(exe, KB_REASON_EXITED, 0, NULL, NULL);
    CHECK(result->stdout_len == 3000);
    CHECK(strlen(result->stdout_text) == 3000);
    CHECK(strncmp(result->stdout_text + 2997, "999", 3) == 0);
    CHECK(result->outputs_len == 1000);
    CHECK_STR(json_string_value(json_object_get(result->outputs[999].data, "text/plain")), "999");
    kb_result_destroy(&result);
    kb_execution_destroy(&exe);
}

/*  A stream message as the wire hands it out with lazy streams: content
    {} and the frame's bytes in raw_content. */
static int iopub_raw(kb_execution_t *exe, const char *content)
{
    kb_msg_t *msg = make_msg("stream", RUN_ID, "{}");
    msg->raw_content.data = (unsigned char *)content;
    msg->raw_content.size = strlen(content);
    int rc = kb_execution_fold_iopub(exe, msg);
    free_msg(msg);
    return rc;
}

/*  Events with a log: text events carry a cursor of the log. */
typedef struct {
    kb_event_type_t type[16];
    long long cursor[16];
    size_t count;
} cursors_t;

static void record_cursor(kb_event_type_t type, json_t *data, long long cursor, void *arg)
{
    cursors_t *seen = arg;
    json_decref(data);
    if (seen->count < 16) {
        seen->type[seen->count] = type;
        seen->cursor[seen->count++] = cursor;
    }
}

static void test_scanned_streams_into_a_log(void)
{
    kb_budget_t budget = { .limit = 0 };
    kb_runlog_t *log = kb_runlog_new(&budget);
    cursors_t seen = { .count = 0 };
    kb_execution_opts_t opts = { .max_output_bytes = 10, .log = log };
    kb_execution_t *exe = kb_execution_new(RUN_ID, &opts, record_cursor, &seen);
    CHECK(iopub_raw(exe, "{\"name\": \"stdout\", \"text\": \"ab\\n\\u00e9\"}") == 1);
    CHECK(iopub_raw(exe, "{\"text\": [\"123\", \"456789\"], \"name\": \"stderr\"}") == 1);
    /* past the cap: counted, not kept */
    CHECK(iopub_raw(exe, "{\"name\": \"stdout\", \"text\": \"0123456789\"}") == 1);
    /* malformed frames and unknown names are the caller's to count */
    CHECK(iopub_raw(exe, "{\"name\": \"stdout\", \"text\": \"a\nb\"}") == -1);
    CHECK(iopub_raw(exe, "{\"name\": \"other\", \"text\": \"x\"}") == -1);
    CHECK(iopub_raw(exe, "{\"name\": \"stdout\"}") == -1);
    CHECK(kb_runlog_view_len(log, KB_LOG_STDOUT) == 5); /* "ab\n" and the 2-byte e-acute */
    CHECK(kb_runlog_view_len(log, KB_LOG_STDERR) == 5); /* 10 - 5: "12345" */
    kb_result_t *r = kb_execution_finish(exe, KB_REASON_EXITED, 0, NULL, NULL);
    CHECK(r->truncated);
    CHECK(r->stdout_len == 0); /* the log holds the text */
    size_t len = 0;
    char *text = kb_runlog_view_copy(log, KB_LOG_STDERR, &len);
    CHECK(text && strcmp(text, "12345") == 0);
    free(text);
    /* events: stdout, stderr, then the notice, and at the end the count */
    CHECK(seen.count == 4);
    CHECK(seen.type[0] == KB_EVENT_STDOUT && seen.cursor[0] == 0);
    CHECK(seen.type[1] == KB_EVENT_STDERR && seen.cursor[1] == 1);
    CHECK(seen.type[2] == KB_EVENT_SYSTEM && seen.type[3] == KB_EVENT_SYSTEM);
    json_t *last = kb_runlog_frame_json(log, seen.cursor[3]);
    CHECK(json_is(json_object_get(last, "channel"), "\"system\""));
    const char *line = json_string_value(json_object_get(last, "data"));
    /* 4 bytes of "456789" and all 10 of "0123456789" */
    CHECK(line && strncmp(line, "14 bytes of output were dropped", 31) == 0);
    json_decref(last);
    /* the result document escapes the log as jansson would */
    json_t *head = kb_result_to_json(r);
    kb_result_doc_t *doc = kb_result_doc_new(head, log);
    char buf[4096];
    size_t n = 0, got;
    while ((got = kb_result_doc_read(doc, buf + n, 16)) > 0 && got != (size_t)-1)
        n += got;
    buf[n] = '\0';
    json_t *whole = kb_result_doc_json(doc);
    json_t *parsed = json_loads(buf, 0, NULL);
    CHECK(parsed && json_equal(parsed, whole));
    CHECK(json_is(json_object_get(json_object_get(parsed, "logs"), "stdout"), "\"ab\\n\\u00e9\""));
    json_decref(parsed);
    json_decref(whole);
    kb_result_doc_destroy(&doc);
    json_decref(head);
    kb_result_destroy(&r);
    kb_execution_destroy(&exe);
    kb_runlog_unref(&log);
    CHECK(atomic_load(&budget.used) == 0); /* the last reference gave everything back */
}

/*  The result document's stdout is escaped as jansson's json_dumps escapes
    the same string, whatever the bytes and wherever a read of the
    document ends: every byte value that needs an escape at every offset
    of an 8-byte word, UTF-8 of 2 to 4 bytes, long runs without escapes,
    read in pieces of 16 bytes (the least a reader may ask) to 80. */
static char *s_doc_text(kb_runlog_t *log, size_t piece)
{
    json_t *head = json_pack("{s:s, s:{}, s:b}", "status", "ok", "logs", "truncated", 0);
    kb_result_doc_t *doc = kb_result_doc_new(head, log);
    kb_buf_t out;
    kb_buf_init(&out, 0);
    char buf[128];
    size_t got;
    while ((got = kb_result_doc_read(doc, buf, piece)) > 0 && got != (size_t)-1)
        kb_buf_append(&out, buf, got);
    CHECK(got == 0);
    json_t *parsed = json_loadb(out.data, out.len, 0, NULL);
    CHECK(parsed != NULL);
    char *stdout_json = parsed
                            ? json_dumps(json_object_get(json_object_get(parsed, "logs"), "stdout"),
                                         JSON_ENCODE_ANY)
                            : NULL;
    /* the raw bytes between "stdout":" and ","stderr" as the document has them */
    kb_buf_putc(&out, '\0');
    const char *from = strstr(out.data, "\"stdout\":\"");
    const char *to = from ? strstr(from, "\",\"stderr\"") : NULL;
    char *raw = from && to ? strndup(from + 10, (size_t)(to - from - 10)) : NULL;
    CHECK(raw && stdout_json && strlen(stdout_json) == strlen(raw) + 2
          && strncmp(stdout_json + 1, raw, strlen(raw)) == 0);
    free(stdout_json);
    json_decref(parsed);
    kb_buf_free(&out);
    kb_result_doc_destroy(&doc);
    json_decref(head);
    return raw;
}

static void test_the_document_escapes_as_jansson(void)
{
    kb_buf_t text;
    kb_buf_init(&text, 0);
    static const char specials[] = { '"', '\\', '\n', '\r', '\t', '\b', '\f', 0x01, 0x1f, 0x7f };
    for (size_t k = 0; k < sizeof specials; k++)
        for (size_t at = 0; at < 9; at++) { /* every offset in a word, and past it */
            for (size_t j = 0; j < at; j++)
                kb_buf_putc(&text, (char)('a' + (char)j));
            kb_buf_putc(&text, specials[k]);
        }
    kb_buf_puts(&text, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 ");
    for (int j = 0; j < 300; j++) /* a long run without escapes */
        kb_buf_putc(&text, (char)('A' + j % 26));
    uint32_t seed = 12345; /* 2,000 pseudo-random ASCII bytes, controls among them */
    for (int j = 0; j < 2000; j++) {
        seed = seed * 1103515245u + 12345u;
        kb_buf_putc(&text, (char)(1 + (seed >> 16) % 127));
    }
    kb_buf_puts(&text, "\"end\\");
    json_t *want = json_stringn(text.data, text.len);
    char *want_text = json_dumps(want, JSON_ENCODE_ANY);
    for (size_t piece = 16; piece <= 80; piece++) {
        kb_runlog_t *log = kb_runlog_new(NULL);
        CHECK(kb_runlog_append(log, KB_LOG_STDOUT, text.data, text.len, NULL, NULL) == text.len);
        char *got = s_doc_text(log, piece);
        CHECK(got && want_text && strlen(want_text) == strlen(got) + 2
              && strncmp(want_text + 1, got, strlen(got)) == 0);
        free(got);
        kb_runlog_unref(&log);
    }
    free(want_text);
    json_decref(want);
    kb_buf_free(&text);
}

int main(void)
{
    RUN_TEST(test_the_document_escapes_as_jansson);
    RUN_TEST(test_stream);
    RUN_TEST(test_display_and_execute_result);
    RUN_TEST(test_completion_orders);
    RUN_TEST(test_other_parents);
    RUN_TEST(test_update_display);
    RUN_TEST(test_clear_output_now);
    RUN_TEST(test_clear_output_wait);
    RUN_TEST(test_clear_then_error);
    RUN_TEST(test_pages);
    RUN_TEST(test_error_iopub);
    RUN_TEST(test_error_class_repr);
    RUN_TEST(test_error_reply_only);
    RUN_TEST(test_aborted);
    RUN_TEST(test_strip_ansi);
    RUN_TEST(test_output_cap);
    RUN_TEST(test_set_error_and_system);
    RUN_TEST(test_refused_message);
    RUN_TEST(test_to_json_shape);
    RUN_TEST(test_event_order);
    RUN_TEST(test_many_appends);
    RUN_TEST(test_scanned_streams_into_a_log);
    return kb_test_summary();
}
