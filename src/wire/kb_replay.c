/*  kb_replay.c - the replay guard of the wire codec (see kb_replay.h): the
    fingerprints of the last `window` accepted signatures, in a ring (oldest
    overwritten first) indexed by an open-addressing hash table with linear
    probing. Memory grows with use (kb_buf's growth rule), up to about 24
    bytes per remembered signature; short of memory the window shrinks to
    what is held rather than fail a message.

    Not for signatures themselves or for deciding what to reject: the codec
    (kb_wire.c) verifies, asks and remembers. Pure code: no I/O, no clock. */
#include "wire/kb_replay.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "util/kb_buf.h"

/*  The first allocation of the ring, in fingerprints. */
#define KB_REPLAY_MIN_RING 64

void kb_replay_free(kb_replay_t *replay)
{
    free(replay->ring);
    free(replay->slots);
    memset(replay, 0, sizeof *replay);
}

static size_t replay_home(const kb_replay_t *replay, const unsigned char *fingerprint)
{
    uint64_t hash;
    memcpy(&hash, fingerprint, sizeof hash);
    return (size_t)hash & replay->slots_mask;
}

bool kb_replay_contains(const kb_replay_t *replay, const unsigned char *fingerprint)
{
    if (!replay->slots)
        return false;
    for (size_t i = replay_home(replay, fingerprint);; i = (i + 1) & replay->slots_mask) {
        uint32_t slot = replay->slots[i];
        if (slot == 0)
            return false;
        if (memcmp(replay->ring[slot - 1], fingerprint, KB_REPLAY_FINGERPRINT_SIZE) == 0)
            return true;
    }
}

static void replay_index(kb_replay_t *replay, size_t ring_index)
{
    size_t i = replay_home(replay, replay->ring[ring_index]);
    while (replay->slots[i] != 0)
        i = (i + 1) & replay->slots_mask;
    replay->slots[i] = (uint32_t)(ring_index + 1);
}

/*  Remove ring_index from the table by backward-shift deletion, which keeps
    every probe chain unbroken without tombstones. */
static void replay_unindex(kb_replay_t *replay, size_t ring_index)
{
    size_t mask = replay->slots_mask;
    size_t i = replay_home(replay, replay->ring[ring_index]);
    while (replay->slots[i] != ring_index + 1)
        i = (i + 1) & mask;
    for (size_t j = i;;) {
        j = (j + 1) & mask;
        if (replay->slots[j] == 0)
            break;
        size_t home = replay_home(replay, replay->ring[replay->slots[j] - 1]);
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (stays)
            continue;
        replay->slots[i] = replay->slots[j];
        i = j;
    }
    replay->slots[i] = 0;
}

/*  Make room for one more entry below the window. Returns false when memory
    is short; the caller then recycles the oldest entry instead. */
static bool replay_grow(kb_replay_t *replay)
{
    size_t ring_cap;
    if (kb_buf_grow_rule(replay->ring_cap, replay->len + 1, KB_REPLAY_MIN_RING, replay->window,
                         sizeof *replay->ring, &ring_cap)
        != KB_BUF_OK)
        return false;
    size_t slots_size = 1;
    while (slots_size < ring_cap * 2)
        slots_size <<= 1;
    uint32_t *slots = calloc(slots_size, sizeof *slots);
    if (!slots)
        return false;
    void *ring = realloc(replay->ring, ring_cap * sizeof *replay->ring);
    if (!ring) {
        free(slots);
        return false;
    }
    replay->ring = ring;
    replay->ring_cap = ring_cap;
    free(replay->slots);
    replay->slots = slots;
    replay->slots_mask = slots_size - 1;
    for (size_t k = 0; k < replay->len; k++)
        replay_index(replay, k);
    return true;
}

/*  Remember a fingerprint not yet in the history (window must be > 0). */
void kb_replay_insert(kb_replay_t *replay, const unsigned char *fingerprint)
{
    assert(replay->window > 0);
    if (replay->len < replay->window && replay->len == replay->ring_cap && !replay_grow(replay)) {
        if (replay->len == 0)
            return;                   /* no memory for even one entry: nothing to remember */
        replay->window = replay->len; /* short of memory: make do with what is there */
    }
    size_t index;
    if (replay->len < replay->window) {
        index = replay->len++;
    } else {
        index = replay->oldest;
        replay_unindex(replay, index);
        replay->oldest = (replay->oldest + 1) % replay->window;
    }
    memcpy(replay->ring[index], fingerprint, KB_REPLAY_FINGERPRINT_SIZE);
    replay_index(replay, index);
}

/*  Change the window, keeping the newest entries that still fit. */
void kb_replay_set_window(kb_replay_t *replay, size_t window)
{
    if (window == replay->window)
        return;
    kb_replay_t fresh = { .window = window };
    size_t keep = replay->len < window ? replay->len : window;
    /* Entries oldest first: from `oldest` round the ring (len == window when
       the ring has wrapped; otherwise oldest is 0). */
    size_t start = (replay->oldest + (replay->len - keep)) % (replay->len ? replay->len : 1);
    for (size_t k = 0; k < keep; k++)
        kb_replay_insert(&fresh, replay->ring[(start + k) % replay->len]);
    kb_replay_free(replay);
    *replay = fresh;
}
