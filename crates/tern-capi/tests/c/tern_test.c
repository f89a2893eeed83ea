/* C tests of tern's C interface, built and run by tests/c_api.rs (cargo test -p tern-capi). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "tern.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, \
                    __LINE__, #cond, tern_last_error());                         \
            failures++;                                                          \
        }                                                                        \
    } while (0)

#define OK(call) CHECK((call) == TERN_OK)

static void test_basics(const char *dir) {
    tern_db *db = NULL;
    OK(tern_open(dir, &db));

    /* put and get in the default table (NULL) */
    tern_txn *txn = NULL;
    OK(tern_begin(db, 0, &txn));
    OK(tern_put(txn, NULL, (const uint8_t *)"apple", 5, (const uint8_t *)"red", 3));
    OK(tern_put(txn, NULL, (const uint8_t *)"banana", 6, (const uint8_t *)"yellow", 6));
    const uint8_t bin[4] = {0, 255, 10, 0};
    OK(tern_put(txn, NULL, bin, 4, bin, 4));
    OK(tern_commit(txn));

    OK(tern_begin(db, 1, &txn));
    const uint8_t *v = NULL;
    size_t vlen = 0;
    OK(tern_get(txn, NULL, (const uint8_t *)"apple", 5, &v, &vlen));
    CHECK(vlen == 3 && memcmp(v, "red", 3) == 0);
    CHECK(tern_get(txn, NULL, (const uint8_t *)"cherry", 6, &v, &vlen) == TERN_NOTFOUND);
    OK(tern_get(txn, NULL, bin, 4, &v, &vlen));
    CHECK(vlen == 4 && memcmp(v, bin, 4) == 0);

    /* copying get: too small, then enough */
    uint8_t small[2], big[16];
    size_t need = 0;
    CHECK(tern_get_copy(txn, NULL, (const uint8_t *)"banana", 6, small, sizeof small, &need) == TERN_ETOOSMALL);
    CHECK(need == 6);
    OK(tern_get_copy(txn, NULL, (const uint8_t *)"banana", 6, big, sizeof big, &need));
    CHECK(need == 6 && memcmp(big, "yellow", 6) == 0);

    /* writes in a read-only transaction fail cleanly */
    CHECK(tern_put(txn, NULL, (const uint8_t *)"x", 1, (const uint8_t *)"y", 1) == TERN_EREADONLY);
    CHECK(strlen(tern_last_error()) > 0);

    /* cursors both ways; closing the database or the transaction with live dependents is refused */
    tern_cursor *c = NULL;
    OK(tern_cursor_open(txn, NULL, &c));
    CHECK(tern_abort(txn) == TERN_EBUSY);
    CHECK(tern_close(db) == TERN_EBUSY);
    const uint8_t *k = NULL;
    size_t klen = 0;
    int n = 0, rc;
    for (rc = tern_cursor_get(c, TERN_FIRST, NULL, 0, &k, &klen, &v, &vlen); rc == TERN_OK;
         rc = tern_cursor_get(c, TERN_NEXT, NULL, 0, &k, &klen, &v, &vlen))
        n++;
    CHECK(rc == TERN_NOTFOUND && n == 3);
    OK(tern_cursor_get(c, TERN_LAST, NULL, 0, &k, &klen, &v, &vlen));
    CHECK(klen == 6 && memcmp(k, "banana", 6) == 0);
    OK(tern_cursor_get(c, TERN_PREV, NULL, 0, &k, &klen, &v, &vlen));
    CHECK(klen == 5 && memcmp(k, "apple", 5) == 0);
    OK(tern_cursor_get(c, TERN_SEEK, (const uint8_t *)"b", 1, &k, &klen, &v, &vlen));
    CHECK(klen == 6 && memcmp(k, "banana", 6) == 0);
    OK(tern_cursor_get(c, TERN_SEEK_FOR_PREV, (const uint8_t *)"b", 1, &k, &klen, &v, &vlen));
    CHECK(tern_cursor_get(c, TERN_SEEK, NULL, 1, &k, &klen, &v, &vlen) == TERN_EINVAL);
    CHECK(klen == 5 && memcmp(k, "apple", 5) == 0);
    OK(tern_cursor_close(c));
    OK(tern_abort(txn));

    /* tables */
    tern_table *t = NULL;
    OK(tern_create_table(db, "fruit", &t));
    tern_table *again = NULL;
    CHECK(tern_create_table(db, "fruit", &again) == TERN_EEXIST);
    CHECK(tern_table_open(db, "nuts", &again) == TERN_ENOTABLE);
    OK(tern_begin(db, 0, &txn));
    OK(tern_put(txn, t, (const uint8_t *)"fig", 3, (const uint8_t *)"purple", 6));
    OK(tern_delete(txn, NULL, (const uint8_t *)"apple", 5));
    CHECK(tern_delete(txn, NULL, (const uint8_t *)"apple", 5) == TERN_NOTFOUND);
    CHECK(tern_put(txn, NULL, (const uint8_t *)"", 0, (const uint8_t *)"v", 1) == TERN_EINVAL);
    CHECK(tern_put(txn, NULL, NULL, 3, (const uint8_t *)"v", 1) == TERN_EINVAL);
    OK(tern_commit(txn));
    tern_table_free(t);

    char *json = NULL;
    OK(tern_stats_json(db, &json));
    CHECK(json != NULL && strstr(json, "\"tables\"") != NULL);
    tern_free_string(json);

    OK(tern_close(db));

    /* everything survives a reopen */
    OK(tern_open(dir, &db));
    OK(tern_table_open(db, "fruit", &t));
    OK(tern_begin(db, 1, &txn));
    OK(tern_get(txn, t, (const uint8_t *)"fig", 3, &v, &vlen));
    CHECK(vlen == 6 && memcmp(v, "purple", 6) == 0);
    CHECK(tern_get(txn, NULL, (const uint8_t *)"apple", 5, &v, &vlen) == TERN_NOTFOUND);
    OK(tern_abort(txn));
    tern_table_free(t);
    OK(tern_close(db));

    /* bad arguments are errors, not crashes */
    CHECK(tern_open(NULL, &db) == TERN_EINVAL);
    CHECK(tern_begin(NULL, 0, &txn) == TERN_EINVAL);
    CHECK(tern_commit(NULL) == TERN_EINVAL);
    CHECK(strcmp(tern_strerror(TERN_NOTFOUND), "TERN_NOTFOUND: no such key") == 0);
}

static void *put_from_another_thread(void *txn) {
    static int rc;
    rc = tern_put((tern_txn *)txn, NULL, (const uint8_t *)"k", 1, (const uint8_t *)"v", 1);
    return &rc;
}

static void test_threads(const char *dir) {
    tern_db *db = NULL;
    OK(tern_open(dir, &db));
    tern_txn *txn = NULL;
    OK(tern_begin(db, 0, &txn));
    pthread_t t;
    void *rc = NULL;
    CHECK(pthread_create(&t, NULL, put_from_another_thread, txn) == 0);
    CHECK(pthread_join(t, &rc) == 0);
    CHECK(rc != NULL && *(int *)rc == TERN_EWRONG_THREAD);
    OK(tern_put(txn, NULL, (const uint8_t *)"k", 1, (const uint8_t *)"v", 1));
    OK(tern_commit(txn));
    OK(tern_close(db));
}

/* Out-of-range option values are TERN_EINVAL (the header's promise), not undefined behaviour. */
static void test_unknown_options(const char *dir) {
    tern_db *db = NULL;
    CHECK(tern_open_ex(dir, 0, (tern_durability)7, &db) == TERN_EINVAL);
    CHECK(db == NULL && strstr(tern_last_error(), "durability 7") != NULL);
    if (db) tern_close(db), db = NULL;
    CHECK(tern_open_ex(dir, 0, (tern_durability)-1, &db) == TERN_EINVAL);
    if (db) tern_close(db), db = NULL;
    OK(tern_open_ex(dir, 0, TERN_NOSYNC, &db));

    tern_txn *txn = NULL;
    OK(tern_begin(db, 0, &txn));
    OK(tern_put(txn, NULL, (const uint8_t *)"a", 1, (const uint8_t *)"1", 1));
    tern_cursor *c = NULL;
    OK(tern_cursor_open(txn, NULL, &c));
    const uint8_t *k = NULL, *v = NULL;
    size_t klen = 0, vlen = 0;
    CHECK(tern_cursor_get(c, (tern_cursor_op)9, NULL, 0, &k, &klen, &v, &vlen) == TERN_EINVAL);
    CHECK(strstr(tern_last_error(), "op 9") != NULL);
    CHECK(tern_cursor_get(c, (tern_cursor_op)-1, NULL, 0, &k, &klen, &v, &vlen) == TERN_EINVAL);
    CHECK(tern_cursor_get(c, (tern_cursor_op)6, (const uint8_t *)"a", 1, &k, &klen, &v, &vlen) == TERN_EINVAL);
    CHECK(k == NULL && klen == 0); /* nothing was stored */
    OK(tern_cursor_get(c, TERN_SEEK, (const uint8_t *)"a", 1, &k, &klen, &v, &vlen));
    CHECK(klen == 1 && k[0] == 'a' && vlen == 1 && v[0] == '1');
    OK(tern_cursor_close(c));
    OK(tern_abort(txn));
    OK(tern_close(db));
}

/* Lengths no pointer can cover, and lengths past tern's limits, are TERN_EINVAL before any byte
 * is read; the transaction stays usable. */
static void test_impossible_lengths(const char *dir) {
    tern_db *db = NULL;
    OK(tern_open(dir, &db));
    tern_txn *txn = NULL;
    OK(tern_begin(db, 0, &txn));
    const uint8_t *k = (const uint8_t *)"k", *v = NULL;
    size_t vlen = 0;
    uint8_t buf[8];
    CHECK(tern_put(txn, NULL, k, SIZE_MAX, k, 1) == TERN_EINVAL);
    CHECK(strstr(tern_last_error(), "key of") != NULL);
    CHECK(tern_put(txn, NULL, k, 1, k, SIZE_MAX) == TERN_EINVAL);
    CHECK(strstr(tern_last_error(), "value of") != NULL);
    CHECK(tern_put(txn, NULL, k, 1, k, (size_t)PTRDIFF_MAX + 1) == TERN_EINVAL);
    CHECK(tern_put(txn, NULL, k, 1, k, ((size_t)1 << 30) + 1) == TERN_EINVAL); /* 1 GiB + 1 */
    CHECK(tern_get(txn, NULL, k, SIZE_MAX, &v, &vlen) == TERN_EINVAL);
    CHECK(tern_get_copy(txn, NULL, k, SIZE_MAX, buf, sizeof buf, &vlen) == TERN_EINVAL);
    CHECK(tern_delete(txn, NULL, k, SIZE_MAX) == TERN_EINVAL);

    /* the longest key of a database with the default 16 KiB pages is 2048 bytes */
    static uint8_t longest[2049];
    memset(longest, 'x', sizeof longest);
    OK(tern_put(txn, NULL, longest, 2048, k, 1));
    CHECK(tern_put(txn, NULL, longest, 2049, k, 1) == TERN_EINVAL);
    CHECK(strstr(tern_last_error(), "maximum of 2048") != NULL);
    CHECK(tern_get(txn, NULL, longest, 2049, &v, &vlen) == TERN_EINVAL);
    OK(tern_get(txn, NULL, longest, 2048, &v, &vlen));

    tern_cursor *c = NULL;
    OK(tern_cursor_open(txn, NULL, &c));
    const uint8_t *ck = NULL, *cv = NULL;
    size_t cklen = 0, cvlen = 0;
    CHECK(tern_cursor_get(c, TERN_SEEK, k, SIZE_MAX, &ck, &cklen, &cv, &cvlen) == TERN_EINVAL);
    CHECK(tern_cursor_get(c, TERN_SEEK_FOR_PREV, k, SIZE_MAX, &ck, &cklen, &cv, &cvlen) == TERN_EINVAL);
    OK(tern_cursor_get(c, TERN_SEEK, longest, 1, &ck, &cklen, &cv, &cvlen));
    CHECK(cklen == 2048);
    OK(tern_cursor_close(c));

    OK(tern_put(txn, NULL, k, 1, k, 1));
    OK(tern_abort(txn));
    OK(tern_close(db));
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Two write transactions on one thread that write one key: with TERN_WAIT_FOREVER the second
 * would wait for the first forever; a lock wait bounds that. */
static void test_lock_wait(const char *dir) {
    tern_db *db = NULL;
    OK(tern_open_ex(dir, 0, TERN_NOSYNC, &db));
    tern_txn *first = NULL, *second = NULL, *third = NULL;
    OK(tern_begin(db, 0, &first));
    OK(tern_begin_ex(db, 0, 50, &second));
    OK(tern_put(first, NULL, (const uint8_t *)"k", 1, (const uint8_t *)"1", 1));
    double start = now_ms();
    CHECK(tern_put(second, NULL, (const uint8_t *)"k", 1, (const uint8_t *)"2", 1) == TERN_ETIMEDOUT);
    double waited = now_ms() - start;
    CHECK(waited >= 45 && waited < 10000);
    CHECK(strlen(tern_last_error()) > 0);

    OK(tern_begin_ex(db, 0, TERN_NO_WAIT, &third));
    start = now_ms();
    CHECK(tern_put(third, NULL, (const uint8_t *)"k", 1, (const uint8_t *)"3", 1) == TERN_EWOULDBLOCK);
    CHECK(now_ms() - start < 1000);
    OK(tern_put(third, NULL, (const uint8_t *)"other", 5, (const uint8_t *)"3", 1)); /* still usable */
    OK(tern_abort(third));

    CHECK(tern_begin_ex(db, 0, -2, &third) == TERN_EINVAL);
    CHECK(tern_begin_ex(db, 0, INT64_MIN, &third) == TERN_EINVAL);

    /* the timed-out transaction is not failed: once the holder aborts, the write goes through */
    OK(tern_abort(first));
    OK(tern_put(second, NULL, (const uint8_t *)"k", 1, (const uint8_t *)"2", 1));
    OK(tern_commit(second));

    /* read-only transactions take no locks: the wait is accepted and has no effect */
    OK(tern_begin_ex(db, 1, 0, &third));
    const uint8_t *v = NULL;
    size_t vlen = 0;
    OK(tern_get(third, NULL, (const uint8_t *)"k", 1, &v, &vlen));
    CHECK(vlen == 1 && v[0] == '2');
    OK(tern_abort(third));
    OK(tern_close(db));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    test_basics(argv[1]);
    test_threads(argv[1]);
    test_unknown_options(argv[1]);
    test_impossible_lengths(argv[1]);
    test_lock_wait(argv[1]);
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("all C checks passed\n");
    return 0;
}
