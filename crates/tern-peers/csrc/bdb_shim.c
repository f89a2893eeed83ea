/*
 * Berkeley DB shim: the transactional B-tree access method. Environment with locking, logging,
 * a memory pool sized by the caller, transactions and DB_THREAD; per durability level: none
 * DB_TXN_NOSYNC (commits stay in the log buffer); sync neither flag (commit writes and flushes
 * the log); nosync DB_TXN_WRITE_NOSYNC (written to the OS, not flushed); periodic DB_TXN_NOSYNC,
 * with bdb_sync (DB_ENV->log_flush of everything) every interval from the Rust side. Deadlock
 * detection on every conflict
 * (DB_LOCK_DEFAULT); lock region sized for a million locks. Every operation runs in a
 * transaction; reads in a write transaction take write locks (DB_RMW), as a read-modify-write
 * should, to avoid upgrade deadlocks. Deadlocks and lock timeouts become SHIM_RETRY.
 */
#include <db.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "shim.h"

typedef struct bdb_db { DB_ENV *env; DB *db; } bdb_db;
typedef struct bdb_session { bdb_db *d; DB_TXN *txn; DBT key, val; char err[SHIM_ERRLEN]; } bdb_session;

static int fail(char *err, size_t len, const char *what, int rc) {
  snprintf(err, len, "%s: %s", what, db_strerror(rc));
  return SHIM_ERROR;
}

int bdb_open(const char *path, size_t cache_bytes, unsigned sessions, int durability, unsigned flags, bdb_db **out,
             char *err, size_t errlen) {
  bdb_db *d = calloc(1, sizeof *d);
  int rc;
  const size_t gb = 1u << 30;
  (void)flags; /* the memory pool holds every page Berkeley DB keeps in memory, either way */
  if (!d) { snprintf(err, errlen, "calloc failed"); return SHIM_ERROR; }
  if ((rc = db_env_create(&d->env, 0))) { free(d); return fail(err, errlen, "db_env_create", rc); }
  d->env->set_cachesize(d->env, (u_int32_t)(cache_bytes / gb), (u_int32_t)(cache_bytes % gb), 1);
  d->env->set_lk_detect(d->env, DB_LOCK_DEFAULT);
  d->env->set_lk_max_locks(d->env, 1000000);
  d->env->set_lk_max_objects(d->env, 1000000);
  d->env->set_lk_max_lockers(d->env, 100000);
  d->env->set_tx_max(d->env, 10000);
  d->env->set_lg_bsize(d->env, 16u << 20);
  if (durability == SHIM_DURABILITY_NOSYNC) d->env->set_flags(d->env, DB_TXN_WRITE_NOSYNC, 1);
  else if (durability != SHIM_DURABILITY_SYNC) d->env->set_flags(d->env, DB_TXN_NOSYNC, 1);
  rc = d->env->open(d->env, path, DB_CREATE | DB_INIT_LOCK | DB_INIT_LOG | DB_INIT_MPOOL | DB_INIT_TXN | DB_THREAD | DB_RECOVER, 0);
  if (rc) { d->env->close(d->env, 0); free(d); return fail(err, errlen, "DB_ENV->open", rc); }
  if ((rc = db_create(&d->db, d->env, 0)) ||
      (rc = d->db->open(d->db, NULL, "kv.db", NULL, DB_BTREE, DB_CREATE | DB_AUTO_COMMIT | DB_THREAD, 0664))) {
    d->env->close(d->env, 0); free(d); return fail(err, errlen, "DB->open", rc);
  }
  *out = d;
  return SHIM_OK;
}

void bdb_close(bdb_db *d) { d->db->close(d->db, 0); d->env->close(d->env, 0); free(d); }

/* The memory pool's size as Berkeley DB reports it (it enlarges small caches for overhead). */
size_t bdb_cache_bytes(bdb_db *d) {
  u_int32_t gbytes = 0, bytes = 0;
  int ncache = 0;
  if (d->env->get_cachesize(d->env, &gbytes, &bytes, &ncache)) return 0;
  return ((size_t)gbytes << 30) + bytes;
}

bdb_session *bdb_session_open(bdb_db *d) {
  bdb_session *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->d = d;
  s->key.flags = DB_DBT_REALLOC;
  s->val.flags = DB_DBT_REALLOC;
  return s;
}

void bdb_session_close(bdb_session *s) {
  if (s->txn) s->txn->abort(s->txn);
  free(s->key.data);
  free(s->val.data);
  free(s);
}

const char *bdb_error(bdb_session *s) { return s->err; }

/* An operation failed inside a transaction: abort it; deadlocks become SHIM_RETRY. */
static int txn_fail(bdb_session *s, const char *what, int rc) {
  if (s->txn) { s->txn->abort(s->txn); s->txn = NULL; }
  if (rc == DB_LOCK_DEADLOCK || rc == DB_LOCK_NOTGRANTED) return SHIM_RETRY;
  return fail(s->err, sizeof s->err, what, rc);
}

int bdb_begin(bdb_session *s) {
  int rc = s->d->env->txn_begin(s->d->env, NULL, &s->txn, 0);
  return rc ? fail(s->err, sizeof s->err, "txn_begin", rc) : SHIM_OK;
}

int bdb_commit(bdb_session *s) {
  int rc = s->txn->commit(s->txn, 0);
  s->txn = NULL;
  if (rc == DB_LOCK_DEADLOCK) return SHIM_RETRY;
  return rc ? fail(s->err, sizeof s->err, "commit", rc) : SHIM_OK;
}

void bdb_abort(bdb_session *s) { if (s->txn) s->txn->abort(s->txn); s->txn = NULL; }

static int get_in(bdb_session *s, const void *k, size_t kl, shim_sink sink, void *ctx, u_int32_t flags) {
  DBT key;
  int rc;
  memset(&key, 0, sizeof key);
  key.data = (void *)k;
  key.size = (u_int32_t)kl;
  rc = s->d->db->get(s->d->db, s->txn, &key, &s->val, flags);
  if (rc == DB_NOTFOUND) return SHIM_NOTFOUND;
  if (rc) return txn_fail(s, "DB->get", rc);
  sink(ctx, s->val.data, s->val.size);
  return SHIM_OK;
}

int bdb_txn_get(bdb_session *s, const void *k, size_t kl, shim_sink sink, void *ctx) {
  return get_in(s, k, kl, sink, ctx, DB_RMW);
}

int bdb_txn_put(bdb_session *s, const void *k, size_t kl, const void *v, size_t vl) {
  DBT key, val;
  int rc;
  memset(&key, 0, sizeof key);
  memset(&val, 0, sizeof val);
  key.data = (void *)k;
  key.size = (u_int32_t)kl;
  val.data = (void *)v;
  val.size = (u_int32_t)vl;
  rc = s->d->db->put(s->d->db, s->txn, &key, &val, 0);
  return rc ? txn_fail(s, "DB->put", rc) : SHIM_OK;
}

int bdb_get(bdb_session *s, const void *k, size_t kl, shim_sink sink, void *ctx) {
  int rc;
  if (bdb_begin(s)) return SHIM_ERROR;
  rc = get_in(s, k, kl, sink, ctx, 0);
  if (rc == SHIM_OK || rc == SHIM_NOTFOUND) { int c = bdb_commit(s); if (c != SHIM_OK) return c; }
  return rc;
}

int bdb_scan(bdb_session *s, const void *start, size_t sl, size_t count, shim_visit visit, void *ctx, size_t *seen) {
  DBC *c;
  int rc;
  u_int32_t op = DB_SET_RANGE;
  *seen = 0;
  if (bdb_begin(s)) return SHIM_ERROR;
  if ((rc = s->d->db->cursor(s->d->db, s->txn, &c, 0))) return txn_fail(s, "DB->cursor", rc);
  s->key.data = realloc(s->key.data, sl ? sl : 1);
  memcpy(s->key.data, start, sl);
  s->key.size = (u_int32_t)sl;
  for (rc = c->get(c, &s->key, &s->val, op); rc == 0 && *seen < count; rc = c->get(c, &s->key, &s->val, DB_NEXT)) {
    ++*seen;
    if (visit(ctx, s->key.data, s->key.size, s->val.data, s->val.size)) break;
  }
  c->close(c);
  if (rc != 0 && rc != DB_NOTFOUND) return txn_fail(s, "scan", rc);
  return bdb_commit(s);
}

/* Writes and flushes the whole log (the periodic level's flush). */
int bdb_sync(bdb_session *s) {
  int rc = s->d->env->log_flush(s->d->env, NULL);
  return rc ? fail(s->err, sizeof s->err, "log_flush", rc) : SHIM_OK;
}

const char *bdb_version(void) { return db_version(NULL, NULL, NULL); }
