#define _POSIX_C_SOURCE 200809L
/* Point reads through the C interface: the same database, keys and loop as point_reads.rs
 * (scripts/bindings-bench.sh builds and runs both). Usage: point_reads DIR RECORDS READS. */
#include "tern.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int fail(const char *what) {
    fprintf(stderr, "%s: %s\n", what, tern_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: point_reads DIR RECORDS READS\n");
        return 2;
    }
    uint64_t records = strtoull(argv[2], NULL, 10), reads = strtoull(argv[3], NULL, 10);
    tern_db *db;
    if (tern_open(argv[1], &db) != TERN_OK) return fail("open");
    tern_txn *txn;
    if (tern_begin(db, 1, &txn) != TERN_OK) return fail("begin");
    uint64_t x = 0x9E3779B97F4A7C15ull, found = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t i = 0; i < reads; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t k = x % records;
        uint8_t key[8];
        for (int b = 0; b < 8; b++) key[b] = (uint8_t)(k >> (56 - 8 * b));
        const uint8_t *v;
        size_t n;
        int rc = tern_get(txn, NULL, key, 8, &v, &n);
        if (rc == TERN_OK) found++;
        else if (rc != TERN_NOTFOUND) return fail("get");
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (found != reads) {
        fprintf(stderr, "found %llu of %llu keys: load the database first (point_reads.rs)\n",
                (unsigned long long)found, (unsigned long long)reads);
        return 1;
    }
    printf("c %llu %.4f %.1f\n", (unsigned long long)reads, secs, secs * 1e9 / (double)reads);
    tern_abort(txn);
    return tern_close(db) == TERN_OK ? 0 : fail("close");
}
