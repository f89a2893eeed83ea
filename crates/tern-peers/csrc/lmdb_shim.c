/*
 * LMDB shim. One environment, one unnamed database. Each session keeps a read-only transaction
 * that it resets and renews around every read (LMDB's fast path for repeated reads); writes use
 * a write transaction (LMDB serializes writers with its own mutex). Environment flags:
 * MDB_NOTLS (read transactions belong to sessions, not threads), MDB_NORDAHEAD, and per
 * durability level: none MDB_NOSYNC | MDB_NOMETASYNC; sync neither (each commit flushes the data
 * and then the meta page); nosync MDB_NOSYNC (written with pwrite, not flushed); periodic
 * MDB_NOSYNC, with lm_sync (mdb_env_sync, forced) called every interval by the Rust side.
 */
#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "shim.h"

typedef struct lm_db { MDB_env *env; MDB_dbi dbi; } lm_db;
typedef struct lm_session { lm_db *db; MDB_txn *rtxn; MDB_txn *wtxn; char err[SHIM_ERRLEN]; } lm_session;

static int fail(char *err, size_t len, const char *what, int rc) {
  snprintf(err, len, "%s: %s", what, mdb_strerror(rc));
  return SHIM_ERROR;
}

int lm_open(const char *path, size_t map_bytes, unsigned max_readers, int durability, unsigned flags, lm_db **out,
            char *err, size_t errlen) {
  lm_db *d = calloc(1, sizeof *d);
  MDB_txn *t;
  int rc;
  unsigned sync_flags = durability == SHIM_DURABILITY_SYNC     ? 0
                        : durability == SHIM_DURABILITY_NONE   ? MDB_NOSYNC | MDB_NOMETASYNC
                                                               : MDB_NOSYNC;
  (void)flags; /* LMDB has no cache of its own: the map is read through the OS page cache */
  if (!d) return fail(err, errlen, "calloc", ENOMEM);
  if ((rc = mdb_env_create(&d->env))) { free(d); return fail(err, errlen, "mdb_env_create", rc); }
  if ((rc = mdb_env_set_mapsize(d->env, map_bytes)) || (rc = mdb_env_set_maxreaders(d->env, max_readers)) ||
      (rc = mdb_env_open(d->env, path, sync_flags | MDB_NOTLS | MDB_NORDAHEAD, 0664))) {
    mdb_env_close(d->env); free(d); return fail(err, errlen, "mdb_env_open", rc);
  }
  if ((rc = mdb_txn_begin(d->env, NULL, 0, &t)) || (rc = mdb_dbi_open(t, NULL, 0, &d->dbi)) || (rc = mdb_txn_commit(t))) {
    mdb_env_close(d->env); free(d); return fail(err, errlen, "mdb_dbi_open", rc);
  }
  *out = d;
  return SHIM_OK;
}

void lm_close(lm_db *d) { mdb_env_close(d->env); free(d); }

/* LMDB has no cache: pages are read through the OS page cache (the map). */
size_t lm_cache_bytes(lm_db *d) { (void)d; return 0; }

lm_session *lm_session_open(lm_db *d) { lm_session *s = calloc(1, sizeof *s); if (s) s->db = d; return s; }

void lm_session_close(lm_session *s) {
  if (s->wtxn) mdb_txn_abort(s->wtxn);
  if (s->rtxn) mdb_txn_abort(s->rtxn);
  free(s);
}

const char *lm_error(lm_session *s) { return s->err; }

static int read_begin(lm_session *s) {
  int rc = s->rtxn ? mdb_txn_renew(s->rtxn) : mdb_txn_begin(s->db->env, NULL, MDB_RDONLY, &s->rtxn);
  return rc ? fail(s->err, sizeof s->err, "read txn", rc) : SHIM_OK;
}

int lm_get(lm_session *s, const void *k, size_t kl, shim_sink sink, void *ctx) {
  MDB_val key = {kl, (void *)k}, val;
  int rc;
  if (read_begin(s)) return SHIM_ERROR;
  rc = mdb_get(s->rtxn, s->db->dbi, &key, &val);
  if (rc == 0) sink(ctx, val.mv_data, val.mv_size);
  mdb_txn_reset(s->rtxn);
  if (rc == MDB_NOTFOUND) return SHIM_NOTFOUND;
  return rc ? fail(s->err, sizeof s->err, "mdb_get", rc) : SHIM_OK;
}

int lm_scan(lm_session *s, const void *start, size_t sl, size_t count, shim_visit visit, void *ctx, size_t *seen) {
  MDB_val key = {sl, (void *)start}, val;
  MDB_cursor *c;
  int rc;
  *seen = 0;
  if (read_begin(s)) return SHIM_ERROR;
  if ((rc = mdb_cursor_open(s->rtxn, s->db->dbi, &c))) { mdb_txn_reset(s->rtxn); return fail(s->err, sizeof s->err, "cursor", rc); }
  for (rc = mdb_cursor_get(c, &key, &val, MDB_SET_RANGE); rc == 0 && *seen < count; rc = mdb_cursor_get(c, &key, &val, MDB_NEXT)) {
    ++*seen;
    if (visit(ctx, key.mv_data, key.mv_size, val.mv_data, val.mv_size)) break;
  }
  mdb_cursor_close(c);
  mdb_txn_reset(s->rtxn);
  return (rc == 0 || rc == MDB_NOTFOUND) ? SHIM_OK : fail(s->err, sizeof s->err, "scan", rc);
}

int lm_begin(lm_session *s) {
  int rc = mdb_txn_begin(s->db->env, NULL, 0, &s->wtxn);
  return rc ? fail(s->err, sizeof s->err, "mdb_txn_begin", rc) : SHIM_OK;
}

int lm_txn_get(lm_session *s, const void *k, size_t kl, shim_sink sink, void *ctx) {
  MDB_val key = {kl, (void *)k}, val;
  int rc = mdb_get(s->wtxn, s->db->dbi, &key, &val);
  if (rc == MDB_NOTFOUND) return SHIM_NOTFOUND;
  if (rc) return fail(s->err, sizeof s->err, "mdb_get", rc);
  sink(ctx, val.mv_data, val.mv_size);
  return SHIM_OK;
}

int lm_txn_put(lm_session *s, const void *k, size_t kl, const void *v, size_t vl) {
  MDB_val key = {kl, (void *)k}, val = {vl, (void *)v};
  int rc = mdb_put(s->wtxn, s->db->dbi, &key, &val, 0);
  return rc ? fail(s->err, sizeof s->err, "mdb_put", rc) : SHIM_OK;
}

int lm_commit(lm_session *s) {
  int rc = mdb_txn_commit(s->wtxn);
  s->wtxn = NULL;
  return rc ? fail(s->err, sizeof s->err, "mdb_txn_commit", rc) : SHIM_OK;
}

void lm_abort(lm_session *s) { if (s->wtxn) mdb_txn_abort(s->wtxn); s->wtxn = NULL; }

/* Flushes everything committed so far (the periodic level's flush). */
int lm_sync(lm_session *s) {
  int rc = mdb_env_sync(s->db->env, 1);
  return rc ? fail(s->err, sizeof s->err, "mdb_env_sync", rc) : SHIM_OK;
}

const char *lm_version(void) { return mdb_version(NULL, NULL, NULL); }
