/*
 * RocksDB shim: a TransactionDB (pessimistic transactions with deadlock detection and a 1 s
 * lock timeout). Block cache sized by the caller; with SHIM_CACHE_GIVEN (the run's --cache) index
 * and filter blocks are kept in it (L0's pinned) instead of on the heap; memtables (write
 * buffers) keep RocksDB's defaults and live outside it (rx_write_buffers). Per durability level: none disables the
 * write-ahead log; sync WAL on, WriteOptions sync=1 (fdatasync at commit); nosync WAL on, sync=0
 * (written to the OS at commit); periodic WAL on, sync=0, manual_wal_flush=1 (commit leaves its
 * record in RocksDB's buffer), with rx_sync (FlushWAL(sync=true)) every interval from the Rust
 * side. Point reads outside a write transaction are plain
 * (implicitly snapshotted) gets; scans iterate from a seek. Busy, timed-out and deadlocked
 * transactions become SHIM_RETRY.
 */
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "shim.h"

typedef struct rx_db {
  rocksdb_transactiondb_t *db;
  rocksdb_options_t *opts;
  rocksdb_transactiondb_options_t *topts;
  rocksdb_transaction_options_t *txo;
  rocksdb_writeoptions_t *wo;
  rocksdb_readoptions_t *ro;
  rocksdb_cache_t *cache;
  rocksdb_block_based_table_options_t *bbto;
} rx_db;
typedef struct rx_session { rx_db *d; rocksdb_transaction_t *txn; int in_txn; char err[SHIM_ERRLEN]; } rx_session;

int rx_open(const char *path, size_t cache_bytes, unsigned sessions, int durability, unsigned flags, rx_db **out,
            char *err, size_t errlen) {
  char *e = NULL;
  rx_db *d = calloc(1, sizeof *d);
  if (!d) { snprintf(err, errlen, "calloc failed"); return SHIM_ERROR; }
  d->opts = rocksdb_options_create();
  rocksdb_options_set_create_if_missing(d->opts, 1);
  rocksdb_options_increase_parallelism(d->opts, 2);
  if (durability == SHIM_DURABILITY_PERIODIC) rocksdb_options_set_manual_wal_flush(d->opts, 1);
  d->cache = rocksdb_cache_create_lru(cache_bytes);
  d->bbto = rocksdb_block_based_options_create();
  rocksdb_block_based_options_set_block_cache(d->bbto, d->cache);
  if (flags & SHIM_CACHE_GIVEN) {
    /* The run's cache: index and filter blocks count in it too (L0's pinned there), instead of
     * living on the heap beside it. */
    rocksdb_block_based_options_set_cache_index_and_filter_blocks(d->bbto, 1);
    rocksdb_block_based_options_set_pin_l0_filter_and_index_blocks_in_cache(d->bbto, 1);
  }
  rocksdb_options_set_block_based_table_factory(d->opts, d->bbto);
  d->topts = rocksdb_transactiondb_options_create();
  rocksdb_transactiondb_options_set_transaction_lock_timeout(d->topts, 1000);
  d->txo = rocksdb_transaction_options_create();
  rocksdb_transaction_options_set_deadlock_detect(d->txo, 1);
  d->wo = rocksdb_writeoptions_create();
  if (durability == SHIM_DURABILITY_NONE) rocksdb_writeoptions_disable_WAL(d->wo, 1);
  rocksdb_writeoptions_set_sync(d->wo, durability == SHIM_DURABILITY_SYNC);
  d->ro = rocksdb_readoptions_create();
  d->db = rocksdb_transactiondb_open(d->opts, d->topts, path, &e);
  if (e) { snprintf(err, errlen, "rocksdb_transactiondb_open: %s", e); rocksdb_free(e); free(d); return SHIM_ERROR; }
  *out = d;
  return SHIM_OK;
}

void rx_close(rx_db *d) {
  rocksdb_transactiondb_close(d->db);
  rocksdb_readoptions_destroy(d->ro);
  rocksdb_writeoptions_destroy(d->wo);
  rocksdb_transaction_options_destroy(d->txo);
  rocksdb_transactiondb_options_destroy(d->topts);
  rocksdb_options_destroy(d->opts);
  rocksdb_block_based_options_destroy(d->bbto);
  rocksdb_cache_destroy(d->cache);
  free(d);
}

/* The block cache's capacity. */
size_t rx_cache_bytes(rx_db *d) { return rocksdb_cache_get_capacity(d->cache); }

/* The memtables, which live outside the block cache: bytes each, and how many at most. */
void rx_write_buffers(rx_db *d, size_t *bytes, int *number) {
  *bytes = rocksdb_options_get_write_buffer_size(d->opts);
  *number = rocksdb_options_get_max_write_buffer_number(d->opts);
}

rx_session *rx_session_open(rx_db *d) { rx_session *s = calloc(1, sizeof *s); if (s) s->d = d; return s; }

void rx_session_close(rx_session *s) { if (s->txn) rocksdb_transaction_destroy(s->txn); free(s); }

const char *rx_error(rx_session *s) { return s->err; }

static int is_retry(const char *e) {
  return strstr(e, "Busy") || strstr(e, "busy") || strstr(e, "TimedOut") || strstr(e, "timed out") ||
         strstr(e, "Deadlock") || strstr(e, "deadlock") || strstr(e, "TryAgain");
}

/* An operation failed inside a transaction: roll it back; conflicts become SHIM_RETRY. */
static int txn_fail(rx_session *s, const char *what, char *e) {
  int retry = is_retry(e);
  char *ignored = NULL;
  snprintf(s->err, sizeof s->err, "%s: %s", what, e);
  rocksdb_free(e);
  if (s->in_txn) { rocksdb_transaction_rollback(s->txn, &ignored); if (ignored) rocksdb_free(ignored); s->in_txn = 0; }
  return retry ? SHIM_RETRY : SHIM_ERROR;
}

int rx_begin(rx_session *s) {
  s->txn = rocksdb_transaction_begin(s->d->db, s->d->wo, s->d->txo, s->txn);
  s->in_txn = 1;
  return SHIM_OK;
}

int rx_commit(rx_session *s) {
  char *e = NULL;
  rocksdb_transaction_commit(s->txn, &e);
  if (e) return txn_fail(s, "commit", e);
  s->in_txn = 0;
  return SHIM_OK;
}

void rx_abort(rx_session *s) {
  char *e = NULL;
  if (s->in_txn) { rocksdb_transaction_rollback(s->txn, &e); if (e) rocksdb_free(e); }
  s->in_txn = 0;
}

int rx_txn_get(rx_session *s, const void *k, size_t kl, shim_sink sink, void *ctx) {
  char *e = NULL;
  size_t vl;
  char *v = rocksdb_transaction_get_for_update(s->txn, s->d->ro, k, kl, &vl, 1, &e);
  if (e) return txn_fail(s, "get_for_update", e);
  if (!v) return SHIM_NOTFOUND;
  sink(ctx, v, vl);
  rocksdb_free(v);
  return SHIM_OK;
}

int rx_txn_put(rx_session *s, const void *k, size_t kl, const void *v, size_t vl) {
  char *e = NULL;
  rocksdb_transaction_put(s->txn, k, kl, v, vl, &e);
  return e ? txn_fail(s, "put", e) : SHIM_OK;
}

int rx_get(rx_session *s, const void *k, size_t kl, shim_sink sink, void *ctx) {
  char *e = NULL;
  size_t vl;
  rocksdb_pinnableslice_t *p = rocksdb_transactiondb_get_pinned(s->d->db, s->d->ro, k, kl, &e);
  if (e) { snprintf(s->err, sizeof s->err, "get: %s", e); rocksdb_free(e); return SHIM_ERROR; }
  if (!p) return SHIM_NOTFOUND;
  /* Read the value first: the length is an out-parameter of the same call. */
  const char *v = rocksdb_pinnableslice_value(p, &vl);
  sink(ctx, v, vl);
  rocksdb_pinnableslice_destroy(p);
  return SHIM_OK;
}

int rx_scan(rx_session *s, const void *start, size_t sl, size_t count, shim_visit visit, void *ctx, size_t *seen) {
  rocksdb_iterator_t *it = rocksdb_transactiondb_create_iterator(s->d->db, s->d->ro);
  char *e = NULL;
  *seen = 0;
  for (rocksdb_iter_seek(it, start, sl); rocksdb_iter_valid(it) && *seen < count; rocksdb_iter_next(it)) {
    size_t kl, vl;
    const char *k = rocksdb_iter_key(it, &kl), *v = rocksdb_iter_value(it, &vl);
    ++*seen;
    if (visit(ctx, k, kl, v, vl)) break;
  }
  rocksdb_iter_get_error(it, &e);
  rocksdb_iter_destroy(it);
  if (e) { snprintf(s->err, sizeof s->err, "scan: %s", e); rocksdb_free(e); return SHIM_ERROR; }
  return SHIM_OK;
}

/* Writes and flushes the WAL (the periodic level's flush). */
int rx_sync(rx_session *s) {
  char *e = NULL;
  rocksdb_transactiondb_flush_wal(s->d->db, 1, &e);
  if (e) { snprintf(s->err, sizeof s->err, "flush_wal: %s", e); rocksdb_free(e); return SHIM_ERROR; }
  return SHIM_OK;
}

/* rocksdb/version.h is C++; build.rs reads the version from it into TERN_ROCKSDB_VERSION. */
#ifndef TERN_ROCKSDB_VERSION
#define TERN_ROCKSDB_VERSION "unknown"
#endif
const char *rx_version(void) { return "RocksDB " TERN_ROCKSDB_VERSION; }
