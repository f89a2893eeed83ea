//! A scan through `TxnCursor` allocates nothing per entry: a counting global allocator counts
//! this thread's allocations while a cursor walks 20,000 entries each way, over plain values
//! and over version chains (entries whose newest version an open reader still needs).
//!
//! Reading a version chain pins the epoch, and a pin now and then collects garbage that any
//! thread retired (crossbeam-epoch), which can allocate a node for the global garbage queue on
//! the reading thread: work proportional to other threads' garbage, not to the entries read.
//! So the tests here run one at a time and start measuring with the epoch's garbage drained.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::{Mutex, MutexGuard};
use tern::{Db, Options};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; the counter is a thread-local
// `Cell` with a const initializer, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Held by each test for its whole run: no other test's garbage reaches the epoch meanwhile.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Collects the garbage retired so far (see the module doc), before a measurement starts.
fn drain_epoch() {
    for _ in 0..1024 {
        crossbeam_epoch::pin().flush();
    }
}

const ROWS: u32 = 20_000;

/// A database holding keys 0..ROWS (4 bytes, big-endian), each with 100 bytes of its low byte.
fn loaded() -> Db {
    let db = Db::open_temporary(Options::default()).unwrap();
    let mut t = db.begin().unwrap();
    for i in 0..ROWS {
        t.put(&i.to_be_bytes(), &[i as u8; 100]).unwrap();
    }
    t.commit().unwrap();
    db
}

#[test]
fn a_cursor_scan_allocates_nothing_per_entry() {
    let _alone = one_at_a_time();
    let db = loaded();
    // Every other entry gets a second version while a reader holds the first: chains stay.
    let old = db.begin_read().unwrap();
    let mut t = db.begin().unwrap();
    for i in (0..ROWS).step_by(2) {
        t.put(&i.to_be_bytes(), &[i as u8; 120]).unwrap();
    }
    t.commit().unwrap();

    for (name, txn) in [("newest", db.begin_read().unwrap()), ("old snapshot", old)] {
        let mut c = txn.cursor(..).unwrap();
        // The first move sizes the cursor's buffers.
        assert!(c.first().unwrap().is_some());
        drain_epoch();
        let before = allocations();
        let mut rows = 1;
        while let Some((k, v)) = c.next().unwrap() {
            let i = u32::from_be_bytes(k.try_into().unwrap());
            let len = if name == "newest" && i % 2 == 0 { 120 } else { 100 };
            assert!(v.len() == len && v.iter().all(|&b| b == i as u8), "{name}: entry {i}");
            rows += 1;
        }
        assert!(c.last().unwrap().is_some());
        rows += 1;
        while c.prev().unwrap().is_some() {
            rows += 1;
        }
        let n = allocations() - before;
        assert_eq!(rows, 2 * ROWS as usize, "{name}");
        // Buffers grow at most a few times (a longer value); nothing per entry.
        assert!(n <= 8, "{name}: {n} allocations for {rows} entries");
        println!("{name}: {n} allocations for {rows} entries");
    }
}

#[test]
fn short_scans_reuse_the_buffers_of_cursors_dropped_before() {
    // A cursor per scan, as a YCSB E client opens one: once a first cursor has grown its
    // buffers and was dropped, the next ones take them over (bounds, entry copies, anchor)
    // instead of allocating, growing and freeing each.
    let _alone = one_at_a_time();
    let db = loaded();
    let txn = db.begin_read().unwrap();
    let scan = |from: u32| {
        let mut c = txn.cursor(&from.to_be_bytes()[..]..).unwrap();
        let mut row = c.first().unwrap();
        let mut seen = 0u32;
        while let Some((k, v)) = row {
            assert_eq!(u32::from_be_bytes(k.try_into().unwrap()), from + seen);
            assert!(v.len() == 100 && v.iter().all(|&b| b == (from + seen) as u8));
            seen += 1;
            if seen == 10 {
                break;
            }
            row = c.next().unwrap();
        }
        assert_eq!(seen, 10);
    };
    scan(0);
    drain_epoch();
    let before = allocations();
    for s in 0..1000 {
        scan(s * 17 % (ROWS - 10));
    }
    let n = allocations() - before;
    println!("{n} allocations for 1000 scans of 10 rows, a cursor each");
    assert!(n <= 10, "{n} allocations for 1000 scans of 10 rows: the cursors' buffers were not reused");
}
