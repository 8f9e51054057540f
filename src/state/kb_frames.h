/*  kb_frames.h - the text of state.db's large log frames, kept beside the
    database in a dir of files, one per record, appended to.

    Why: a frame's text stored in SQLite is written twice (into the WAL,
    then by the checkpoint into the database) a page at a time, and read
    back between the two: about a second of the writer's CPU per 100 MiB of
    output, on the CPUs the kernel that makes the output needs. Appended to
    a file it is one write(2) per frame. state.db keeps the frame's row
    (its cursor, channel, times) and where its text is in the record's file.

    What it is for: kb_db's frames of KB_FRAMES_MIN bytes or more. What it
    is not for: anything read by other programs, or shared between threads
    (kb_db's rules: one thread at a time).

    The files follow the transactions of state.db: bytes are appended
    before the row that points to them is committed, and a record's file is
    removed only once the delete of its rows is committed (kb_frames_forget
    queues, kb_frames_commit removes, kb_frames_rollback keeps). A crash in
    between leaves a file that no row points to, or bytes at a file's end
    that none does: kb_frames_sweep removes such files at the next open;
    dead bytes go with their file. The dir is 0700 and its files 0600, made
    at the first append. The file appended to stays open until the
    transaction ends (kb_frames_commit, kb_frames_rollback): no descriptor
    is held between them. Every call that fails returns -1 with errno set.
*/
#ifndef KB_FRAMES_H_INCLUDED
#define KB_FRAMES_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

#include "util/kb_buf.h"

/*  Frames of this many bytes or more have their text in a file: below it a
    file's open, write and unlink cost more than the row's pages. */
#define KB_FRAMES_MIN (64 * 1024)

typedef struct kb_frames kb_frames_t;

/*  The files of dir (made at the first append); NULL when out of memory. */
kb_frames_t *kb_frames_new(const char *dir);

/*  Close the file held open and free; the files stay. */
void kb_frames_destroy(kb_frames_t **self_p);

/*  True when a frame of len bytes of record_id goes to a file: len is
    KB_FRAMES_MIN or more and the id is a file name (letters, digits, '_'
    and '-', 1 to 100 of them). */
bool kb_frames_wants(const char *record_id, size_t len);

/*  Append len bytes to record_id's file; *at_out is where they begin. On
    failure (a full disk, say) the file is cut back to where it was. */
int kb_frames_append(kb_frames_t *self, const char *record_id, const void *text, size_t len,
                     long long *at_out);

/*  Read len bytes at at of record_id's file into into (replacing its
    contents). Returns the bytes read: fewer than len when the file is
    shorter (its end was lost with the machine), 0 when there is no file. */
long long kb_frames_read(kb_frames_t *self, const char *record_id, long long at, size_t len,
                         kb_buf_t *into);

/*  record_id's file goes at the next commit (its rows are being deleted). */
int kb_frames_forget(kb_frames_t *self, const char *record_id);

/*  The transaction is committed: close the file appended to, and remove
    the files forgotten since the last commit or rollback. */
void kb_frames_commit(kb_frames_t *self);

/*  The transaction is rolled back: close the file appended to, and keep
    the files forgotten. */
void kb_frames_rollback(kb_frames_t *self);

/*  Remove every file of dir whose record keep(record_id, arg) says has no
    row that points to it; the count removed, or -1. No dir: 0. */
typedef bool (*kb_frames_keep_fn)(const char *record_id, void *arg);
int kb_frames_sweep(kb_frames_t *self, kb_frames_keep_fn keep, void *arg);

#endif
