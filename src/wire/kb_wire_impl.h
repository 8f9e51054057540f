/*  kb_wire_impl.h - what the codec's two files share: kb_wire.c (frames,
    signatures, limits, encoding) and kb_wire_json.c (a message's four
    JSON parts). Private to src/wire. */
#ifndef KB_WIRE_IMPL_H_INCLUDED
#define KB_WIRE_IMPL_H_INCLUDED

#include "wire/kb_wire.h"

/*  Read a message's header, parent_header, metadata and content frames
    (borrowed; content stays borrowed as raw_content when lazy_stream and
    the message is a stream) into msg, a new zeroed message: each checked
    as kb_wire_load_object would, in that order, the ids set and checked,
    the first three kept as their bytes for kb_msg_header() and the
    others. 0, or -1 with the reason in why; msg is then for
    kb_msg_destroy. */
int kb_wire_read_parts(kb_msg_t *msg, const kb_frame_t parts[4], bool lazy_streams,
                       kb_error_t *why);

#endif
