/*  test_cgroup.c - per-kernel cgroups (src/kernel/kb_cgroup.c): the
    parsers on fixed texts (a cgroup v1 hybrid like the development
    machines, pure v2, nested container paths, missing controllers,
    malformed lines); detection, setup and a kernel's files on a tree of
    plain files that stands for a delegated cgroup; and, where the test's
    own cgroup v2 is delegated to it, the real thing: the OOM killer at
    memory.max, a fork bomb at pids.max, kill and remove leaving nothing.
    Without a delegated cgroup the live part is skipped: the test prints
    "SKIP: <why>" and exits 77, which CMake reports as skipped. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kb_testutil.h"
#include "kernel/kb_cgroup.h"
#include "util/kb_vec.h"

#define MIB (1024LL * 1024)

/*  /proc/self/cgroup and mountinfo of a development machine: cgroup v1
    for every controller, a controller-less cgroup2 beside them. */
static const char HYBRID_PROC[] = "9:name=systemd:/\n"
                                  "8:pids:/\n"
                                  "4:memory:/process_api/851e5104b955ae7088db040c32b6de2e\n"
                                  "1:cpu:/\n"
                                  "0::/\n";
#define HYBRID_V1_MOUNTS                                                                           \
    "22 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"                 \
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"                          \
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"                         \
    "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"                   \
    "38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"                       \
    "39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
static const char HYBRID_MOUNTS[]
    = HYBRID_V1_MOUNTS "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

/*  A systemd machine on cgroup v2 only. */
static const char V2_PROC[] = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/kb\n";
static const char V2_MOUNTS[]
    = "25 1 259:2 / / rw,relatime shared:1 - ext4 /dev/root rw\n"
      "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
      "rw,nsdelegate,memory_recursiveprot\n";

static void test_proc_cgroup(void)
{
    char path[256];
    kb_error_t why;
    CHECK(kb_cgroup_parse_proc(HYBRID_PROC, path, sizeof path, &why) == 0);
    CHECK_STR(path, "/");
    CHECK(kb_cgroup_parse_proc(V2_PROC, path, sizeof path, &why) == 0);
    CHECK_STR(path, "/user.slice/user-1000.slice/user@1000.service/app.slice/kb");
    /* In a container without a cgroup namespace, the host's path. */
    CHECK(kb_cgroup_parse_proc("0::/docker/3f2a/kb\n", path, sizeof path, &why) == 0);
    CHECK_STR(path, "/docker/3f2a/kb");
    /* No newline at the end, a ':' in the path. */
    CHECK(kb_cgroup_parse_proc("0::/a:b", path, sizeof path, &why) == 0);
    CHECK_STR(path, "/a:b");

    CHECK(kb_cgroup_parse_proc("4:memory:/x\n1:cpu:/\n", path, sizeof path, &why) == -1);
    CHECK_STR(why.message, "no cgroup v2 entry in /proc/self/cgroup (a cgroup v1 system)");
    CHECK(kb_cgroup_parse_proc("", path, sizeof path, &why) == -1);
    CHECK_STR(why.message, "no cgroup v2 entry in /proc/self/cgroup (a cgroup v1 system)");
    CHECK(kb_cgroup_parse_proc("1:cpu:/\ngarbage\n0::/\n", path, sizeof path, &why) == -1);
    CHECK_STR(why.message, "malformed line 2 of /proc/self/cgroup: 'garbage'");
    CHECK(kb_cgroup_parse_proc("0:memory:/x\n", path, sizeof path, &why) == -1);
    CHECK_STR(why.message, "malformed cgroup v2 line of /proc/self/cgroup: '0:memory:/x'");
    CHECK(kb_cgroup_parse_proc("0::/a\n0::/b\n", path, sizeof path, &why) == -1);
    CHECK_STR(why.message, "two cgroup v2 lines in /proc/self/cgroup");
    /* Outside the cgroup namespace's root; relative; empty components. */
    static const char *const refused[]
        = { "0::/../../x\n", "0::/a/./b\n", "0::x\n", "0::\n", "0::/a//b\n", "0::/a/\n" };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK(kb_cgroup_parse_proc(refused[i], path, sizeof path, &why) == -1);
        CHECK(strstr(why.message, "is not a plain absolute path") != NULL);
    }
    CHECK(kb_cgroup_parse_proc("0::/abcdefghij\n", path, 8, &why) == -1);
    CHECK_STR(why.message, "cgroup path too long in /proc/self/cgroup");
}

static void test_mountinfo(void)
{
    char dir[256];
    kb_error_t why;
    CHECK(kb_cgroup_parse_mountinfo(HYBRID_MOUNTS, "/", dir, sizeof dir, &why) == 0);
    CHECK_STR(dir, "/sys/fs/cgroup/unified");
    CHECK(kb_cgroup_parse_mountinfo(V2_MOUNTS, "/user.slice/kb", dir, sizeof dir, &why) == 0);
    CHECK_STR(dir, "/sys/fs/cgroup/user.slice/kb");
    CHECK(kb_cgroup_parse_mountinfo(V2_MOUNTS, "/", dir, sizeof dir, &why) == 0);
    CHECK_STR(dir, "/sys/fs/cgroup");

    /* A container that sees only its part of the host's hierarchy: the
       mount's root is the container's cgroup. */
    static const char container[] = "600 590 0:30 /docker/3f2a /sys/fs/cgroup rw,nosuid master:9 "
                                    "- cgroup2 cgroup2 rw\n";
    CHECK(kb_cgroup_parse_mountinfo(container, "/docker/3f2a/kb/x", dir, sizeof dir, &why) == 0);
    CHECK_STR(dir, "/sys/fs/cgroup/kb/x");
    CHECK(kb_cgroup_parse_mountinfo(container, "/docker/3f2a", dir, sizeof dir, &why) == 0);
    CHECK_STR(dir, "/sys/fs/cgroup");
    CHECK(kb_cgroup_parse_mountinfo(container, "/docker/3f2ab", dir, sizeof dir, &why) == -1);
    CHECK_STR(why.message,
              "cgroup /docker/3f2ab is outside every cgroup2 mount (roots: /docker/3f2a)");

    /* The longest root wins; among equals, a writable mount. */
    static const char two[] = "1 0 0:30 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n"
                              "2 0 0:30 /a /mnt/a ro - cgroup2 cgroup2 rw\n"
                              "3 0 0:30 /a /mnt/b rw - cgroup2 cgroup2 rw\n";
    CHECK(kb_cgroup_parse_mountinfo(two, "/a/k", dir, sizeof dir, &why) == 0);
    CHECK_STR(dir, "/mnt/b/k");
    CHECK(kb_cgroup_parse_mountinfo(two, "/b", dir, sizeof dir, &why) == -1);
    CHECK_STR(why.message, "the cgroup2 mount at /sys/fs/cgroup is read-only");

    /* Escapes in the mount point; a mount on /. */
    static const char odd[] = "7 0 0:30 / /mnt/my\\040cg rw,relatime - cgroup2 none rw\n"
                              "8 0 0:31 /x / rw - cgroup2 none rw\n";
    CHECK(kb_cgroup_parse_mountinfo(odd, "/k", dir, sizeof dir, &why) == 0);
    CHECK_STR(dir, "/mnt/my cg/k");
    CHECK(kb_cgroup_parse_mountinfo(odd, "/x/k", dir, sizeof dir, &why) == 0);
    CHECK_STR(dir, "/k");

    CHECK(kb_cgroup_parse_mountinfo("25 1 259:2 / / rw - ext4 /dev/root rw\n", "/", dir, sizeof dir,
                                    &why)
          == -1);
    CHECK_STR(why.message, "no cgroup2 mount");
    CHECK(kb_cgroup_parse_mountinfo("", "/", dir, sizeof dir, &why) == -1);
    CHECK_STR(why.message, "no cgroup2 mount");
    /* A cgroup2 line cut short is malformed; other lines we cannot read
       are not ours to judge. */
    CHECK(kb_cgroup_parse_mountinfo("40 30 0:37 / /sys/fs/cgroup - cgroup2\n", "/", dir, sizeof dir,
                                    &why)
          == -1);
    CHECK(strncmp(why.message, "malformed line of mountinfo: '40 30", 35) == 0);
    char mixed[512];
    snprintf(mixed, sizeof mixed, "garbage\n%s", V2_MOUNTS);
    CHECK(kb_cgroup_parse_mountinfo(mixed, "/kb", dir, sizeof dir, &why) == 0);
    CHECK_STR(dir, "/sys/fs/cgroup/kb");
    CHECK(kb_cgroup_parse_mountinfo(V2_MOUNTS, "/user.slice/kb", dir, 16, &why) == -1);
    CHECK_STR(why.message, "cgroup directory too long");
}

static void test_controllers(void)
{
    kb_error_t why = { 0 };
    CHECK(kb_cgroup_check_controllers("cpuset cpu io memory hugetlb pids rdma misc\n", "/x", NULL,
                                      &why)
          == 0);
    CHECK(kb_cgroup_check_controllers("pids memory", "/x", NULL, &why) == 0);
    /* The development machines: memory and pids are held by cgroup v1. */
    CHECK(kb_cgroup_check_controllers("hugetlb\n", "/", HYBRID_MOUNTS, &why) == -1);
    CHECK_STR(why.message,
              "controllers memory, pids not available in / (have: hugetlb); on cgroup v1: "
              "memory at /sys/fs/cgroup/memory, pids at /sys/fs/cgroup/pids");
    CHECK(kb_cgroup_check_controllers("cpu io memory\n", "/a/b", V2_MOUNTS, &why) == -1);
    CHECK_STR(why.message, "controller pids not available in /a/b (have: cpu io memory)");
    CHECK(kb_cgroup_check_controllers("", "/a", NULL, &why) == -1);
    CHECK_STR(why.message, "controllers memory, pids not available in /a (have: none)");
    /* Whole words only. */
    CHECK(kb_cgroup_check_controllers("memory_x xpids\n", "/a", NULL, &why) == -1);
    CHECK_STR(why.message, "controllers memory, pids not available in /a (have: memory_x xpids)");
}

static void test_keyed(void)
{
    static const char events[] = "low 0\nhigh 12\nmax 40\noom 2\noom_kill 1\noom_group_kill 0\n";
    uint64_t v = 99;
    CHECK(kb_cgroup_parse_keyed(events, "oom_kill", &v) == 1 && v == 1);
    CHECK(kb_cgroup_parse_keyed(events, "oom", &v) == 1 && v == 2); /* not oom_kill's line */
    CHECK(kb_cgroup_parse_keyed(events, "max", &v) == 1 && v == 40);
    CHECK(kb_cgroup_parse_keyed(events, "low", &v) == 1 && v == 0);
    v = 99;
    CHECK(kb_cgroup_parse_keyed(events, "oom_kil", &v) == 0 && v == 99);
    CHECK(kb_cgroup_parse_keyed("", "max", &v) == 0);
    CHECK(kb_cgroup_parse_keyed("populated 1\nfrozen 0", "frozen", &v) == 1 && v == 0);
    CHECK(kb_cgroup_parse_keyed("max 18446744073709551615\n", "max", &v) == 1 && v == UINT64_MAX);
    CHECK(kb_cgroup_parse_keyed("max 18446744073709551616\n", "max", &v) == -1);
    CHECK(kb_cgroup_parse_keyed("oom_kill x\n", "oom_kill", &v) == -1);
    CHECK(kb_cgroup_parse_keyed("oom_kill \n", "oom_kill", &v) == -1);
    CHECK(kb_cgroup_parse_keyed("oom_kill 3 4\n", "oom_kill", &v) == -1);
}

static void test_names(void)
{
    CHECK(kb_cgroup_name_ok("k-1"));
    CHECK(kb_cgroup_name_ok("k_abc-DEF09"));
    static const char *const bad[]
        = { "", "daemon", "..", ".", "a/b", "-k", "k.1", "memory.max", "k 1", "k\n" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(!kb_cgroup_name_ok(bad[i]));
    char longest[KB_CGROUP_NAME_MAX + 2];
    memset(longest, 'k', sizeof longest);
    longest[KB_CGROUP_NAME_MAX] = 0;
    CHECK(kb_cgroup_name_ok(longest));
    longest[KB_CGROUP_NAME_MAX] = 'k';
    longest[KB_CGROUP_NAME_MAX + 1] = 0;
    CHECK(!kb_cgroup_name_ok(longest));
}

/* --------------------------------------------------------------------------
   A tree of plain files that stands for a delegated cgroup
   -------------------------------------------------------------------------- */

static void s_put(const char *dir, const char *file, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/*  The file's text, "" when it cannot be read. Static. */
static const char *s_get(const char *dir, const char *file)
{
    static char text[256];
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    text[0] = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = 0;
        fclose(f);
    }
    return text;
}

static bool s_exists(const char *dir, const char *file)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return access(path, F_OK) == 0;
}

/*  <tmp>/own as a delegated cgroup, the daemon in it, no controllers on
    for its children yet; <tmp>/own/daemon with its cgroup.procs. */
static void s_fake_own(const char *tmp, char *own, size_t ownlen, char *mounts, size_t mlen)
{
    char me[32], daemon[1024];
    snprintf(me, sizeof me, "%d\n", (int)getpid());
    snprintf(own, ownlen, "%s/own", tmp);
    snprintf(daemon, sizeof daemon, "%s/daemon", own);
    CHECK(mkdir(own, 0755) == 0);
    CHECK(mkdir(daemon, 0755) == 0);
    s_put(own, "cgroup.controllers", "cpu io memory pids\n");
    s_put(own, "cgroup.type", "domain\n");
    s_put(own, "cgroup.procs", me);
    s_put(own, "cgroup.subtree_control", "");
    s_put(daemon, "cgroup.procs", "");
    s_put(daemon, "cgroup.kill", "");
    snprintf(mounts, mlen, "%s40 30 0:37 / %s rw,relatime - cgroup2 cgroup2 rw\n", HYBRID_V1_MOUNTS,
             tmp);
}

static void test_fake_detect(void)
{
    char *tmp = kb_test_tmpdir();
    char own[512], mounts[2048], me[32];
    kb_error_t why;
    snprintf(me, sizeof me, "%d", (int)getpid());
    s_fake_own(tmp, own, sizeof own, mounts, sizeof mounts);

    /* Not a cgroup2 file system: refused unless told it is a test. */
    CHECK(kb_cgroups_detect_from("0::/own\n", mounts, 0, &why) == NULL);
    char expect[1024];
    snprintf(expect, sizeof expect, "%s is not on a cgroup2 file system", own);
    CHECK_STR(why.message, expect);

    /* Another process in the cgroup: the daemon is moved back, nothing
       enabled. */
    char procs[64];
    snprintf(procs, sizeof procs, "1\n%s\n4242\n", me);
    s_put(own, "cgroup.procs", procs);
    CHECK(kb_cgroups_detect_from("0::/own\n", mounts, KB_CGROUPS_ANY_FS, &why) == NULL);
    CHECK_STR(why.message,
              "cgroup /own has processes other than the daemon (1, 4242), so its children "
              "cannot have controllers");
    CHECK_STR(s_get(own, "cgroup.procs"), me);
    CHECK_STR(s_get(own, "cgroup.subtree_control"), "");

    /* Delegated: the daemon goes into own/daemon, memory and pids on. */
    kb_cgroups_t *cgs = kb_cgroups_detect_from("0::/own\n", mounts, KB_CGROUPS_ANY_FS, &why);
    CHECK(cgs != NULL);
    if (!cgs) {
        fprintf(stderr, "why: %s\n", why.message);
        goto out;
    }
    CHECK_STR(kb_cgroups_path(cgs), "/own");
    CHECK_STR(kb_cgroups_dir(cgs), own);
    CHECK_STR(s_get(own, "cgroup.subtree_control"), "+memory +pids");
    char daemon[600];
    snprintf(daemon, sizeof daemon, "%s/daemon", own);
    CHECK_STR(s_get(daemon, "cgroup.procs"), me);
    kb_cgroups_destroy(&cgs);
    CHECK(cgs == NULL);
    kb_cgroups_destroy(&cgs);

    /* A daemon started again in own/daemon takes own, moves nothing. */
    s_put(own, "cgroup.procs", "");
    s_put(own, "cgroup.subtree_control", "memory pids\n");
    s_put(daemon, "cgroup.procs", "77\n");
    cgs = kb_cgroups_detect_from("0::/own/daemon\n", mounts, KB_CGROUPS_ANY_FS, &why);
    CHECK(cgs != NULL);
    if (cgs)
        CHECK_STR(kb_cgroups_path(cgs), "/own");
    CHECK_STR(s_get(daemon, "cgroup.procs"), "77\n");
    kb_cgroups_destroy(&cgs);
    /* ... but not when own holds processes: then own/daemon is <own>
       (and own/daemon/daemon, made here, goes again when the move fails:
       a plain directory has no cgroup.procs). */
    s_put(own, "cgroup.procs", "1\n");
    s_put(daemon, "cgroup.controllers", "memory pids\n");
    s_put(daemon, "cgroup.type", "domain\n");
    s_put(daemon, "cgroup.subtree_control", "");
    cgs = kb_cgroups_detect_from("0::/own/daemon\n", mounts, KB_CGROUPS_ANY_FS, &why);
    CHECK(cgs == NULL);
    snprintf(expect, sizeof expect, "cannot move the daemon into /own/daemon/daemon: %s",
             strerror(ENOENT));
    CHECK_STR(why.message, expect);
    CHECK(!s_exists(daemon, "daemon"));
    s_put(own, "cgroup.procs", me);

    /* Each missing piece, named. */
    s_put(own, "cgroup.controllers", "cpu io\n");
    CHECK(kb_cgroups_detect_from("0::/own\n", mounts, KB_CGROUPS_ANY_FS, &why) == NULL);
    CHECK_STR(why.message,
              "controllers memory, pids not available in /own (have: cpu io); on cgroup v1: "
              "memory at /sys/fs/cgroup/memory, pids at /sys/fs/cgroup/pids");
    s_put(own, "cgroup.controllers", "memory pids\n");
    CHECK(kb_cgroups_detect_from("0::/own\n0::/x\n", mounts, KB_CGROUPS_ANY_FS, &why) == NULL);
    CHECK_STR(why.message, "two cgroup v2 lines in /proc/self/cgroup");
    CHECK(kb_cgroups_detect_from("0::/nope\n", mounts, KB_CGROUPS_ANY_FS, &why) == NULL);
    snprintf(expect, sizeof expect, "cannot open cgroup /nope at %s/nope: %s", tmp,
             strerror(ENOENT));
    CHECK_STR(why.message, expect);
    char link[600];
    snprintf(link, sizeof link, "%s/link", tmp);
    CHECK(symlink(own, link) == 0);
    CHECK(kb_cgroups_detect_from("0::/link\n", mounts, KB_CGROUPS_ANY_FS, &why) == NULL);
    snprintf(expect, sizeof expect, "cannot open cgroup /link at %s: a symbolic link on the way",
             link);
    CHECK_STR(why.message, expect);
    char type[600], saved[600];
    snprintf(type, sizeof type, "%s/cgroup.type", own);
    snprintf(saved, sizeof saved, "%s/cgroup.type.saved", tmp);
    CHECK(rename(type, saved) == 0);
    CHECK(kb_cgroups_detect_from("0::/own\n", mounts, KB_CGROUPS_ANY_FS, &why) == NULL);
    snprintf(expect, sizeof expect,
             "cgroup /own is the root of the cgroup2 hierarchy at %s, not one delegated to the "
             "daemon",
             own);
    CHECK_STR(why.message, expect);
    CHECK(rename(saved, type) == 0);
    if (geteuid() == 0) { /* only root can give a file away */
        CHECK(chown(own, 12345, -1) == 0);
        CHECK(kb_cgroups_detect_from("0::/own\n", mounts, KB_CGROUPS_ANY_FS, &why) == NULL);
        CHECK_STR(why.message, "cgroup /own is owned by uid 12345, not by uid 0");
        CHECK(chown(own, 0, -1) == 0);
    } else { /* and only others can be refused a write */
        CHECK(chmod(own, 0555) == 0);
        CHECK(kb_cgroups_detect_from("0::/own\n", mounts, KB_CGROUPS_ANY_FS, &why) == NULL);
        snprintf(expect, sizeof expect, "cgroup /own is not writable by uid %u",
                 (unsigned)geteuid());
        CHECK_STR(why.message, expect);
        CHECK(chmod(own, 0755) == 0);
    }
out:
    kb_test_rmtree(tmp);
    free(tmp);
}

/*  A kernel's cgroup on the plain tree: the limits as the kernel would
    read them, the figures from its files, the list of kernels. */
static void test_fake_kernel_cgroup(void)
{
    char *tmp = kb_test_tmpdir();
    char own[512], mounts[2048];
    kb_error_t why, err;
    s_fake_own(tmp, own, sizeof own, mounts, sizeof mounts);
    kb_cgroups_t *cgs = kb_cgroups_detect_from("0::/own\n", mounts, KB_CGROUPS_ANY_FS, &why);
    CHECK(cgs != NULL);
    if (!cgs)
        goto out;

    /* A plain directory has none of a cgroup's files: the new cgroup
       fails on its first limit and is removed again. */
    CHECK(kb_cgroup_new(cgs, "k-2", 64 * MIB, 8, &err) == NULL);
    char expect[1024];
    snprintf(expect, sizeof expect, "cannot write 60397974 to /own/k-2/memory.high: %s",
             strerror(ENOENT));
    CHECK_STR(err.message, expect);
    CHECK(!s_exists(own, "k-2"));
    CHECK(kb_cgroup_new(cgs, "../k", 0, 0, &err) == NULL);
    CHECK_STR(err.message, "'../k' cannot name a kernel's cgroup");
    CHECK(kb_cgroup_open(cgs, "daemon", &err) == NULL);
    CHECK(kb_cgroup_open(cgs, "k-9", &err) == NULL && errno == ENOENT);
    snprintf(expect, sizeof expect, "cannot open cgroup /own/k-9: %s", strerror(ENOENT));
    CHECK_STR(err.message, expect);

    char k1[600];
    snprintf(k1, sizeof k1, "%s/k-1", own);
    CHECK(mkdir(k1, 0755) == 0);
    s_put(k1, "memory.high", "max\n");
    s_put(k1, "memory.max", "max\n");
    s_put(k1, "pids.max", "max\n");
    s_put(k1, "memory.current", "1000\n");
    s_put(k1, "pids.current", "3\n");
    s_put(k1, "memory.events", "low 0\nhigh 7\nmax 9\noom 2\noom_kill 1\noom_group_kill 0\n");
    s_put(k1, "pids.events", "max 5\n");
    CHECK(kb_cgroup_new(cgs, "k-1", 0, 0, &err) == NULL);
    CHECK_STR(err.message, "cannot make cgroup /own/k-1: it exists already");
    kb_cgroup_t *cg = kb_cgroup_open(cgs, "k-1", &err);
    CHECK(cg != NULL);
    if (!cg)
        goto out;
    CHECK_STR(kb_cgroup_name(cg), "k-1");
    CHECK(kb_cgroup_fd(cg) >= 0);
    CHECK(kb_cgroup_set_limits(cg, 64 * MIB, 8) == 0);
    CHECK_STR(s_get(k1, "memory.max"), "67108864");
    CHECK_STR(s_get(k1, "memory.high"), "60397974");
    CHECK_STR(s_get(k1, "pids.max"), "8");
    CHECK(!s_exists(k1, "memory.swap.max")); /* absent: skipped, not made */
    s_put(k1, "memory.swap.max", "max\n");
    CHECK(kb_cgroup_set_limits(cg, 64 * MIB, 8) == 0);
    CHECK_STR(s_get(k1, "memory.swap.max"), "0");
    CHECK(kb_cgroup_set_limits(cg, 0, 0) == 0);
    CHECK_STR(s_get(k1, "memory.max"), "max");
    CHECK_STR(s_get(k1, "memory.high"), "max");
    CHECK_STR(s_get(k1, "pids.max"), "max");
    CHECK_STR(s_get(k1, "memory.swap.max"), "max");

    kb_cgroup_stats_t st;
    CHECK(kb_cgroup_stats(cg, &st) == 0);
    CHECK(st.memory_current == 1000 && st.memory_peak == 1000 && st.pids_current == 3);
    CHECK(st.oom_kill == 1 && st.oom == 2 && st.memory_max_hits == 9);
    CHECK(st.memory_high_hits == 7 && st.pids_max_hits == 5);
    s_put(k1, "memory.current", "500\n"); /* no memory.peak: the most seen */
    CHECK(kb_cgroup_stats(cg, &st) == 0 && st.memory_current == 500 && st.memory_peak == 1000);
    s_put(k1, "memory.peak", "4096\n");
    CHECK(kb_cgroup_stats(cg, &st) == 0 && st.memory_peak == 4096);

    char **names = kb_cgroups_list(cgs);
    CHECK(names && names[0] && !names[1]);
    if (names && names[0])
        CHECK_STR(names[0], "k-1");
    kb_strv_free(names);

    kb_cgroup_destroy(&cg);
    CHECK(cg == NULL);
    CHECK(s_exists(own, "k-1")); /* destroy closes, never removes */
    kb_cgroups_destroy(&cgs);
out:
    kb_cgroups_destroy(&cgs);
    kb_test_rmtree(tmp);
    free(tmp);
}

/* --------------------------------------------------------------------------
   The real thing, where the test's own cgroup is delegated to it
   -------------------------------------------------------------------------- */

static kb_cgroups_t *s_cgs;

/*  Fork a child that waits for a byte, joins cg (moved by the parent:
    kb_cgroup_add of another process) and runs fn. */
static pid_t s_spawn_in(kb_cgroup_t *cg, void (*fn)(void))
{
    int go[2];
    CHECK(pipe(go) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        char byte;
        close(go[1]);
        if (read(go[0], &byte, 1) != 1)
            _exit(100);
        fn();
        _exit(0);
    }
    close(go[0]);
    CHECK(pid > 0);
    CHECK(kb_cgroup_add(cg, pid) == 0);
    CHECK(write(go[1], "x", 1) == 1);
    close(go[1]);
    return pid;
}

static void s_hog(void)
{
    size_t n = (size_t)(200 * MIB);
    volatile char *p = malloc(n);
    if (!p)
        _exit(2);
    for (size_t i = 0; i < n; i += 4096)
        p[i] = 1;
    _exit(0);
}

/*  Fork until refused; exit with the number made (each child pauses). */
static void s_fork_bomb(void)
{
    int made = 0;
    for (int i = 0; i < 64; i++) {
        pid_t p = fork();
        if (p == 0) {
            pause();
            _exit(0);
        }
        if (p < 0)
            break;
        made++;
    }
    _exit(made);
}

static void s_reap_orphans(void)
{
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

static bool s_gone(kb_cgroup_t *cg)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", kb_cgroups_dir(s_cgs), kb_cgroup_name(cg));
    return access(path, F_OK) != 0 && errno == ENOENT;
}

static void test_live_oom_kill(void)
{
    kb_error_t err = { 0 };
    char name[64];
    snprintf(name, sizeof name, "kbtest-%d-oom", (int)getpid());
    kb_cgroup_t *cg = kb_cgroup_new(s_cgs, name, 64 * MIB, 8, &err);
    CHECK(cg != NULL);
    if (!cg) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    pid_t pid = s_spawn_in(cg, s_hog);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    kb_cgroup_stats_t st;
    CHECK(kb_cgroup_stats(cg, &st) == 0);
    fprintf(stderr, "oom: oom_kill %llu oom %llu max %llu high %llu peak %llu\n",
            (unsigned long long)st.oom_kill, (unsigned long long)st.oom,
            (unsigned long long)st.memory_max_hits, (unsigned long long)st.memory_high_hits,
            (unsigned long long)st.memory_peak);
    CHECK(st.oom_kill >= 1);
    CHECK(st.memory_max_hits >= 1);
    CHECK(st.memory_peak <= (uint64_t)(64 * MIB));
    CHECK(st.pids_current == 0);
    CHECK(kb_cgroup_remove(cg) == 0);
    CHECK(s_gone(cg));
    kb_cgroup_destroy(&cg);
}

static void test_live_fork_bomb_kill_remove(void)
{
    kb_error_t err = { 0 };
    char name[64];
    snprintf(name, sizeof name, "kbtest-%d-pids", (int)getpid());
    kb_cgroup_t *cg = kb_cgroup_new(s_cgs, name, 64 * MIB, 8, &err);
    CHECK(cg != NULL);
    if (!cg) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    pid_t pid = s_spawn_in(cg, s_fork_bomb);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7); /* 8 with the one that forked */
    kb_cgroup_stats_t st;
    CHECK(kb_cgroup_stats(cg, &st) == 0);
    CHECK(st.pids_current == 7);
    CHECK(st.pids_max_hits >= 1);
    CHECK(kb_cgroup_remove(cg) == -1); /* not while it has processes */
    CHECK(strstr(kb_cgroup_error(cg), "still has processes") != NULL);
    /* A cgroup the kernel made below its own, with one of its processes:
       killed and removed too. */
    char dir[1024], sub[1100];
    snprintf(dir, sizeof dir, "%s/%s", kb_cgroups_dir(s_cgs), name);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    CHECK(mkdir(sub, 0755) == 0);
    long moved = strtol(s_get(dir, "cgroup.procs"), NULL, 10);
    CHECK(moved > 0);
    char text[32];
    snprintf(text, sizeof text, "%ld", moved);
    s_put(sub, "cgroup.procs", text);
    CHECK(strtol(s_get(sub, "cgroup.procs"), NULL, 10) == moved);
    CHECK(kb_cgroup_kill(cg) == 0);
    s_reap_orphans();
    CHECK(kb_cgroup_stats(cg, &st) == 0 && st.pids_current == 0);
    CHECK(kb_cgroup_remove(cg) == 0);
    CHECK(s_gone(cg));
    CHECK(kb_cgroup_stats(cg, &st) == -1);
    kb_cgroup_destroy(&cg);
}

/*  Undo what detection did to the test's own cgroup, when it did it. */
static void s_undo_setup(const char *before)
{
    if (strcmp(before, kb_cgroups_path(s_cgs)) != 0)
        return; /* it was in <own>/daemon already */
    const char *own = kb_cgroups_dir(s_cgs);
    char me[32], daemon[1024];
    snprintf(me, sizeof me, "%d", (int)getpid());
    snprintf(daemon, sizeof daemon, "%s/daemon", own);
    s_put(own, "cgroup.subtree_control", "-memory -pids");
    s_put(own, "cgroup.procs", me);
    CHECK(rmdir(daemon) == 0);
}

int main(void)
{
    RUN_TEST(test_proc_cgroup);
    RUN_TEST(test_mountinfo);
    RUN_TEST(test_controllers);
    RUN_TEST(test_keyed);
    RUN_TEST(test_names);
    RUN_TEST(test_fake_detect);
    RUN_TEST(test_fake_kernel_cgroup);
    if (kb_test_failures)
        return kb_test_summary();

    char before[4096] = "";
    kb_error_t why;
    char *proc = kb_test_capture("cat /proc/self/cgroup");
    if (proc)
        kb_cgroup_parse_proc(proc, before, sizeof before, NULL);
    free(proc);
    s_cgs = kb_cgroups_detect(&why);
    if (!s_cgs) {
        kb_test_summary();
        printf("SKIP: no delegated cgroup v2: %s\n", why.message);
        fflush(stdout);
        return 77;
    }
    fprintf(stderr, "kernels' cgroups under %s (%s)\n", kb_cgroups_path(s_cgs),
            kb_cgroups_dir(s_cgs));
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* the fork bomb's orphans come to us */
    RUN_TEST(test_live_oom_kill);
    RUN_TEST(test_live_fork_bomb_kill_remove);
    s_undo_setup(before);
    kb_cgroups_destroy(&s_cgs);
    return kb_test_summary();
}
