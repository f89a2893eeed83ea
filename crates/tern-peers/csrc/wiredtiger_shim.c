/*
 * WiredTiger shim. One table "table:kv" (key_format=u, value_format=u: raw byte strings). Each
 * session owns a WT_SESSION (isolation=snapshot) and a cursor on the table, reused across
 * operations. Every operation runs in an explicit transaction (begin/commit), reads included,
 * as tern's do. Connection: cache sized by the caller (cache_size, in bytes), one eviction
 * thread, and per durability level: none log=(enabled=false) (no durability); sync log on,
 * transaction_sync=(enabled=true,method=fsync); nosync log on,
 * transaction_sync=(enabled=true,method=none) (written to the OS at commit, not flushed);
 * periodic log on, transaction_sync=(enabled=false) (commit leaves its record in the log
 * buffer), with wt_sync (WT_SESSION::log_flush "sync=on") every interval from the Rust side.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wiredtiger.h>
#include "shim.h"

typedef struct wt_db { WT_CONNECTION *conn; size_t cache_bytes; } wt_db;
typedef struct wt_session { WT_SESSION *s; WT_CURSOR *c; int in_txn; char err[SHIM_ERRLEN]; } wt_session;

static int fail(char *err, size_t len, const char *what, int rc) {
  snprintf(err, len, "%s: %s", what, wiredtiger_strerror(rc));
  return SHIM_ERROR;
}

int wt_open(const char *path, size_t cache_bytes, unsigned sessions, int durability, unsigned flags, wt_db **out,
            char *err, size_t errlen) {
  char config[512];
  const char *log = durability == SHIM_DURABILITY_SYNC
                        ? "log=(enabled=true),transaction_sync=(enabled=true,method=fsync)"
                    : durability == SHIM_DURABILITY_NOSYNC
                        ? "log=(enabled=true),transaction_sync=(enabled=true,method=none)"
                    : durability == SHIM_DURABILITY_PERIODIC ? "log=(enabled=true),transaction_sync=(enabled=false)"
                                                             : "log=(enabled=false)";
  WT_SESSION *s;
  wt_db *d = calloc(1, sizeof *d);
  int rc;
  (void)flags; /* the cache holds everything WiredTiger keeps in memory, either way */
  if (!d) { snprintf(err, errlen, "calloc failed"); return SHIM_ERROR; }
  /* In bytes (a plain integer is bytes), at least WiredTiger's minimum of 1 MB. */
  d->cache_bytes = cache_bytes < (1u << 20) ? (1u << 20) : cache_bytes;
  snprintf(config, sizeof config,
           "create,cache_size=%zu,session_max=%u,%s,eviction=(threads_min=1,threads_max=1)",
           d->cache_bytes, sessions, log);
  if ((rc = wiredtiger_open(path, NULL, config, &d->conn))) { free(d); return fail(err, errlen, "wiredtiger_open", rc); }
  if ((rc = d->conn->open_session(d->conn, NULL, NULL, &s)) ||
      (rc = s->create(s, "table:kv", "key_format=u,value_format=u")) || (rc = s->close(s, NULL))) {
    d->conn->close(d->conn, NULL); free(d); return fail(err, errlen, "create table", rc);
  }
  *out = d;
  return SHIM_OK;
}

void wt_close(wt_db *d) { d->conn->close(d->conn, NULL); free(d); }

/* The cache_size given to wiredtiger_open (WiredTiger has no getter without statistics). */
size_t wt_cache_bytes(wt_db *d) { return d->cache_bytes; }

wt_session *wt_session_open(wt_db *d) {
  wt_session *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  if (d->conn->open_session(d->conn, NULL, "isolation=snapshot", &w->s) ||
      w->s->open_cursor(w->s, "table:kv", NULL, NULL, &w->c)) { free(w); return NULL; }
  return w;
}

void wt_session_close(wt_session *w) { w->s->close(w->s, NULL); free(w); }

const char *wt_error(wt_session *w) { return w->err; }

static void set_key(WT_CURSOR *c, const void *k, size_t kl) {
  WT_ITEM key;
  memset(&key, 0, sizeof key);
  key.data = k;
  key.size = kl;
  c->set_key(c, &key);
}

/* An operation failed inside a transaction: roll it back; conflicts become SHIM_RETRY. */
static int txn_fail(wt_session *w, const char *what, int rc) {
  w->c->reset(w->c);
  if (w->in_txn) { w->s->rollback_transaction(w->s, NULL); w->in_txn = 0; }
  if (rc == WT_ROLLBACK) return SHIM_RETRY;
  return fail(w->err, sizeof w->err, what, rc);
}

int wt_begin(wt_session *w) {
  int rc = w->s->begin_transaction(w->s, NULL);
  if (rc) return fail(w->err, sizeof w->err, "begin_transaction", rc);
  w->in_txn = 1;
  return SHIM_OK;
}

int wt_commit(wt_session *w) {
  int rc = w->s->commit_transaction(w->s, NULL);
  w->in_txn = 0;
  if (rc == WT_ROLLBACK) return SHIM_RETRY;
  return rc ? fail(w->err, sizeof w->err, "commit_transaction", rc) : SHIM_OK;
}

void wt_abort(wt_session *w) {
  if (w->in_txn) w->s->rollback_transaction(w->s, NULL);
  w->in_txn = 0;
}

int wt_txn_get(wt_session *w, const void *k, size_t kl, shim_sink sink, void *ctx) {
  WT_ITEM val;
  int rc;
  set_key(w->c, k, kl);
  rc = w->c->search(w->c);
  if (rc == WT_NOTFOUND) { w->c->reset(w->c); return SHIM_NOTFOUND; }
  if (rc || (rc = w->c->get_value(w->c, &val))) return txn_fail(w, "search", rc);
  sink(ctx, val.data, val.size);
  w->c->reset(w->c);
  return SHIM_OK;
}

int wt_txn_put(wt_session *w, const void *k, size_t kl, const void *v, size_t vl) {
  WT_ITEM val;
  int rc;
  memset(&val, 0, sizeof val);
  val.data = v;
  val.size = vl;
  set_key(w->c, k, kl);
  w->c->set_value(w->c, &val);
  if ((rc = w->c->insert(w->c))) return txn_fail(w, "insert", rc);
  w->c->reset(w->c);
  return SHIM_OK;
}

int wt_get(wt_session *w, const void *k, size_t kl, shim_sink sink, void *ctx) {
  int rc;
  if (wt_begin(w)) return SHIM_ERROR;
  rc = wt_txn_get(w, k, kl, sink, ctx);
  if (rc == SHIM_OK || rc == SHIM_NOTFOUND) { int c = wt_commit(w); if (c != SHIM_OK) return c; }
  return rc;
}

int wt_scan(wt_session *w, const void *start, size_t sl, size_t count, shim_visit visit, void *ctx, size_t *seen) {
  WT_ITEM key, val;
  int rc, exact;
  *seen = 0;
  if (wt_begin(w)) return SHIM_ERROR;
  set_key(w->c, start, sl);
  rc = w->c->search_near(w->c, &exact);
  if (rc == 0 && exact < 0) rc = w->c->next(w->c);
  for (; rc == 0 && *seen < count; rc = w->c->next(w->c)) {
    if ((rc = w->c->get_key(w->c, &key)) || (rc = w->c->get_value(w->c, &val))) break;
    ++*seen;
    if (visit(ctx, key.data, key.size, val.data, val.size)) break;
  }
  if (rc != 0 && rc != WT_NOTFOUND) return txn_fail(w, "scan", rc);
  w->c->reset(w->c);
  return wt_commit(w);
}

/* Writes and flushes the log (the periodic level's flush). */
int wt_sync(wt_session *w) {
  int rc = w->s->log_flush(w->s, "sync=on");
  return rc ? fail(w->err, sizeof w->err, "log_flush", rc) : SHIM_OK;
}

const char *wt_version(void) { return wiredtiger_version(NULL, NULL, NULL); }
