/*
 * The small C interface every peer shim exposes to Rust (src/shim.rs). One shim per engine
 * wraps that engine's C API (method tables, handle lifetimes, error codes) into the same
 * handful of calls, so the Rust side is one adapter for all of them.
 *
 * Return codes: SHIM_OK, SHIM_NOTFOUND (get), SHIM_RETRY (conflict or deadlock: the
 * transaction was rolled back and may be retried), SHIM_ERROR (see <engine>_error()).
 */
#ifndef TERN_SHIM_H
#define TERN_SHIM_H
#include <stddef.h>

#define SHIM_OK 0
#define SHIM_NOTFOUND 1
#define SHIM_RETRY 2
#define SHIM_ERROR (-1)

/* Receives a value read (copied before the call returns). */
typedef void (*shim_sink)(void *ctx, const void *data, size_t len);
/* Receives a scanned entry; returns nonzero to stop. */
typedef int (*shim_visit)(void *ctx, const void *key, size_t klen, const void *val, size_t vlen);

#define SHIM_ERRLEN 256

/*
 * Durability levels (the `durability` argument of <engine>_open; src/lib.rs `Durability`):
 * NONE     the settings from before tern had a log: nothing flushed, logs off where they can be;
 * SYNC     a commit returns once written and flushed to stable storage;
 * NOSYNC   a commit returns once written to the operating system, not flushed;
 * PERIODIC a commit returns at once (or once written to the OS where the engine cannot defer
 *          that); the Rust side calls <engine>_sync on a session of its own every interval.
 */
#define SHIM_DURABILITY_NONE 0
#define SHIM_DURABILITY_SYNC 1
#define SHIM_DURABILITY_NOSYNC 2
#define SHIM_DURABILITY_PERIODIC 3

/*
 * Flags of <engine>_open. SHIM_CACHE_GIVEN: the size argument is a cache size the run asked for
 * (`--cache`), the same for every engine: count in it whatever the engine can count there
 * (RocksDB: index and filter blocks go into the block cache). Without it the size is the
 * driver's default for the data set and each engine keeps its usual settings.
 *
 * <engine>_cache_bytes(db) returns the cache the engine has, as the library reports it where it
 * can (Berkeley DB: DB_ENV->get_cachesize; RocksDB: the block cache's capacity), what was
 * configured otherwise (WiredTiger), and 0 for an engine without a cache of its own (LMDB).
 */
#define SHIM_CACHE_GIVEN 1u
#endif
