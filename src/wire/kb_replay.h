/*  kb_replay.h - private to src/wire: the replay guard of the codec, a
    bounded history of the signatures of accepted messages. A fingerprint
    is the first KB_REPLAY_FINGERPRINT_SIZE bytes of a verified HMAC, which
    an attacker cannot choose, so it also serves as the hash directly.

    Not for verifying anything: the codec only asks whether it saw a
    fingerprint and remembers those of messages it accepted. A kb_replay_t
    is a value inside its kb_wire_t, zeroed when empty; not thread-safe. */
#ifndef KB_REPLAY_H_INCLUDED
#define KB_REPLAY_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KB_REPLAY_FINGERPRINT_SIZE 16
/*  Ring indexes are stored as uint32_t in the hash index. */
#define KB_REPLAY_MAX_WINDOW ((size_t)1 << 30)

typedef struct {
    unsigned char (*ring)[KB_REPLAY_FINGERPRINT_SIZE];
    size_t ring_cap; /* entries allocated */
    size_t len;      /* entries in use */
    size_t oldest;   /* next entry to overwrite once len == window */
    size_t window;   /* most entries remembered, <= KB_REPLAY_MAX_WINDOW */
    uint32_t *slots; /* ring index + 1; 0 is an empty slot */
    size_t slots_mask;
} kb_replay_t;

/*  Free what the history holds and zero it. */
void kb_replay_free(kb_replay_t *replay);

/*  True when fingerprint (KB_REPLAY_FINGERPRINT_SIZE bytes, borrowed) is
    remembered. */
bool kb_replay_contains(const kb_replay_t *replay, const unsigned char *fingerprint);

/*  Remember a fingerprint not yet in the history (window must be > 0),
    forgetting the oldest one once the window is full. Never fails: short
    of memory, the window shrinks to the entries already held. */
void kb_replay_insert(kb_replay_t *replay, const unsigned char *fingerprint);

/*  Change the window, keeping the newest entries that still fit. */
void kb_replay_set_window(kb_replay_t *replay, size_t window);

#endif
