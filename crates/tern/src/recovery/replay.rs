//! Log replay: the commits after the checkpoint, applied in batches sorted by key, by a second
//! thread while the log is read.
//!
//! Applying each write as it is read costs one descent to a random leaf per write. Replay
//! instead gathers the writes of consecutive commits into a batch of up to [`batch_bytes`] of
//! keys and values, sorts it by table and key (log order kept among the writes to one key),
//! and applies only the last write of each key, in key order: consecutive writes land in the
//! same leaf or the next one, whose path is already in the cache. The thread that scans the
//! log (reads, checks, decodes, gathers and sorts) hands each sorted batch to an applier
//! thread (`tern-replay`) and goes on reading; two batches are in flight at most. With
//! `WalConfig::deferred_replay`, the last batch is not handed over: once every batch before it
//! is applied, it is returned sorted, one write per key, and applied after the open
//! (`deferred.rs`).
//!
//! # Invariants
//! 1. Batches are applied whole and in log order, and within a batch each key ends as it would
//!    if every write were applied in turn: a write is a whole value or a delete (the log is a
//!    logical redo log, never deltas), so the last one decides.
//! 2. A table is created, and a commit larger than a batch is applied (in place, not copied),
//!    only once every batch handed over before it has been applied: the scanning thread waits
//!    for the applier to return them all, then does it itself while the applier waits.
//! 3. What can be checked as a record is read (the tables it writes exist, key and value
//!    lengths, the name a creation gives) is checked then, so the error names that record's
//!    file and offset. A
//!    tree's error while applying (an I/O error of the page file, say) stops the replay and is
//!    returned as it is, typed, instead of being reported as damage to the log.

use crate::btree::{BTree, TreeConfig, MAX_VALUE};
use crate::buffer::page::prefetch_line;
use crate::buffer::{advise_huge_pages, Pool};
use crate::wal::record::{Op, Record};
use crate::{Error, Result};
use std::cmp::Ordering;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};

/// Keys and values a batch gathers before it is sorted and applied, at least.
pub(crate) const BATCH_BYTES: usize = 32 << 20;
/// ... and at most (see [`batch_bytes`]).
pub(crate) const MAX_BATCH_BYTES: usize = 1 << 30;

/// The batch size for a replay into `pool`: an eighth of its cache, within
/// [`BATCH_BYTES`]..=[`MAX_BATCH_BYTES`]. Once a table is larger than the cache, each batch
/// sweeps most of its leaves through the pool (a batch's keys are spread over the whole key
/// space), so the page traffic of a replay is about one sweep per batch: batches that grow
/// with the cache make fewer sweeps, for at most a quarter of the cache in memory besides the
/// pool (two batches are in flight).
///
/// A log of at most half the cache (`log_bytes`, its files' sizes) is gathered into one batch
/// instead: one sweep of the pool in all. Into a table larger than the cache, each sweep
/// faults in and writes back most leaves, so this halves the page traffic of the common case
/// (a crash with up to `WalConfig::checkpoint_bytes` of log) at the price of holding the log's
/// writes in memory while they apply.
pub(crate) fn batch_bytes(pool: &Pool, log_bytes: u64) -> usize {
    if !pool.evicts() {
        return BATCH_BYTES;
    }
    let cache = pool.frames_share().saturating_mul(pool.page_size());
    let sweep = (cache / 8).clamp(BATCH_BYTES, MAX_BATCH_BYTES);
    let whole = usize::try_from(log_bytes).unwrap_or(usize::MAX);
    if whole > sweep && whole <= (cache / 2).min(MAX_BATCH_BYTES) {
        whole
    } else {
        sweep
    }
}

/// How many writes ahead of the one applied the bytes of one are prefetched.
const PREFETCH_AHEAD: usize = 8;

/// A value length that marks a delete.
const DELETE: u32 = u32::MAX;

type Tables = Vec<(u32, String, BTree)>;

/// One write of a batch: its key and value are in the batch's bytes.
#[derive(Clone, Copy)]
pub(super) struct Write {
    /// The key's first 16 bytes as two big-endian words, zero-padded: they order most pairs
    /// of keys without reading the bytes (keys often share their first 8 bytes).
    head: [u64; 2],
    pub(super) table: u32,
    /// Position in the batch (log order).
    seq: u32,
    /// Offset of the key in the batch's bytes; the value follows it.
    at: usize,
    key_len: u32,
    /// The value's length, or [`DELETE`].
    value_len: u32,
}

/// A key's first 16 bytes as two big-endian words, zero-padded.
pub(super) fn head(key: &[u8]) -> [u64; 2] {
    let mut head = [0u8; 16];
    let n = key.len().min(16);
    head[..n].copy_from_slice(&key[..n]);
    let word = |i: usize| u64::from_be_bytes(head[i..i + 8].try_into().expect("8 bytes"));
    [word(0), word(8)]
}

/// Writes gathered from consecutive commits, and their keys and values.
#[derive(Default)]
pub(super) struct Batch {
    bytes: Vec<u8>,
    pub(super) writes: Vec<Write>,
}

impl Batch {
    /// An empty batch with room for `bytes` of keys and values (and a write per 32 bytes of
    /// them), backed by huge pages where the kernel has them: the applier reads a batch's bytes
    /// in key order, at random, and 4 KiB pages made that a TLB miss per write.
    fn with_capacity(bytes: usize) -> Batch {
        let mut batch = Batch { bytes: Vec::with_capacity(bytes), writes: Vec::with_capacity(bytes / 32) };
        advise_huge_pages(&mut batch.bytes);
        advise_huge_pages(&mut batch.writes);
        batch
    }

    fn push(&mut self, op: &Op<'_>) {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(op.key);
        if let Some(value) = op.value {
            self.bytes.extend_from_slice(value);
        }
        self.writes.push(Write {
            head: head(op.key),
            table: op.table,
            seq: self.writes.len() as u32,
            at,
            // Keys are at most an eighth of a page and values at most 1 GiB (`record.rs`).
            key_len: op.key.len() as u32,
            value_len: op.value.map_or(DELETE, |v| v.len() as u32),
        });
    }

    pub(super) fn key(&self, w: &Write) -> &[u8] {
        &self.bytes[w.at..w.at + w.key_len as usize]
    }

    pub(super) fn value(&self, w: &Write) -> Option<&[u8]> {
        let start = w.at + w.key_len as usize;
        (w.value_len != DELETE).then(|| &self.bytes[start..start + w.value_len as usize])
    }

    /// Sorts the writes by table and key, log order among writes to one key.
    fn sort(&mut self) {
        let mut writes = std::mem::take(&mut self.writes);
        writes.sort_unstable_by(|a, b| {
            (a.table, a.head).cmp(&(b.table, b.head)).then_with(|| self.tail_order(a, b)).then(a.seq.cmp(&b.seq))
        });
        self.writes = writes;
    }

    /// The order of two keys with the same 16-byte head: keys of at most 16 bytes then differ
    /// only in trailing zeros, so the shorter is the smaller.
    fn tail_order(&self, a: &Write, b: &Write) -> Ordering {
        if a.key_len <= 16 && b.key_len <= 16 {
            a.key_len.cmp(&b.key_len)
        } else {
            self.key(a).cmp(self.key(b))
        }
    }

    fn same_key(&self, a: &Write, b: &Write) -> bool {
        a.table == b.table && a.head == b.head && self.tail_order(a, b) == Ordering::Equal
    }

    /// How the key of `w` orders against `key` (whose [`head`] is `head`): the order of
    /// [`Batch::sort`] within a table, which is the bytes' lexicographic order.
    pub(super) fn cmp_key(&self, w: &Write, key: &[u8], head: [u64; 2]) -> Ordering {
        w.head.cmp(&head).then_with(|| match w.key_len <= 16 && key.len() <= 16 {
            true => (w.key_len as usize).cmp(&key.len()),
            false => self.key(w).cmp(key),
        })
    }

    /// Sorts the batch and keeps only the last write of each key (invariant 1).
    pub(super) fn sort_last_only(&mut self) {
        self.sort();
        let mut writes = std::mem::take(&mut self.writes);
        let mut kept = 0;
        for i in 0..writes.len() {
            if i + 1 == writes.len() || !self.same_key(&writes[i], &writes[i + 1]) {
                writes[kept] = writes[i];
                kept += 1;
            }
        }
        writes.truncate(kept);
        self.writes = writes;
        // Kept until applied: give back what the batch reserved and did not use.
        self.writes.shrink_to_fit();
        self.bytes.shrink_to_fit();
    }

    /// Applies the last write of each key of a sorted batch, in order, table by table, each
    /// table's writes leaf by leaf (`BTree::apply_sorted`).
    fn apply(&self, tables: &Tables) -> Result<()> {
        let writes = &self.writes;
        let mut start = 0;
        while let Some(first) = writes.get(start) {
            let end = start + writes[start..].partition_point(|w| w.table == first.table);
            self.apply_run(start..end, &tables[first.table as usize].2)?;
            start = end;
        }
        Ok(())
    }

    /// Applies the last write of each key among `writes[run]` (sorted, all of one table) to
    /// `tree`, leaf by leaf.
    pub(super) fn apply_run(&self, run: std::ops::Range<usize>, tree: &BTree) -> Result<()> {
        let writes = &self.writes[run];
        let mut last = (0..writes.len())
            // A later write to the same key decides (invariant 1).
            .filter(|&i| i + 1 == writes.len() || !self.same_key(&writes[i], &writes[i + 1]))
            .map(|i| {
                // Sorted writes visit the batch's bytes in random order: fetch ahead.
                if let Some(ahead) = writes.get(i + PREFETCH_AHEAD) {
                    let at = self.bytes.as_ptr().wrapping_add(ahead.at);
                    prefetch_line(at);
                    prefetch_line(at.wrapping_add(64));
                }
                (self.key(&writes[i]), self.value(&writes[i]))
            })
            .peekable();
        tree.apply_sorted(&mut last)
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.writes.clear();
    }
}

fn apply(tables: &Tables, table: u32, key: &[u8], value: Option<&[u8]>) -> Result<()> {
    let tree = &tables[table as usize].2;
    match value {
        Some(value) => tree.upsert(key, value).map(drop),
        None => tree.delete(key).map(drop),
    }
}

/// Replays the log records `scan` hands to [`Replay::record`] into `tables`; returns what
/// `scan` returned, or the first error of the replay. With `defer`, the last batch is not
/// applied but returned, sorted with one write per key, once every batch before it is applied
/// (`deferred.rs` applies it after the database opened).
pub(crate) fn replay<T>(
    tables: &mut Tables,
    snapshot: u64,
    config: TreeConfig,
    pool: &Arc<Pool>,
    batch_bytes: usize,
    defer: bool,
    scan: impl FnOnce(&mut Replay<'_>) -> Result<T>,
) -> Result<(T, Option<Batch>)> {
    let count = tables.len();
    let tables = Mutex::new(tables);
    std::thread::scope(|s| {
        let (to_applier, batches) = sync_channel::<Batch>(1);
        let (returns, returned) = channel::<Batch>();
        let tables = &tables;
        let applier = std::thread::Builder::new()
            .name("tern-replay".into())
            .spawn_scoped(s, move || apply_batches(tables, batches, returns))
            .map_err(|source| Error::Io { what: "starting the log replay thread".into(), source })?;
        let mut r = Replay {
            tables,
            count,
            snapshot,
            config,
            pool,
            batch_bytes,
            batch: Batch::with_capacity(batch_bytes),
            spare: None,
            to_applier: Some(to_applier),
            returned,
            in_flight: 0,
            failed: None,
        };
        let scanned = scan(&mut r);
        let mut last = None;
        let flushed = match r.failed.is_none() && scanned.is_ok() {
            false => Ok(()),
            true if defer => r.wait_idle().map(|()| {
                let mut batch = std::mem::take(&mut r.batch);
                batch.sort_last_only();
                last = (!batch.writes.is_empty()).then_some(batch);
            }),
            true => r.hand_over(),
        };
        r.to_applier = None;
        let applied = applier.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // The applier's error first: the scan saw only that the replay stopped.
        applied?;
        if let Some(e) = r.failed.take() {
            return Err(e);
        }
        let scanned = scanned?;
        flushed?;
        Ok((scanned, last))
    })
}

/// The applier: applies each batch it is handed, then hands it back (emptied, for reuse).
fn apply_batches(tables: &Mutex<&mut Tables>, batches: Receiver<Batch>, returns: Sender<Batch>) -> Result<()> {
    for mut batch in batches {
        {
            let tables = tables.lock().unwrap_or_else(PoisonError::into_inner);
            batch.apply(&tables)?;
        }
        batch.clear();
        if returns.send(batch).is_err() {
            break;
        }
    }
    Ok(())
}

/// The scanning side of a replay: takes records, gathers and sorts batches.
pub(crate) struct Replay<'r> {
    tables: &'r Mutex<&'r mut Tables>,
    /// Tables that exist so far in the log.
    count: usize,
    /// Commits at or below it are in the checkpoint already.
    snapshot: u64,
    config: TreeConfig,
    pool: &'r Arc<Pool>,
    batch_bytes: usize,
    batch: Batch,
    /// An emptied batch back from the applier.
    spare: Option<Batch>,
    to_applier: Option<SyncSender<Batch>>,
    returned: Receiver<Batch>,
    /// Batches handed over and not yet back.
    in_flight: usize,
    /// An error of this side (creating a table, applying a large commit).
    failed: Option<Error>,
}

/// What the scan is told when the applier has stopped (its error is returned instead).
const STOPPED: &str = "the log replay stopped";

impl Replay<'_> {
    /// Takes one record from the log scan; an error says why it cannot apply (the scan names
    /// its place).
    pub(crate) fn record(&mut self, record: Record<'_>) -> std::result::Result<(), String> {
        match record {
            // Already in the checkpoint (cannot happen after its LSN, see `wal` invariant 1).
            Record::Commit { ts, .. } if ts <= self.snapshot => Ok(()),
            Record::Commit { ops, .. } => {
                if let Some(op) = ops.iter().find(|op| op.table as usize >= self.count) {
                    return Err(format!("a commit writes to table {}, which does not exist", op.table));
                }
                // What the trees would refuse, refused here, where the error names the record.
                let max_key = self.config.page_size / 8;
                if let Some(op) = ops.iter().find(|op| op.key.is_empty() || op.key.len() > max_key) {
                    return Err(format!(
                        "a commit writes a key of {} bytes (keys are 1..={max_key} bytes)",
                        op.key.len()
                    ));
                }
                if let Some(op) = ops.iter().find(|op| op.value.is_some_and(|v| v.len() > MAX_VALUE)) {
                    let len = op.value.map_or(0, <[u8]>::len);
                    return Err(format!("a commit writes a value of {len} bytes (at most {MAX_VALUE})"));
                }
                let size: usize = ops.iter().map(|op| op.key.len() + op.value.map_or(0, <[u8]>::len)).sum();
                if self.batch.bytes.len() + size > self.batch_bytes {
                    self.hand_over().map_err(|e| self.stop(e))?;
                }
                if size > self.batch_bytes {
                    return self
                        .alone(|tables| ops.iter().try_for_each(|op| apply(tables, op.table, op.key, op.value)));
                }
                for op in &ops {
                    self.batch.push(op);
                }
                Ok(())
            }
            // `scan` hands out whole commits, parts merged.
            Record::Part { .. } => Err("a commit part outside its commit".into()),
            Record::CreateTable { id, name, .. } => {
                if (id as usize) < self.count {
                    let tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
                    let existing = &tables[id as usize].1;
                    return match existing == name {
                        true => Ok(()),
                        false => Err(format!("table {id} is named {existing:?}, the log says {name:?}")),
                    };
                }
                if id as usize != self.count {
                    return Err(format!("table {id} is created before table {}", self.count));
                }
                let (config, pool) = (self.config, self.pool.clone());
                self.alone(|tables| {
                    tables.push((id, name.to_string(), BTree::with_pool(config, pool)?));
                    Ok(())
                })?;
                self.count += 1;
                Ok(())
            }
        }
    }

    /// Runs `f` on the tables once every batch so far is applied (invariant 2).
    fn alone(&mut self, f: impl FnOnce(&mut Tables) -> Result<()>) -> std::result::Result<(), String> {
        self.hand_over().and_then(|()| self.wait_idle()).map_err(|e| self.stop(e))?;
        let tables = self.tables;
        let done = f(&mut tables.lock().unwrap_or_else(PoisonError::into_inner));
        done.map_err(|e| self.stop(e))
    }

    /// Sorts the batch gathered so far and hands it to the applier.
    fn hand_over(&mut self) -> Result<()> {
        if self.batch.writes.is_empty() {
            return Ok(());
        }
        self.batch.sort();
        // Two batches in flight at most: one being applied, one waiting.
        let next = match self.spare.take() {
            Some(batch) => batch,
            None if self.in_flight < 2 => Batch::with_capacity(self.batch_bytes),
            None => {
                let back = self.returned.recv().map_err(|_| stopped())?;
                self.in_flight -= 1;
                back
            }
        };
        let full = std::mem::replace(&mut self.batch, next);
        self.to_applier.as_ref().expect("open until the scan ends").send(full).map_err(|_| stopped())?;
        self.in_flight += 1;
        while let Ok(back) = self.returned.try_recv() {
            self.in_flight -= 1;
            self.spare = Some(back);
        }
        Ok(())
    }

    /// Waits until the applier has returned every batch handed over.
    fn wait_idle(&mut self) -> Result<()> {
        while self.in_flight > 0 {
            self.spare = Some(self.returned.recv().map_err(|_| stopped())?);
            self.in_flight -= 1;
        }
        Ok(())
    }

    /// Keeps an error of this side for [`replay`] to return, and gives the scan its message.
    fn stop(&mut self, e: Error) -> String {
        let why = e.to_string();
        self.failed.get_or_insert(e);
        why
    }
}

/// The error of a hand-over to an applier that has stopped (its own error is returned).
fn stopped() -> Error {
    Error::Io { what: STOPPED.into(), source: std::io::Error::other(STOPPED) }
}
