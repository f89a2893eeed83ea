//! Pool tests: allocation, eviction and fault-in under a pool of a few frames, checksums, I/O
//! errors, the free tail.

use super::*;
use crate::fs::{FaultFs, Fs, StdFs};
use std::sync::Arc;

const PAGE: usize = 4096;

fn pool_with(fs: Arc<dyn Fs>, frames: usize) -> (tempfile::TempDir, Arc<Pool>) {
    let dir = tempfile::tempdir().unwrap();
    let bytes = (frames * (PAGE + 64)) as u64;
    let config = PoolConfig { page_size: PAGE, cache_bytes: Some(bytes), row_cache_bytes: 0, huge_pages: false };
    let pool = Pool::with_file(config, fs, dir.path().join("pages")).unwrap();
    (dir, pool)
}

/// A pool of the fewest frames over a file system that injects faults when told to.
fn faulty_pool() -> (tempfile::TempDir, Arc<Pool>, Arc<crate::fs::Faults>) {
    let fs = FaultFs::new();
    let faults = fs.faults.clone();
    let (dir, pool) = pool_with(Arc::new(fs), MIN_FRAMES);
    (dir, pool, faults)
}

/// Writes `tag` into every word of a page.
fn fill(page: &Page, tag: u64) {
    for i in 0..PAGE / 8 {
        page.set_word(i, tag ^ i as u64);
    }
}

fn holds(page: &Page, tag: u64) -> bool {
    (0..PAGE / 8).all(|i| page.word(i) == tag ^ i as u64)
}

/// `n` new pages, page `t` filled with tag `t`.
fn filled(pool: &Pool, n: u64) -> Vec<u32> {
    (0..n)
        .map(|t| {
            let (pid, x) = pool.alloc(Kind::Leaf).unwrap();
            fill(x.page(), t);
            pid
        })
        .collect()
}

/// Reads page `pid` the way the tree does: optimistic, faulting in when evicted, and again
/// when the page changed under the read (the evictor may take it between the state word's
/// check and the frame's lookup). A live page is read within a bounded number of tries.
fn read(pool: &Pool, pid: u32) -> crate::Result<u64> {
    for _ in 0..10_000 {
        match pool.optimistic(pid) {
            Ok(r) => {
                let w = r.page().word(0);
                if r.validate().is_ok() {
                    return Ok(w);
                }
            }
            Err(Miss::Evicted) => pool.fault_in(pid)?,
            Err(Miss::Restart) => std::thread::yield_now(),
        }
    }
    panic!("page {pid} is live, yet 10,000 reads restarted");
}

#[test]
fn pages_survive_eviction_in_a_pool_much_smaller_than_the_data() {
    let (_dir, pool) = pool_with(Arc::new(StdFs), MIN_FRAMES);
    let mut pids = Vec::new();
    for tag in 0..1000u64 {
        let (pid, page) = pool.alloc(Kind::Leaf).unwrap();
        fill(page.page(), tag << 32);
        pids.push(pid);
    }
    let s = pool.stats();
    assert!(s.evictions >= 1000 - MIN_FRAMES as u64, "{s:?}");
    assert!(s.resident_pages <= MIN_FRAMES as u64 + s.over_capacity, "{s:?}");
    assert_eq!(s.over_capacity, 0, "{s:?}");
    for (tag, &pid) in pids.iter().enumerate() {
        assert_eq!(read(&pool, pid).unwrap(), (tag as u64) << 32);
        let x = pool.exclusive(pid).unwrap().unwrap();
        assert!(holds(x.page(), (tag as u64) << 32), "page {pid} came back whole");
    }
    assert!(pool.stats().reads >= 900, "{:?}", pool.stats());
    assert!(pool.stats().read_p50_us > 0.0);
}

#[test]
fn freed_pages_are_reused_and_the_free_tail_is_cut() {
    let (dir, pool) = pool_with(Arc::new(StdFs), MIN_FRAMES);
    let pids: Vec<u32> = (0..600).map(|_| pool.alloc(Kind::Leaf).unwrap().0).collect();
    pool.flush().unwrap();
    let len = std::fs::metadata(dir.path().join("pages")).unwrap().len();
    assert!(len >= 500 * PAGE as u64, "{len}");
    for &pid in &pids[10..] {
        let x = pool.exclusive(pid).unwrap().unwrap();
        x.free();
    }
    assert_eq!(pool.live_pages(), 10);
    assert!(pool.stats().truncations >= 1);
    let cut = std::fs::metadata(dir.path().join("pages")).unwrap().len();
    assert!(cut <= 300 * PAGE as u64, "the free tail is cut: {cut}");
    let (pid, _) = pool.alloc(Kind::Leaf).unwrap();
    assert_eq!(pid, 10, "the lowest free id is reused");
}

#[test]
fn a_damaged_block_is_an_error_naming_the_file_offset_and_page() {
    let (dir, pool) = pool_with(Arc::new(StdFs), MIN_FRAMES);
    let pids = filled(&pool, 200);
    // Page 0 was evicted long ago; flip a byte of its block.
    assert_eq!(pool.optimistic(pids[0]).err(), Some(Miss::Evicted));
    let path = dir.path().join("pages");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    match pool.fault_in(pids[0]) {
        Err(crate::Error::Corruption { file, offset, reason }) => {
            assert_eq!(file, "pages");
            assert_eq!(offset, 0);
            assert!(reason.contains("page 0") && reason.contains("checksum"), "{reason}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    // Still evicted, and still an error, never wrong data.
    assert!(pool.exclusive(pids[0]).is_err());
    assert_eq!(read(&pool, pids[1]).unwrap(), 1);
}

#[test]
fn an_io_error_on_a_page_read_is_reported_and_the_page_stays_readable_after() {
    let (_dir, pool, faults) = faulty_pool();
    let pids = filled(&pool, 200);
    faults.fail_reads.store(true, std::sync::atomic::Ordering::Relaxed);
    match pool.fault_in(pids[0]) {
        Err(crate::Error::Io { what, .. }) => assert!(what.contains("reading page 0"), "{what}"),
        other => panic!("expected an I/O error, got {other:?}"),
    }
    faults.fail_reads.store(false, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(read(&pool, pids[0]).unwrap(), 0);
}

#[test]
fn a_write_error_fails_the_eviction_that_needed_it_without_losing_the_page() {
    let (_dir, pool, faults) = faulty_pool();
    let mut pids = Vec::new();
    faults.fail_writes.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut failed = false;
    for t in 0..200u64 {
        match pool.alloc(Kind::Leaf) {
            Ok((pid, x)) => {
                fill(x.page(), t);
                pids.push((pid, t));
            }
            Err(crate::Error::Io { .. }) => {
                failed = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(failed, "allocation beyond the pool needs a write-back, which fails");
    faults.fail_writes.store(false, std::sync::atomic::Ordering::Relaxed);
    for _ in 0..200 {
        let _ = pool.alloc(Kind::Leaf).unwrap();
    }
    for (pid, t) in pids {
        assert_eq!(read(&pool, pid).unwrap(), t);
    }
}

#[test]
fn readers_writers_and_the_evictor_agree_on_every_page() {
    let (_dir, pool) = pool_with(Arc::new(StdFs), MIN_FRAMES);
    let pids: Vec<u32> = (0..256u64)
        .map(|t| {
            let (pid, x) = pool.alloc(Kind::Leaf).unwrap();
            fill(x.page(), t << 32);
            pid
        })
        .collect();
    let pids = Arc::new(pids);
    let threads: Vec<_> = (0..4)
        .map(|k| {
            let (pool, pids) = (pool.clone(), pids.clone());
            std::thread::spawn(move || {
                let mut x = k as u64 * 7919 + 1;
                for round in 0..3000u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let i = (x % pids.len() as u64) as usize;
                    let pid = pids[i];
                    if k % 2 == 0 {
                        // Writer: a new tag, whole page, under the exclusive latch.
                        let g = pool.exclusive(pid).unwrap().unwrap();
                        let tag = g.page().word(0) & !0xffff_ffff | (round + 1);
                        fill(g.page(), tag);
                    } else {
                        // Reader: an optimistic read that validates must see one whole image.
                        loop {
                            match pool.optimistic(pid) {
                                Ok(r) => {
                                    let tag = r.page().word(0);
                                    let whole = holds(r.page(), tag);
                                    if r.validate().is_ok() {
                                        assert!(whole, "a validated read saw a torn page {pid}");
                                        assert_eq!(tag >> 32, i as u64);
                                        break;
                                    }
                                }
                                Err(Miss::Evicted) => pool.fault_in(pid).unwrap(),
                                Err(Miss::Restart) => {}
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(pool.stats().evictions > 0);
}

#[test]
fn a_memory_pool_never_evicts() {
    let pool = Pool::memory(PAGE, false).unwrap();
    for _ in 0..1000 {
        let _ = pool.alloc(Kind::Leaf).unwrap();
    }
    let s = pool.stats();
    assert_eq!((s.evictions, s.capacity_pages, s.resident_pages, s.live_pages), (0, 0, 1000, 1000));
}

/// A writer that copies a page the checkpoint must write and frees it between the checkpoint's
/// look at the copies and its load of the page's state word leaves the copy for the checkpoint
/// to take: the checkpoint finds the page FREE, and must look at the copies again rather than
/// fail with "freed during a checkpoint before its image was taken" (seen once in the
/// concurrent `buffer_model` test).
#[test]
fn a_page_copied_and_freed_while_the_checkpoint_takes_it_is_taken_from_the_copy() {
    let (_dir, pool) = pool_with(Arc::new(StdFs), 64);
    let pids = filled(&pool, 3);
    let victim = pids[1];
    let (capture, ()) = pool.begin_capture(|| ()).unwrap();
    assert!(capture.pages().contains(&(victim, Member::Changed)));
    let writer = pool.clone();
    capture::TAKE_WINDOW.with(|w| {
        *w.borrow_mut() = Some(Box::new(move |pid| {
            assert_eq!(pid, victim);
            let _gate = writer.enter_write();
            // The first exclusive latch after the instant copies the image; then a new image,
            // and the page is freed.
            let x = writer.exclusive(pid).unwrap().expect("live");
            fill(x.page(), 99);
            x.free();
        }))
    });
    let mut buf = Vec::new();
    let taken = capture.take(victim, &mut buf);
    assert!(capture::TAKE_WINDOW.with(|w| w.borrow().is_none()), "the window was reached");
    assert!(matches!(taken, Ok(Taken::Copied { .. })), "{taken:?}");
    let image = Page::boxed(PAGE);
    image.write(0, &buf);
    assert!(holds(&image, 1), "the image at the instant");
}
