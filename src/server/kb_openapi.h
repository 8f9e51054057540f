/*  kb_openapi.h - private to src/server: the native API's OpenAPI document
    (api/openapi.yaml) as compact JSON, compiled in by the build
    (cmake/openapi_json.py), served at GET /openapi.json. Constant. */
#ifndef KB_OPENAPI_H_INCLUDED
#define KB_OPENAPI_H_INCLUDED

#include <stddef.h>

/*  The document's JSON, kb_openapi_json_len bytes, NUL-terminated. */
extern const char kb_openapi_json[];
extern const size_t kb_openapi_json_len;

#endif
