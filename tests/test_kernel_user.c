/*  test_kernel_user.c - who kernels run as (src/kernel/kb_kernel_user.c):
    a uid range hands out distinct uids and fails when all are in use,
    gives a uid back after killing what still runs as it, marks adopted
    uids; a kernel user that is root or unknown is refused; a private dir
    is removed whole without following the links left in it. The range
    and user parts need root and are skipped (with a line) without it. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kb_testutil.h"
#include "kernel/kb_kernel_user.h"

static bool s_root(const char *test)
{
    if (geteuid() == 0)
        return true;
    fprintf(stderr, "   %s skipped: needs root\n", test);
    return false;
}

static void test_range_hands_out_distinct_uids(void)
{
    kb_error_t err = { 0 };
    if (!s_root(__func__))
        return;
    CHECK(kb_kernel_users_new_range(0, 5, &err) == NULL);
    CHECK(kb_kernel_users_new_range(10, 5, &err) == NULL);
    CHECK(kb_kernel_users_new_range(1, 70000, &err) == NULL);
    CHECK(kb_kernel_users_new_range(5, 4294967295u, &err) == NULL);
    kb_kernel_users_t *users = kb_kernel_users_new_range(62000, 62002, &err);
    CHECK(users != NULL);
    if (!users)
        return;
    CHECK_STR(kb_kernel_users_describe(users), "uids 62000-62002");
    kb_kernel_cred_t a, b, c, d;
    CHECK(kb_kernel_users_take(users, &a, &err) == 0);
    CHECK(kb_kernel_users_take(users, &b, &err) == 0);
    CHECK(kb_kernel_users_take(users, &c, &err) == 0);
    CHECK(a.uid == 62000 && b.uid == 62001 && c.uid == 62002);
    CHECK(a.gid == a.uid && a.ngroups == 0 && a.name[0] == 0);
    CHECK(kb_kernel_users_take(users, &d, &err) == -1);
    CHECK(strstr(err.message, "no free uid in the kernel uid range 62000-62002") != NULL);
    kb_kernel_users_give(users, b.uid);
    CHECK(kb_kernel_users_take(users, &d, &err) == 0 && d.uid == 62001);
    kb_kernel_users_give(users, a.uid);
    kb_kernel_users_give(users, 99); /* not of the range: nothing */
    CHECK(!kb_kernel_users_mark(users, 61999));
    CHECK(kb_kernel_users_mark(users, 62000)); /* adopted: in use again */
    CHECK(kb_kernel_users_take(users, &d, &err) == -1);
    kb_kernel_users_destroy(&users);
    CHECK(users == NULL);
    kb_kernel_users_destroy(&users);
}

static void test_giving_a_uid_back_kills_what_runs_as_it(void)
{
    kb_error_t err = { 0 };
    if (!s_root(__func__))
        return;
    kb_kernel_users_t *users = kb_kernel_users_new_range(62010, 62010, &err);
    kb_kernel_cred_t cred;
    CHECK(users && kb_kernel_users_take(users, &cred, &err) == 0);
    pid_t left = fork();
    if (left == 0) {
        /* a process the kernel left behind, in a session of its own */
        setsid();
        if (syscall(SYS_setresgid, 62010, 62010, 62010) != 0
            || syscall(SYS_setresuid, 62010, 62010, 62010) != 0)
            _exit(3);
        pause();
        _exit(0);
    }
    usleep(100000);
    kb_kernel_users_give(users, cred.uid);
    int status = 0;
    CHECK(waitpid(left, &status, 0) == left);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    CHECK(kb_kernel_users_take(users, &cred, &err) == 0 && cred.uid == 62010);
    kb_kernel_users_destroy(&users);
}

static void test_kernel_user_must_exist_and_not_be_root(void)
{
    kb_error_t err = { 0 };
    if (!s_root(__func__))
        return;
    CHECK(kb_kernel_users_new_user("root", &err) == NULL);
    CHECK(strstr(err.message, "is root") != NULL);
    CHECK(kb_kernel_users_new_user("no-such-user-kb", &err) == NULL);
    CHECK(strstr(err.message, "no such user") != NULL);
    kb_kernel_users_t *users = kb_kernel_users_new_user("nobody", &err);
    if (!users)
        return; /* no nobody on this system */
    kb_kernel_cred_t cred;
    CHECK(kb_kernel_users_take(users, &cred, &err) == 0);
    CHECK(cred.uid > 0 && cred.gid > 0 && cred.ngroups >= 1);
    CHECK_STR(cred.name, "nobody");
    CHECK(kb_kernel_users_mark(users, cred.uid));
    kb_kernel_users_give(users, cred.uid); /* one shared user: nothing killed */
    kb_kernel_users_destroy(&users);
}

static void s_write(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
        close(fd);
    }
}

static void test_work_dir_is_removed_without_following_links(void)
{
    char *tmp = kb_test_tmpdir();
    char outside[600], work[600], path[700];
    snprintf(outside, sizeof outside, "%s/outside", tmp);
    snprintf(work, sizeof work, "%s/k-0123", tmp);
    CHECK(mkdir(outside, 0700) == 0);
    snprintf(path, sizeof path, "%s/keep", outside);
    s_write(path, "keep me");
    kb_kernel_cred_t cred = { .uid = (long long)getuid(), .gid = (long long)getgid() };
    CHECK(kb_work_dir_make(work, &cred, NULL) == 0);
    CHECK(kb_work_dir_make(work, &cred, NULL) == -1); /* it must be new */
    struct stat st;
    CHECK(lstat(work, &st) == 0 && (st.st_mode & 0777) == 0700);
    snprintf(path, sizeof path, "%s/link", work);
    CHECK(symlink(outside, path) == 0);
    snprintf(path, sizeof path, "%s/a", work);
    CHECK(mkdir(path, 0700) == 0);
    snprintf(path, sizeof path, "%s/a/b", work);
    CHECK(mkdir(path, geteuid() == 0 ? 0 : 0700) == 0); /* root: a dir without permissions */
    snprintf(path, sizeof path, "%s/a/file", work);
    s_write(path, "x");
    snprintf(path, sizeof path, "%s/a/up", work);
    CHECK(symlink("../../outside", path) == 0);
    CHECK(kb_work_dir_remove(work) == 0);
    CHECK(lstat(work, &st) != 0 && errno == ENOENT);
    snprintf(path, sizeof path, "%s/keep", outside);
    CHECK(lstat(path, &st) == 0);         /* what the links pointed at is still there */
    CHECK(kb_work_dir_remove(work) == 0); /* gone already: not an error */
    kb_test_rmtree(tmp);
    free(tmp);
}

static void test_names_and_proc_uid(void)
{
    char *path = kb_work_dir_path("/s/work", "/s/kernels/k-0123abcd.json");
    CHECK_STR(path, "/s/work/k-0123abcd");
    free(path);
    CHECK(kb_proc_uid(getpid()) == (long long)getuid());
    CHECK(kb_proc_uid(0) == -1);
}

int main(void)
{
    RUN_TEST(test_range_hands_out_distinct_uids);
    RUN_TEST(test_giving_a_uid_back_kills_what_runs_as_it);
    RUN_TEST(test_kernel_user_must_exist_and_not_be_root);
    RUN_TEST(test_work_dir_is_removed_without_following_links);
    RUN_TEST(test_names_and_proc_uid);
    return kb_test_summary();
}
