/*  kb_frames.c - large frames' text in a file per record, beside state.db.
    See kb_frames.h.
*/
#include "state/kb_frames.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KB_FRAMES_ID_MAX 100

struct kb_frames {
    char *dir;
    int fd;                             /* the file appended to in this transaction, or -1 */
    char id[KB_FRAMES_ID_MAX + 1];      /* whose it is */
    long long size;                     /* its length */
    char (*gone)[KB_FRAMES_ID_MAX + 1]; /* forgotten since the last commit */
    size_t ngone, gone_alloc;
};

kb_frames_t *kb_frames_new(const char *dir)
{
    kb_frames_t *self = calloc(1, sizeof *self);
    if (!self || !(self->dir = strdup(dir))) {
        free(self);
        errno = ENOMEM;
        return NULL;
    }
    self->fd = -1;
    return self;
}

void kb_frames_destroy(kb_frames_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kb_frames_t *self = *self_p;
    *self_p = NULL;
    if (self->fd >= 0)
        close(self->fd);
    free(self->gone);
    free(self->dir);
    free(self);
}

bool kb_frames_wants(const char *record_id, size_t len)
{
    if (len < KB_FRAMES_MIN || !record_id)
        return false;
    size_t n = strspn(record_id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                 "0123456789_-");
    return n > 0 && n <= KB_FRAMES_ID_MAX && record_id[n] == '\0';
}

/*  The path of record_id's file (an id kb_frames_wants) in path. */
static void s_path(kb_frames_t *self, const char *record_id, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", self->dir, record_id);
}

static void s_close(kb_frames_t *self)
{
    if (self->fd >= 0)
        close(self->fd);
    self->fd = -1;
    self->id[0] = '\0';
}

/*  record_id's file open for appending, its length known. */
static int s_open(kb_frames_t *self, const char *record_id)
{
    if (self->fd >= 0 && strcmp(self->id, record_id) == 0)
        return 0;
    s_close(self);
    if (mkdir(self->dir, 0700) != 0 && errno != EEXIST)
        return -1;
    char path[PATH_MAX];
    s_path(self, record_id, path, sizeof path);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    self->fd = fd;
    self->size = end;
    snprintf(self->id, sizeof self->id, "%s", record_id);
    return 0;
}

int kb_frames_append(kb_frames_t *self, const char *record_id, const void *text, size_t len,
                     long long *at_out)
{
    if (!kb_frames_wants(record_id, KB_FRAMES_MIN)) {
        errno = EINVAL;
        return -1;
    }
    if (s_open(self, record_id) != 0)
        return -1;
    long long at = self->size;
    for (size_t done = 0; done < len;) {
        ssize_t n = pwrite(self->fd, (const char *)text + done, len - done, at + (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            if (ftruncate(self->fd, at) != 0)
                s_close(self); /* its length is not known now: found again at the next */
            errno = e;
            return -1;
        }
        done += (size_t)n;
    }
    self->size = at + (long long)len;
    *at_out = at;
    return 0;
}

long long kb_frames_read(kb_frames_t *self, const char *record_id, long long at, size_t len,
                         kb_buf_t *into)
{
    kb_buf_reset(into);
    if (!kb_frames_wants(record_id, KB_FRAMES_MIN) || at < 0) {
        errno = EINVAL;
        return -1;
    }
    char path[PATH_MAX];
    s_path(self, record_id, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    char chunk[64 * 1024];
    long long got = 0;
    while ((size_t)got < len) {
        size_t want = len - (size_t)got < sizeof chunk ? len - (size_t)got : sizeof chunk;
        ssize_t n = pread(fd, chunk, want, at + got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (n > 0 && kb_buf_append(into, chunk, (size_t)n) != KB_BUF_OK)) {
            int e = n < 0 ? errno : ENOMEM;
            close(fd);
            errno = e;
            return -1;
        }
        if (n == 0)
            break; /* shorter than the row says */
        got += n;
    }
    close(fd);
    return got;
}

int kb_frames_forget(kb_frames_t *self, const char *record_id)
{
    if (!kb_frames_wants(record_id, KB_FRAMES_MIN))
        return 0; /* never had a file */
    if (self->ngone == self->gone_alloc) {
        size_t alloc = self->gone_alloc ? 2 * self->gone_alloc : 8;
        void *grown = realloc(self->gone, alloc * sizeof *self->gone);
        if (!grown) {
            errno = ENOMEM;
            return -1;
        }
        self->gone = grown;
        self->gone_alloc = alloc;
    }
    snprintf(self->gone[self->ngone++], sizeof self->gone[0], "%s", record_id);
    return 0;
}

void kb_frames_commit(kb_frames_t *self)
{
    s_close(self); /* no descriptor held between transactions */
    for (size_t i = 0; i < self->ngone; i++) {
        char path[PATH_MAX];
        s_path(self, self->gone[i], path, sizeof path);
        unlink(path); /* ENOENT: it had no large frame */
    }
    self->ngone = 0;
}

void kb_frames_rollback(kb_frames_t *self)
{
    s_close(self);
    self->ngone = 0;
}

int kb_frames_sweep(kb_frames_t *self, kb_frames_keep_fn keep, void *arg)
{
    s_close(self);
    DIR *dir = opendir(self->dir);
    if (!dir)
        return errno == ENOENT ? 0 : -1;
    int removed = 0;
    for (struct dirent *entry; (entry = readdir(dir));) {
        const char *name = entry->d_name;
        if (name[0] == '.' || !kb_frames_wants(name, KB_FRAMES_MIN) || keep(name, arg))
            continue;
        if (unlinkat(dirfd(dir), name, 0) == 0)
            removed++;
    }
    closedir(dir);
    return removed;
}
