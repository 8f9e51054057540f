/*  kb_mcp_tools.h - private to the MCP server (kb_mcp*.c): the tools, each
    with its input and output JSON schemas, and what calling one does (a
    call of the public C API, as the native route makes it); a run's
    result as MCP content (kb_mcp_content.c). */
#ifndef KB_MCP_TOOLS_H_INCLUDED
#define KB_MCP_TOOLS_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/kb_mcp.h"

/*  One tools/call (built whole by kb_mcp.c; read here). */
typedef struct kb_mcp_call {
    kb_mcp_t *mcp;
    kb_service_t *service;
    kb_mcp_session_t *session;
    const json_t *request_id;     /* borrowed */
    const json_t *progress_token; /* borrowed; NULL: no progress asked */
    kb_mcp_send_fn *send;         /* may be NULL */
    void *arg;
    size_t max_text;
} kb_mcp_call_t;

/*  Why a call got no result: a JSON-RPC error (rpc), our code, the
    argument at fault. */
typedef struct {
    int rpc;
    kb_code_t code;
    char field[64];
    char message[1024];
} kb_mcp_fault_t;

/*  {tools: [...]}, each {name, title, description, inputSchema,
    outputSchema, annotations}. Caller owns. */
json_t *kb_mcp_tools_list(void);

/*  Call the tool params names with its arguments: the CallToolResult
    (caller owns; isError for a run that ended in an error and for the
    service's refusals), or NULL with fault set (-32602: unknown tool,
    arguments that do not fit the schema or the values' rules). */
json_t *kb_mcp_tools_call(const kb_mcp_call_t *call, const json_t *params, kb_mcp_fault_t *fault);

/*  A run's InterpreterResult (borrowed) as a CallToolResult: content
    items (text for stdout, stderr, results and the error, ANSI removed;
    images; HTML and SVG as embedded resources) within max_text bytes of
    text, the logs in structuredContent within the same bound, isError
    when it ended in an error. Caller owns. */
json_t *kb_mcp_run_result(const json_t *result, size_t max_text);

/*  Remove ANSI escape sequences from text, in place. */
void kb_mcp_strip_ansi(char *text);

/*  The session's calls in flight, for notifications/cancelled
    (kb_mcp.c): begin, the run's process id known (true when it was
    cancelled before: interrupt it now), end. */
void kb_mcp_session_call_begin(kb_mcp_t *self, kb_mcp_session_t *session, const json_t *id);
bool kb_mcp_session_call_started(kb_mcp_t *self, kb_mcp_session_t *session, const json_t *id,
                                 const char *process_id);
void kb_mcp_session_call_end(kb_mcp_t *self, kb_mcp_session_t *session, const json_t *id);

#endif
