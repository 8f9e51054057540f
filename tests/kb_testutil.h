/*  kb_testutil.h - the few helpers every C test shares: checks that count
    and report failures with file and line, and a summary exit code. */
#ifndef KB_TESTUTIL_H_INCLUDED
#define KB_TESTUTIL_H_INCLUDED

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int kb_test_failures;
extern int kb_test_checks;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        kb_test_checks++;                                                                          \
        if (!(cond)) {                                                                             \
            kb_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        kb_test_checks++;                                                                          \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                                   \
            kb_test_failures++;                                                                    \
            fprintf(stderr, "%s:%d: CHECK_STR failed: %s == %s (\"%s\" vs \"%s\")\n", __FILE__,    \
                    __LINE__, #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                     \
        }                                                                                          \
    } while (0)

/*  Run one named test function and print its outcome. KB_TEST_ONLY=name
    runs only the tests whose name contains it (for working on one). */
#define RUN_TEST(fn)                                                                               \
    do {                                                                                           \
        const char *only_ = getenv("KB_TEST_ONLY");                                                \
        if (only_ && !strstr(#fn, only_))                                                          \
            break;                                                                                 \
        int before_ = kb_test_failures;                                                            \
        fprintf(stderr, "-- %s\n", #fn);                                                           \
        fn();                                                                                      \
        fprintf(stderr, "-- %s: %s\n", #fn, kb_test_failures == before_ ? "ok" : "FAILED");        \
    } while (0)

/*  Print the totals; returns the process exit code (0 when all passed). */
int kb_test_summary(void);

/*  A fresh private temporary directory (0700); caller frees the string. */
char *kb_test_tmpdir(void);

/*  Remove a directory tree. */
void kb_test_rmtree(const char *path);

/*  Run a shell command and return its stdout (caller frees), or NULL. */
char *kb_test_capture(const char *command);

/*  Number of open file descriptors of this process. */
int kb_test_count_fds(void);

/*  Entries of a directory but . and .. (/proc/self/task: threads), or -1. */
int kb_test_count_entries(const char *path);

/*  Seconds on the monotonic clock. */
double kb_test_now(void);

#endif
