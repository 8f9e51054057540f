/*  kb_cgroup_parse.c - the pure half of kb_cgroup.h: the texts of
    /proc/<pid>/cgroup, /proc/self/mountinfo, cgroup.controllers and the
    flat keyed files (memory.events, pids.events, cgroup.events), and the
    names a kernel's cgroup may take. No file system, no globals. Not for:
    reading or writing cgroups (kb_cgroup.c).
*/
#include "kernel/kb_cgroup.h"
#include "util/kb_buf.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/*  The next line of text from *at: [*start, *start + *len), no newline. */
static bool s_next_line(const char **at, const char **start, size_t *len)
{
    if (!**at)
        return false;
    const char *nl = strchr(*at, '\n');
    *start = *at;
    *len = nl ? (size_t)(nl - *at) : strlen(*at);
    *at = nl ? nl + 1 : *at + *len;
    return true;
}

/*  Absolute, no empty, "." or ".." component ("/" itself is fine). */
static bool s_path_ok(const char *path)
{
    if (path[0] != '/')
        return false;
    if (path[1] == 0)
        return true;
    const char *c = path + 1;
    for (;;) {
        const char *end = strchr(c, '/');
        size_t n = end ? (size_t)(end - c) : strlen(c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        if (!end)
            return true;
        c = end + 1;
    }
}

int kb_cgroup_parse_proc(const char *text, char *path, size_t pathlen, kb_error_t *err)
{
    const char *at = text, *line;
    size_t len;
    int found = 0, lineno = 0;
    while (s_next_line(&at, &line, &len)) {
        lineno++;
        if (len == 0)
            continue;
        const char *c1 = memchr(line, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
        if (!c2) {
            kb_error_set(err, KB_ERR_INTERNAL, "malformed line %d of /proc/self/cgroup: '%.*s'",
                         lineno, (int)(len > 80 ? 80 : len), line);
            return -1;
        }
        if (!(c1 == line + 1 && line[0] == '0'))
            continue; /* a cgroup v1 hierarchy */
        if (c2 != c1 + 1) {
            kb_error_set(err, KB_ERR_INTERNAL,
                         "malformed cgroup v2 line of /proc/self/cgroup: '%.*s'",
                         (int)(len > 80 ? 80 : len), line);
            return -1;
        }
        if (found++) {
            kb_error_set(err, KB_ERR_INTERNAL, "two cgroup v2 lines in /proc/self/cgroup");
            return -1;
        }
        size_t plen = len - (size_t)(c2 + 1 - line);
        if (plen + 1 > pathlen) {
            kb_error_set(err, KB_ERR_INTERNAL, "cgroup path too long in /proc/self/cgroup");
            return -1;
        }
        memcpy(path, c2 + 1, plen);
        path[plen] = 0;
        if (!s_path_ok(path)) {
            kb_error_set(err, KB_ERR_INTERNAL,
                         "cgroup '%s' is not a plain absolute path (outside the cgroup "
                         "namespace?)",
                         path);
            return -1;
        }
    }
    if (!found) {
        kb_error_set(err, KB_ERR_INTERNAL,
                     "no cgroup v2 entry in /proc/self/cgroup (a cgroup v1 system)");
        return -1;
    }
    return 0;
}

/*  One line of mountinfo: "id parent maj:min root mountpoint options
    [optional fields] - fstype source superoptions". */
typedef struct {
    char root[PATH_MAX];
    char point[PATH_MAX];
    char opts[256];
    char fstype[64];
    char super[256];
} kb_mount_t;

/*  Copy field [s, s+n) to out, decoding mountinfo's octal escapes (\040). */
static bool s_unescape(const char *s, size_t n, char *out, size_t outlen)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\' && i + 3 < n && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0'
            && s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
            c = (char)((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
            i += 3;
        }
        if (o + 1 >= outlen)
            return false;
        out[o++] = c;
    }
    out[o] = 0;
    return true;
}

static int s_mount_line(const char *line, size_t len, kb_mount_t *m)
{
    const char *field[32];
    size_t flen[32];
    int n = 0;
    size_t i = 0;
    while (i < len && n < 32) {
        while (i < len && line[i] == ' ')
            i++;
        if (i == len)
            break;
        field[n] = line + i;
        while (i < len && line[i] != ' ')
            i++;
        flen[n] = (size_t)(line + i - field[n]);
        n++;
    }
    int sep = -1;
    for (int f = 6; f < n; f++)
        if (flen[f] == 1 && field[f][0] == '-') {
            sep = f;
            break;
        }
    if (sep < 0 || sep + 2 >= n) /* fstype and source at least */
        return -1;
    if (!s_unescape(field[3], flen[3], m->root, sizeof m->root)
        || !s_unescape(field[4], flen[4], m->point, sizeof m->point)
        || !s_unescape(field[5], flen[5], m->opts, sizeof m->opts)
        || !s_unescape(field[sep + 1], flen[sep + 1], m->fstype, sizeof m->fstype))
        return -1;
    m->super[0] = 0;
    if (sep + 3 < n && !s_unescape(field[sep + 3], flen[sep + 3], m->super, sizeof m->super))
        return -1;
    return 0;
}

/*  Whether the comma-separated list has item. */
static bool s_has_item(const char *list, const char *item)
{
    size_t n = strlen(item);
    for (const char *c = list; *c;) {
        const char *end = strchr(c, ',');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        if (len == n && memcmp(c, item, n) == 0)
            return true;
        if (!end)
            break;
        c = end + 1;
    }
    return false;
}

/*  The part of path below root, or NULL when path is not at or below root. */
static const char *s_below(const char *path, const char *root)
{
    if (strcmp(root, "/") == 0)
        return path;
    size_t n = strlen(root);
    if (strncmp(path, root, n) != 0 || (path[n] != 0 && path[n] != '/'))
        return NULL;
    return path + n;
}

int kb_cgroup_parse_mountinfo(const char *text, const char *path, char *dir, size_t dirlen,
                              kb_error_t *err)
{
    kb_mount_t m, best;
    const char *at = text, *line;
    size_t len, best_root = 0;
    bool any = false, have = false;
    char roots[256] = "";
    while (s_next_line(&at, &line, &len)) {
        if (len == 0)
            continue;
        if (s_mount_line(line, len, &m) != 0) {
            if (memmem(line, len, "cgroup2", 7)) {
                kb_error_set(err, KB_ERR_INTERNAL, "malformed line of mountinfo: '%.*s'",
                             (int)(len > 80 ? 80 : len), line);
                return -1;
            }
            continue;
        }
        if (strcmp(m.fstype, "cgroup2") != 0)
            continue;
        any = true;
        if (!s_below(path, m.root)) {
            size_t used = strlen(roots);
            snprintf(roots + used, sizeof roots - used, "%s%s", used ? " " : "", m.root);
            continue;
        }
        size_t rlen = strcmp(m.root, "/") == 0 ? 0 : strlen(m.root);
        bool rw = !s_has_item(m.opts, "ro");
        bool best_rw = have && !s_has_item(best.opts, "ro");
        if (!have || rlen > best_root || (rlen == best_root && rw && !best_rw)) {
            best = m;
            best_root = rlen;
            have = true;
        }
    }
    if (!any) {
        kb_error_set(err, KB_ERR_INTERNAL, "no cgroup2 mount");
        return -1;
    }
    if (!have) {
        kb_error_set(err, KB_ERR_INTERNAL, "cgroup %s is outside every cgroup2 mount (roots: %s)",
                     path, roots);
        return -1;
    }
    if (s_has_item(best.opts, "ro")) {
        kb_error_set(err, KB_ERR_INTERNAL, "the cgroup2 mount at %s is read-only", best.point);
        return -1;
    }
    const char *rest = s_below(path, best.root);
    if (strcmp(rest, "/") == 0)
        rest = ""; /* the mount's root itself */
    bool point_is_slash = strcmp(best.point, "/") == 0;
    int n = snprintf(dir, dirlen, "%s%s", point_is_slash && *rest ? "" : best.point, rest);
    if (n < 0 || (size_t)n >= dirlen) {
        kb_error_set(err, KB_ERR_INTERNAL, "cgroup directory too long");
        return -1;
    }
    return 0;
}

/*  Whether the whitespace-separated list has word. */
static bool s_has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *c = list; *c;) {
        while (*c == ' ' || *c == '\n' || *c == '\t')
            c++;
        size_t len = strcspn(c, " \n\t");
        if (len == n && memcmp(c, word, n) == 0)
            return true;
        c += len;
    }
    return false;
}

int kb_cgroup_check_controllers(const char *controllers, const char *path, const char *mountinfo,
                                kb_error_t *err)
{
    static const char *const want[] = { "memory", "pids" };
    const char *missing[2];
    size_t nmissing = 0;
    for (size_t i = 0; i < 2; i++)
        if (!s_has_word(controllers, want[i]))
            missing[nmissing++] = want[i];
    if (nmissing == 0)
        return 0;
    char have[256];
    size_t h = 0;
    for (const char *c = controllers; *c && h + 1 < sizeof have;) {
        while (*c == ' ' || *c == '\n' || *c == '\t')
            c++;
        size_t len = strcspn(c, " \n\t");
        if (len > 0)
            h += (size_t)snprintf(have + h, sizeof have - h, "%s%.*s", h ? " " : "", (int)len, c);
        c += len;
    }
    if (h >= sizeof have)
        h = sizeof have - 1;
    have[h] = 0;
    char text[512];
    int n = snprintf(text, sizeof text, "controller%s %s%s%s not available in %s (have: %s)",
                     nmissing > 1 ? "s" : "", missing[0], nmissing > 1 ? ", " : "",
                     nmissing > 1 ? missing[1] : "", path, h ? have : "none");
    /* Where cgroup v1 holds them: a hybrid hierarchy, like systemd's. */
    const char *at = mountinfo ? mountinfo : "", *line;
    size_t len;
    bool first = true;
    kb_mount_t m;
    while (n > 0 && (size_t)n < sizeof text && s_next_line(&at, &line, &len)) {
        if (s_mount_line(line, len, &m) != 0 || strcmp(m.fstype, "cgroup") != 0)
            continue;
        for (size_t i = 0; i < nmissing && (size_t)n < sizeof text; i++) {
            if (!s_has_item(m.super, missing[i]))
                continue;
            n += snprintf(text + n, sizeof text - (size_t)n, "%s%s at %s",
                          first ? "; on cgroup v1: " : ", ", missing[i], m.point);
            first = false;
        }
    }
    kb_error_set(err, KB_ERR_INTERNAL, "%s", text);
    return -1;
}

int kb_cgroup_parse_keyed(const char *text, const char *key, uint64_t *value)
{
    const char *at = text, *line;
    size_t len, klen = strlen(key);
    while (s_next_line(&at, &line, &len)) {
        if (len <= klen || memcmp(line, key, klen) != 0 || line[klen] != ' ')
            continue;
        const char *v = line + klen + 1;
        size_t vlen = len - klen - 1;
        if (vlen == 0 || vlen > 20)
            return -1;
        uint64_t x = 0;
        for (size_t i = 0; i < vlen; i++) {
            if (v[i] < '0' || v[i] > '9' || x > (UINT64_MAX - (uint64_t)(v[i] - '0')) / 10)
                return -1;
            x = x * 10 + (uint64_t)(v[i] - '0');
        }
        *value = x;
        return 1;
    }
    return 0;
}

bool kb_cgroup_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > KB_CGROUP_NAME_MAX || strcmp(name, "daemon") == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                  || c == '_' || (c == '-' && i > 0);
        if (!ok)
            return false;
    }
    return true;
}
