//! `Pool`: page ids → state words and frames; allocation, freeing, fixing and faulting in.
//!
//! The page table is a [`Segmented`] array of 16-byte entries (state word, frame address)
//! indexed by page id: a few KiB for a small database, 16 bytes per page for a large one (1 MiB
//! for 1 GiB of 16 KiB pages), dense enough to stay in the CPU caches. Page id `p` owns two
//! blocks of the page file (`file.rs`). Cold per-page facts (slots, checksums, kind,
//! generations: `meta.rs`) live in a second array that only I/O and checkpoints touch.

use super::capture::CaptureState;
use super::file::PageFile;
use super::frames::{Arena, Frame};
use super::guard::{ExclusivePage, PageRef, SharedPage};
use super::meta::Meta;
use super::page::Page;
use super::rows::Rows;
use super::state::{self, Absent, StateWord, DIRTY, EVICTED, LOADING};
use super::stats::{BufferStats, Counters};
use crate::fs::Fs;
use crate::sync::counters::{add, Counter};
use crate::sync::segmented::{Segmented, Zeroable};
use crate::sync::{LatchClass, Restart};
use crate::{Error, Result};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{
    fence, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Arc, LazyLock, Mutex as StdMutex};

/// Page ids are 32 bits; this one is never handed out (it marks "no page").
pub(crate) const NO_PAGE: u32 = u32::MAX;

/// The fewest frames a bounded pool has: enough for the pages a few concurrent tree
/// operations latch at once (each at most a parent, a node, its sibling, a new sibling and a
/// new root); a pool asked to be smaller gets this many.
pub const MIN_FRAMES: usize = 16;
/// How long a thread short of frames keeps trying while a checkpoint captures, before it goes
/// over the bound (see `take_frame`).
const CAPTURE_WAIT: std::time::Duration = std::time::Duration::from_millis(10);
/// The pause between its rounds.
const CAPTURE_PAUSE: std::time::Duration = std::time::Duration::from_micros(100);

/// The latch class of every page (spin policy and counters).
pub(crate) static PAGE_CLASS: LazyLock<LatchClass> =
    LazyLock::new(|| LatchClass::register("buffer.page").unwrap_or(LatchClass::DEFAULT));

/// What a page holds; the clock keeps inner nodes longer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Leaf = 0,
    Inner = 1,
    Overflow = 2,
}

impl Kind {
    pub(crate) fn from_bits(bits: u64) -> Kind {
        match bits & 0xff {
            1 => Kind::Inner,
            2 => Kind::Overflow,
            _ => Kind::Leaf,
        }
    }
}

/// One page-table entry.
#[repr(C, align(16))]
pub(crate) struct Entry {
    pub word: AtomicU64,
    /// The frame's block while resident (set under LOCKED or LOADING, before the version bump
    /// that publishes it).
    pub frame: AtomicPtr<u8>,
}

// SAFETY: two atomics, for which zero is valid (state FREE, no frame).
unsafe impl Zeroable for Entry {}

/// Page ids in use and free.
struct Ids {
    /// Ids below this have been handed out.
    next: u32,
    /// Freed ids, lowest first (reuse keeps the file dense).
    free: BTreeSet<u32>,
}

/// Frames not holding a page, and the arena new ones come from.
struct FrameList {
    arena: Arena,
    free: Vec<NonNull<u8>>,
    /// Frames past the capacity emptied for good (the pool gave the row cache its share, or a
    /// frame was taken beyond the capacity): their memory is given back once all the frames
    /// past the capacity are here.
    retired: Vec<NonNull<u8>>,
    /// Retired frames whose memory was given back: taken again, before new arena memory, when
    /// a thread must go over the capacity.
    released: Vec<NonNull<u8>>,
}

// SAFETY: the pointers are frame blocks owned by the arena, used under the pool's mutex.
unsafe impl Send for FrameList {}

/// Checks that `page_size` is one a pool can hold: a power of two from 4 KiB to 64 KiB (the
/// tree's configuration is checked with it too).
pub(crate) fn check_page_size(page_size: usize) -> Result<()> {
    if !page_size.is_power_of_two() || !(4096..=65536).contains(&page_size) {
        return Err(Error::InvalidArgument(format!(
            "page size must be a power of two from 4096 to 65536 bytes, got {page_size}"
        )));
    }
    Ok(())
}

/// How a pool is set up.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Page size in bytes (a power of two, 4 KiB to 64 KiB).
    pub page_size: usize,
    /// Bytes of memory for the pool: frames, and the row cache's share; `None`: unbounded
    /// (memory only, nothing evicted).
    pub cache_bytes: Option<u64>,
    /// Bytes of `cache_bytes` given to the row cache (`rows.rs`: values of single keys whose
    /// leaves were evicted) once the frames have filled the whole cache and the pool must evict;
    /// until then the frames may use all of `cache_bytes`. Ignored by unbounded pools.
    pub row_cache_bytes: u64,
    /// Advise frame memory for transparent huge pages.
    pub huge_pages: bool,
}

/// A buffer pool: pages of one size, in frames while resident, in a page file otherwise.
pub struct Pool {
    page_size: usize,
    class: LatchClass,
    pub(crate) table: Segmented<Entry>,
    pub(crate) meta: Segmented<Meta>,
    /// Per page, its image's generation, for the row cache: raised when an exclusive holder
    /// takes the page while it is clean (not DIRTY), so a page's contents never change while
    /// its generation stays what it was at a moment the page was clean. Changed only under
    /// LOCKED, so a reader that validates the state word read the generation of the image it
    /// read. Never reset, also not when an id is reused (freeing takes the page exclusively).
    /// Kept only with a row cache (writers of a pool without one skip it).
    images: Segmented<AtomicU64>,
    ids: StdMutex<Ids>,
    frames: StdMutex<FrameList>,
    /// Frame index → block, for the clock; `frame_count` entries are set.
    pub(crate) registry: Segmented<AtomicPtr<u8>>,
    pub(crate) frame_count: AtomicU32,
    /// The page file's length in pages: raised by each write past it (no lock on the
    /// write-back path), lowered only under the id lock when the free tail is cut.
    file_pages: AtomicU32,
    /// Pages below this may be in the durable checkpoint (the file is never cut below it).
    durable_extent: AtomicU32,
    /// Frames on the free list.
    pub(crate) free_frames: AtomicUsize,
    /// Most frames (`usize::MAX`: unbounded): all of the cache at first, then `shrunk_capacity`
    /// once the pool gave the row cache its share.
    capacity: AtomicUsize,
    /// The capacity after the row cache takes its share (equal to the first one without a row
    /// cache).
    shrunk_capacity: usize,
    /// The row cache (`rows.rs`).
    pub(crate) rows: Rows,
    /// The clock hand (a frame index, taken modulo the frame count).
    pub(crate) hand: AtomicU64,
    pub(crate) file: Option<PageFile>,
    pub(crate) counters: Counters,
    pub(crate) evictor: super::evict::Evictor,
    pub(crate) capture: CaptureState,
    /// Says whether a page image holds version-chain ids (`set_image_probe`).
    image_probe: std::sync::OnceLock<fn(&Page) -> bool>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("page_size", &self.page_size).field("capacity", &self.capacity()).finish()
    }
}

impl Pool {
    /// A pool that never evicts (no file): every page stays in memory. Fails with
    /// [`Error::InvalidArgument`] for a page size outside [`PoolConfig::page_size`]'s range.
    pub fn memory(page_size: usize, huge_pages: bool) -> Result<Arc<Pool>> {
        check_page_size(page_size)?;
        Ok(Pool::build(PoolConfig { page_size, cache_bytes: None, row_cache_bytes: 0, huge_pages }, None))
    }

    /// A pool of at most `config.cache_bytes` of frames over a new, empty page file created at
    /// `path` (replacing any file there).
    /// Fails with [`Error::InvalidArgument`] for a page size outside [`PoolConfig::page_size`]'s
    /// range (before the file is touched).
    pub fn with_file(config: PoolConfig, fs: Arc<dyn Fs>, path: PathBuf) -> Result<Arc<Pool>> {
        check_page_size(config.page_size)?;
        let file = PageFile::create(fs, path, config.page_size)?;
        let pool = Pool::build(config, Some(file));
        super::evict::Evictor::start(&pool);
        Ok(pool)
    }

    /// A pool over the existing page file at `path` holding a checkpoint's pages, laid out in
    /// chunks of `chunk_pages` pages (`file.rs`): `pages` gives each page's id, kind, slot and
    /// crc32c. Every page starts on disk and comes in on demand. `read_only`: nothing is ever
    /// written (`tern check`); dirty pages then stay in memory.
    pub(crate) fn open_file(
        config: PoolConfig,
        fs: Arc<dyn Fs>,
        path: PathBuf,
        read_only: bool,
        chunk_pages: u32,
        pages: &[(u32, u8, u8, u32)],
    ) -> Result<Arc<Pool>> {
        let file = PageFile::open(fs, path, config.page_size, chunk_pages, read_only)?;
        let pool = Pool::build(config, Some(file));
        // `pages` is sorted by id (the map's order, checked when it was read): the gaps
        // between them are the free ids.
        let mut next = 0;
        let mut free = BTreeSet::new();
        for &(pid, kind, slot, crc) in pages {
            if pid == NO_PAGE || pid < next {
                return Err(Error::InvalidArgument(format!("page {pid} is out of order or out of range")));
            }
            free.extend(next..pid);
            pool.table.ensure(pid).word.store(state::with(0, EVICTED, 0), Relaxed);
            pool.meta.ensure(pid).restore(kind, slot, crc);
            next = pid + 1;
        }
        {
            let mut ids = pool.ids.lock().unwrap_or_else(|p| p.into_inner());
            ids.next = next;
            ids.free = free;
        }
        pool.counters.live.store(pages.len(), Relaxed);
        pool.file_pages.store(next, Relaxed);
        pool.durable_extent.store(next, Relaxed);
        super::evict::Evictor::start(&pool);
        Ok(pool)
    }

    fn build(config: PoolConfig, file: Option<PageFile>) -> Arc<Pool> {
        let frame_bytes = super::frames::frame_bytes(config.page_size) as u64;
        let frames = |bytes: u64| usize::try_from(bytes / frame_bytes).unwrap_or(usize::MAX).max(MIN_FRAMES);
        let (capacity, shrunk_capacity, row_bytes) = match (config.cache_bytes, &file) {
            (Some(bytes), Some(_)) => {
                let rows = config.row_cache_bytes.min(bytes);
                let shrunk = frames(bytes - rows);
                (frames(bytes).max(shrunk), shrunk, rows)
            }
            _ => (usize::MAX, usize::MAX, 0),
        };
        let pool = Arc::new(Pool {
            page_size: config.page_size,
            class: *PAGE_CLASS,
            table: Segmented::new(),
            meta: Segmented::new(),
            images: Segmented::new(),
            ids: StdMutex::new(Ids { next: 0, free: BTreeSet::new() }),
            file_pages: AtomicU32::new(0),
            durable_extent: AtomicU32::new(0),
            frames: StdMutex::new(FrameList {
                arena: Arena::new(config.page_size, config.huge_pages),
                free: Vec::new(),
                retired: Vec::new(),
                released: Vec::new(),
            }),
            registry: Segmented::new(),
            frame_count: AtomicU32::new(0),
            free_frames: AtomicUsize::new(0),
            capacity: AtomicUsize::new(capacity),
            shrunk_capacity,
            rows: Rows::closed(row_bytes),
            hand: AtomicU64::new(0),
            file,
            counters: Counters::default(),
            evictor: super::evict::Evictor::default(),
            capture: CaptureState::default(),
            image_probe: std::sync::OnceLock::new(),
        });
        if capacity == shrunk_capacity {
            // The fewest frames leave nothing to give: the row cache is beside them from the
            // start (or there is none).
            pool.rows.open();
        }
        pool
    }

    /// The page size in bytes.
    #[inline]
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Pages per chunk of the page file (`file.rs`); 1 without a file.
    pub(crate) fn chunk_pages(&self) -> u32 {
        self.file.as_ref().map_or(1, PageFile::chunk_pages)
    }

    /// Most frames now (`usize::MAX`: unbounded).
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity.load(Relaxed)
    }

    /// Whether pages can leave memory (the pool has a file and a bound).
    pub fn evicts(&self) -> bool {
        self.capacity() != usize::MAX
    }

    #[inline]
    pub(crate) fn state_word<'a>(&self, entry: &'a Entry) -> StateWord<'a> {
        self.state_word_of(&entry.word)
    }

    #[inline]
    pub(crate) fn state_word_of<'a>(&self, word: &'a AtomicU64) -> StateWord<'a> {
        StateWord { word, class: self.class }
    }

    #[inline]
    pub(crate) fn frame_at(&self, block: NonNull<u8>) -> &Frame {
        // SAFETY: every block in the table or the registry came from this pool's arena, whose
        // mappings live as long as the pool, and has this page size.
        unsafe { Frame::at(block, self.page_size) }
    }

    /// The frame in `entry`, if any.
    #[inline]
    pub(crate) fn frame_of(&self, entry: &Entry) -> Option<&Frame> {
        NonNull::new(entry.frame.load(Relaxed)).map(|b| self.frame_at(b))
    }

    // ---- fixing ----

    /// Reads page `pid` optimistically. `Err(Miss::Evicted)`: it is on disk (validate how `pid`
    /// was found, then [`fault_in`](Self::fault_in)); `Err(Miss::Restart)`: no such page (a
    /// stale id) or it changed under the caller.
    #[inline]
    pub(crate) fn optimistic(&self, pid: u32) -> std::result::Result<PageRef<'_>, Miss> {
        self.optimistic_as(pid, false)
    }

    /// [`optimistic`](Self::optimistic); with `keep_mark`, a page the clock marked stays marked
    /// (the caller unmarks it, [`PageRef::unmark`], unless the read's key went to the row cache
    /// instead).
    #[inline]
    pub(crate) fn optimistic_as(&self, pid: u32, keep_mark: bool) -> std::result::Result<PageRef<'_>, Miss> {
        let entry = self.table.get(pid).ok_or(Miss::Restart)?;
        let word = self.state_word(entry);
        let seen = if keep_mark { word.optimistic_keeping_mark() } else { word.optimistic() };
        match seen {
            Ok(seen) => {
                let frame = self.frame_of(entry).ok_or(Miss::Restart)?;
                // One fix per optimistic visit, however often its reads are validated.
                add(self.class, Counter::Optimistic, 1);
                Ok(PageRef::new(self, pid, &frame.page, &entry.word, seen))
            }
            Err(Absent::Evicted) => Err(Miss::Evicted),
            Err(Absent::Free) => Err(Miss::Restart),
        }
    }

    /// The generation of page `pid`'s image (see `images`), if the page is on disk only
    /// (`None`: resident, loading, changing, or no such page). Read between two loads of the
    /// state word that agree, so it is the generation of the image in the file.
    #[inline]
    pub(crate) fn evicted_image(&self, pid: u32) -> Option<u64> {
        let entry = self.table.get(pid)?;
        let before = entry.word.load(Acquire);
        if state::state(before) != EVICTED {
            return None;
        }
        let image = self.image(pid);
        fence(Acquire);
        (entry.word.load(Relaxed) == before).then_some(image)
    }

    /// The generation of page `pid`'s image; trusted only once a read of the page (or of its
    /// state word) that began before this load is validated.
    #[inline]
    pub(crate) fn image(&self, pid: u32) -> u64 {
        self.images.get(pid).map_or(0, |g| g.load(Relaxed))
    }

    /// Called by a new exclusive holder of clean page `pid`: its image is about to change.
    #[inline]
    pub(crate) fn next_image(&self, pid: u32) {
        if !self.has_rows() {
            return; // only the row cache reads generations
        }
        let g = self.images.ensure(pid);
        // Only the exclusive holder writes it: no read-modify-write needed. The release of the
        // latch (a version bump) publishes it.
        g.store(g.load(Relaxed) + 1, Relaxed);
    }

    /// Whether reads consult and feed the row cache.
    #[inline]
    pub(crate) fn has_rows(&self) -> bool {
        self.rows.enabled()
    }

    /// Appends `key`'s value to `out` if the row cache holds it for page `pid` whose image in
    /// the file has generation `image` (`rows.rs`).
    pub(crate) fn row(&self, pid: u32, image: u64, key: &[u8], out: &mut Vec<u8>) -> bool {
        self.rows.get(pid, image, key, out)
    }

    /// Keeps `key`'s plain `value`, read from page `pid` while its state word was `seen` and
    /// its image's generation `image` (both validated), in the row cache, if the page was
    /// clean (its image is the file's) and the row cache is open (the pool has evicted: one
    /// that still has room for the data needs no row cache).
    pub(crate) fn keep_row(&self, pid: u32, seen: u64, image: u64, key: &[u8], value: &[u8]) {
        if seen & DIRTY == 0 {
            self.rows.insert(pid, image, key, value);
        }
    }

    /// Keeps `key`'s plain `value`, read from page `pid` while the clock had it marked for
    /// eviction (state word `seen`, image generation `image`, both validated), in the row
    /// cache instead of giving the page its second chance: true if the row cache holds it now
    /// (the page keeps its mark); false if it did not take it (the caller unmarks the page).
    /// Only clean pages qualify, once the row cache is open, as for [`keep_row`](Self::keep_row).
    pub(crate) fn promote_row(&self, pid: u32, seen: u64, image: u64, key: &[u8], value: &[u8]) -> bool {
        seen & DIRTY == 0 && self.rows.promote(pid, image, key, value)
    }

    /// Page `pid` in shared mode, faulted in if needed; `None` if no page has that id (a
    /// stale id: the caller restarts).
    pub(crate) fn shared(&self, pid: u32) -> Result<Option<SharedPage<'_>>> {
        let latched = self.latch(pid, |w| w.lock_shared())?;
        Ok(latched.map(|(entry, frame)| SharedPage::new(&frame.page, &entry.word, self.class)))
    }

    /// Page `pid` in exclusive mode, faulted in if needed; `None` if no page has that id.
    pub(crate) fn exclusive(&self, pid: u32) -> Result<Option<ExclusivePage<'_>>> {
        let latched = self.latch(pid, |w| w.lock_exclusive())?;
        Ok(latched.map(|(entry, frame)| {
            self.note_exclusive(pid, &frame.page);
            ExclusivePage::new(self, pid, &frame.page, &entry.word)
        }))
    }

    /// Latches page `pid` with `lock`, faulting it in while it is on disk; its entry and
    /// frame, or `None` if no page has the id.
    fn latch(&self, pid: u32, lock: fn(&StateWord<'_>) -> Result<(), Absent>) -> Result<Option<(&Entry, &Frame)>> {
        let Some(entry) = self.table.get(pid) else { return Ok(None) };
        loop {
            match lock(&self.state_word(entry)) {
                Ok(()) => {
                    // A fix that found its page in memory or brought it in (the miss is counted
                    // where it is read).
                    add(self.class, Counter::Acquisitions, 1);
                    return Ok(Some((entry, self.frame_of(entry).expect("a resident page has a frame"))));
                }
                Err(Absent::Evicted) => self.fault_in(pid)?,
                Err(Absent::Free) => return Ok(None),
            }
        }
    }

    /// Brings page `pid` into memory if it is on disk only (waits if another thread is loading
    /// it; does nothing if no page has the id). A checksum mismatch or an I/O error leaves it
    /// on disk and is returned.
    pub(crate) fn fault_in(&self, pid: u32) -> Result<()> {
        let Some(entry) = self.table.get(pid) else { return Ok(()) };
        let word = self.state_word(entry);
        loop {
            match state::state(word.load()) {
                EVICTED => {
                    if word.try_begin_load() {
                        return self.load(pid, entry, word);
                    }
                }
                LOADING => crate::sync::admit::lend_while(|| word.wait_loaded()),
                _ => return Ok(()),
            }
        }
    }

    /// Reads page `pid`'s block into a frame (the caller holds it LOADING).
    fn load(&self, pid: u32, entry: &Entry, word: StateWord<'_>) -> Result<()> {
        let frame = match self.take_frame() {
            Ok(frame) => frame,
            Err(e) => {
                word.release(EVICTED, false);
                return Err(e);
            }
        };
        let facts = self.meta.get(pid).map(|m| m.facts()).unwrap_or_default();
        let file = self.file.as_ref().expect("only pools with a file evict");
        let started = std::time::Instant::now();
        let crc = facts.latest.map_or(0, |s| facts.crcs[s as usize]);
        // A write transaction blocked on the disk lends its admission ticket meanwhile.
        let read = crate::sync::admit::lend_while(|| file.read_page(pid, facts.latest, crc, &frame.page));
        self.counters.record_read(started.elapsed());
        if let Err(e) = read {
            self.counters.io_errors.fetch_add(1, Relaxed);
            self.put_frame(frame);
            word.release(EVICTED, false);
            return Err(e);
        }
        frame.owner.store(u64::from(pid) + 1, Relaxed);
        frame.kind.store(u64::from(facts.kind), Relaxed);
        entry.frame.store(frame as *const Frame as *mut u8, Relaxed);
        word.release(state::UNLOCKED, false);
        Ok(())
    }

    /// Hints that page `pid` will be read soon: its first lines if resident, a read-ahead of its
    /// block if not.
    pub(crate) fn prefetch(&self, pid: u32) {
        let Some(entry) = self.table.get(pid) else { return };
        let w = entry.word.load(Relaxed);
        if state::readable(w) {
            if let Some(frame) = self.frame_of(entry) {
                frame.page.prefetch(0);
                frame.page.prefetch(64);
            }
        } else if state::state(w) == EVICTED {
            if let (Some(file), Some(slot)) = (&self.file, self.meta.get(pid).and_then(|m| m.facts().latest)) {
                file.will_need(pid, slot);
            }
        }
    }

    // ---- allocation ----

    /// A new, zeroed page of `kind`, held exclusively (it becomes visible when the caller
    /// links its id somewhere).
    pub(crate) fn alloc(&self, kind: Kind) -> Result<(u32, ExclusivePage<'_>)> {
        let frame = self.take_frame()?;
        frame.zero();
        let pid = {
            let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
            match ids.free.pop_first() {
                Some(pid) => pid,
                None => {
                    let pid = ids.next;
                    if pid == NO_PAGE {
                        drop(ids);
                        self.put_frame(frame);
                        return Err(Error::InvalidArgument(
                            "the database has 2^32 - 1 pages, the most page ids hold".into(),
                        ));
                    }
                    ids.next += 1;
                    pid
                }
            }
        };
        let entry = self.table.ensure(pid);
        self.meta.ensure(pid).allocate(kind as u8, self.capture.gen.load(std::sync::atomic::Ordering::Acquire));
        let word = self.state_word(entry);
        word.lock_new();
        frame.owner.store(u64::from(pid) + 1, Relaxed);
        frame.kind.store(kind as u64, Relaxed);
        entry.frame.store(frame as *const Frame as *mut u8, Relaxed);
        self.counters.live.fetch_add(1, Relaxed);
        Ok((pid, ExclusivePage::new(self, pid, &frame.page, &entry.word)))
    }

    /// Called by an exclusive guard whose page was freed, after the word went FREE: gives the
    /// frame and the id back.
    pub(crate) fn reclaim(&self, pid: u32, was_dirty: bool) {
        let entry = self.table.get(pid).expect("a freed page has an entry");
        if let Some(frame) = self.frame_of(entry) {
            entry.frame.store(std::ptr::null_mut(), Relaxed);
            self.put_frame(frame);
        }
        if was_dirty {
            self.counters.dirty.fetch_sub(1, Relaxed);
        }
        if let Some(meta) = self.meta.get(pid) {
            meta.free();
        }
        self.counters.live.fetch_sub(1, Relaxed);
        if self.capture.active.load(std::sync::atomic::Ordering::Acquire) != 0 {
            // A checkpoint being captured may hold this page: keep its id (and blocks) out of
            // reuse until it ends.
            let mut deferred = self.capture.deferred.lock().unwrap_or_else(|p| p.into_inner());
            if self.capture.active.load(std::sync::atomic::Ordering::Acquire) != 0 {
                deferred.push(pid);
                return;
            }
        }
        self.give_back_ids(vec![pid], None);
    }

    /// Puts freed ids back for reuse and trims free ids off the top; `extent`: a checkpoint
    /// just became durable, holding pages below it. Cuts the page file's free tail when a
    /// quarter of it, and at least 1 MiB, lies past both the last id in use and the durable
    /// checkpoint's pages (never during a capture: the checkpoint being written may hold them).
    pub(crate) fn give_back_ids(&self, freed: Vec<u32>, extent: Option<u32>) {
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        ids.free.extend(freed);
        while ids.next > 0 && ids.free.last() == Some(&(ids.next - 1)) {
            ids.free.pop_last();
            ids.next -= 1;
        }
        if let Some(extent) = extent {
            self.durable_extent.store(extent, Relaxed);
        }
        let Some(file) = &self.file else { return };
        if file.refuses_writes() || self.capture.active.load(std::sync::atomic::Ordering::Acquire) != 0 {
            return;
        }
        let keep = ids.next.max(self.durable_extent.load(Relaxed));
        let file_pages = self.file_pages.load(Relaxed);
        let spare = file_pages.saturating_sub(keep) as usize * 2 * self.page_size;
        let worth = spare >= 1 << 20 && spare >= file_pages as usize * 2 * self.page_size / 4;
        if worth && file.set_pages(keep).is_ok() {
            self.file_pages.store(keep, Relaxed);
            self.counters.truncations.fetch_add(1, Relaxed);
        }
    }

    /// The ids handed out and the free ones among them (a capture's instant).
    pub(crate) fn ids_at_instant(&self) -> (u32, BTreeSet<u32>) {
        let ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        (ids.next, ids.free.clone())
    }

    /// Whether a sync of the page file failed (it takes no more writes).
    pub(crate) fn writes_stopped(&self) -> bool {
        self.file.as_ref().is_some_and(|f| f.stopped.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// The page file takes no more writes (a sync failed; see `checkpoint/pages.rs`).
    pub(crate) fn stop_writes(&self) {
        if let Some(f) = &self.file {
            f.stop();
        }
    }

    /// The database using this pool is closed (its directory may be opened again at once):
    /// no page is written to the page file any more (dirty pages stay in memory), and the
    /// background evictor stops. The pool itself may live on (a table handle holds it).
    pub(crate) fn close(&self) {
        self.stop_writes();
        self.evictor.stop();
    }

    /// Page ids below this have been handed out.
    pub(crate) fn next_id(&self) -> u32 {
        self.ids.lock().unwrap_or_else(|p| p.into_inner()).next
    }

    /// Notes a write of page `pid`'s blocks (the file reaches at least past them).
    pub(crate) fn note_file_extent(&self, pid: u32) {
        self.file_pages.fetch_max(pid + 1, Relaxed);
    }

    /// Notes that page `pid`'s slot `slot` now holds its latest image, with checksum `crc`;
    /// `chained`: it may hold version-chain ids (`meta.rs` invariant 4).
    pub(crate) fn note_written(&self, pid: u32, slot: u8, crc: u32, chained: bool) {
        if let Some(meta) = self.meta.get(pid) {
            meta.note_written(slot, crc, true, chained);
        }
        self.note_file_extent(pid);
    }

    /// Reads every block of the durable checkpoint and checks it against its recorded checksum
    /// (`tern check`); returns how many.
    pub(crate) fn verify_durable(&self) -> Result<u64> {
        let Some(file) = &self.file else { return Ok(0) };
        let mut buf = Vec::with_capacity(self.page_size());
        let mut checked = 0;
        for pid in 0..self.next_id() {
            let Some(meta) = self.meta.get(pid) else { continue };
            let f = meta.facts();
            if let Some(slot) = f.durable {
                file.read_block(pid, Some(slot), f.crcs[slot as usize], &mut buf)?;
                checked += 1;
            }
        }
        Ok(checked)
    }

    /// Installs the function that tells whether a page image holds version-chain ids (the
    /// tree's leaves, `btree::stored`; the pool cannot read nodes). Write-backs record its
    /// answer, and a checkpoint then reads back from the disk only the evicted pages whose image
    /// holds some (`capture.rs`). The first installed stays; without one every image counts as
    /// holding some.
    pub(crate) fn set_image_probe(&self, probe: fn(&Page) -> bool) {
        let _ = self.image_probe.set(probe);
    }

    /// Whether `page`'s image may hold version-chain ids (true without a probe). `page` may be
    /// changing: the caller validates the page's version after, as for any optimistic read.
    pub(crate) fn may_hold_chains(&self, page: &Page) -> bool {
        self.image_probe.get().is_none_or(|probe| probe(page))
    }

    /// Pages allocated and not freed.
    pub fn live_pages(&self) -> usize {
        self.counters.live.load(Relaxed)
    }

    // ---- frames ----

    /// A free frame: from the free list, new while under capacity, else by evicting (this
    /// thread evicts one small batch if the background evictor has not kept up).
    pub(crate) fn take_frame(&self) -> Result<&Frame> {
        let mut rounds = 0;
        let mut waited_since = None;
        loop {
            // Past two fruitless rounds every resident page is latched or being written: go
            // over the bound rather than wait for a latch this thread may hold. While a
            // checkpoint captures, the pages it must write stay resident until it writes them
            // (then they can go): keep trying for up to `CAPTURE_WAIT` from the first such
            // round, so that writers follow the checkpoint's progress instead of growing the
            // pool (bounded: the checkpointer may need a latch this thread holds).
            let waiting = rounds > 2
                && self.capture.active.load(Relaxed) != 0
                && waited_since.get_or_insert_with(std::time::Instant::now).elapsed() < CAPTURE_WAIT;
            {
                let mut frames = self.frames.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(block) = frames.free.pop() {
                    self.free_frames.fetch_sub(1, Relaxed);
                    drop(frames);
                    self.evictor.poke(self);
                    // Whatever this thread writes into the frame comes after the release of
                    // the page that had it (evicted or freed, then put on the list under the
                    // mutex); the fence makes a stale optimistic reader that sees those writes
                    // also see that page's new version, and fail.
                    fence(Release);
                    return Ok(self.frame_at(block));
                }
                let count = self.frame_count.load(Relaxed) as usize;
                let capacity = self.capacity();
                if count < capacity || rounds > 2 && !waiting {
                    if count >= capacity {
                        self.counters.overshoot.fetch_add(1, Relaxed);
                    }
                    let block = frames.released.pop().unwrap_or_else(|| frames.arena.take());
                    self.frame_at(block).index.store(count as u64, Relaxed);
                    self.registry.ensure(count as u32).store(block.as_ptr(), Relaxed);
                    self.frame_count.store(count as u32 + 1, std::sync::atomic::Ordering::Release);
                    return Ok(self.frame_at(block));
                }
            }
            self.evictor.poke(self);
            let freed = self.evict_batch(super::evict::SMALL_BATCH)?;
            rounds += 1;
            if freed == 0 && waiting {
                std::thread::sleep(CAPTURE_PAUSE);
            }
        }
    }

    /// Puts a frame no page uses on the free list (true), or retires it if it lies past the
    /// capacity (false: the pool is giving memory to its row cache, or the frame was taken
    /// beyond the capacity).
    pub(crate) fn put_frame(&self, frame: &Frame) -> bool {
        frame.owner.store(0, Relaxed);
        let block = NonNull::from(frame).cast::<u8>();
        let mut frames = self.frames.lock().unwrap_or_else(|p| p.into_inner());
        if frame.index.load(Relaxed) as usize >= self.capacity() {
            frames.retired.push(block);
            self.finish_shrink(&mut frames);
            false
        } else {
            frames.free.push(block);
            self.free_frames.fetch_add(1, Relaxed);
            true
        }
    }

    /// The most frames the pool keeps once the row cache has its share (now or later).
    pub(crate) fn frames_share(&self) -> usize {
        self.shrunk_capacity
    }

    /// Called by every eviction: the first time, the frames fill the cache, and from now on
    /// the row cache gets its share ([`give_rows_their_share`](Self::give_rows_their_share)).
    #[inline]
    pub(crate) fn note_evicting(&self) {
        if self.capacity() > self.shrunk_capacity {
            let mut frames = self.frames.lock().unwrap_or_else(|p| p.into_inner());
            if self.capacity() > self.shrunk_capacity {
                self.give_rows_their_share(&mut frames);
                drop(frames);
                self.evictor.shrink(self);
            }
        }
    }

    /// Lowers the capacity to `shrunk_capacity`, retiring the free frames past it; the
    /// evictor empties the others (`Evictor::shrink`), and the last one retired gives their
    /// memory back and opens the row cache ([`finish_shrink`](Self::finish_shrink)).
    fn give_rows_their_share(&self, frames: &mut FrameList) {
        let capacity = self.shrunk_capacity;
        self.capacity.store(capacity, Relaxed);
        let before = frames.free.len();
        let (keep, retire): (Vec<_>, Vec<_>) =
            frames.free.drain(..).partition(|&b| (self.frame_at(b).index.load(Relaxed) as usize) < capacity);
        frames.free = keep;
        frames.retired.extend(retire);
        self.free_frames.fetch_sub(before - frames.free.len(), Relaxed);
        self.finish_shrink(frames);
    }

    /// Once every frame past the capacity is retired (`retired` holds exactly those: frames
    /// are retired once, and those of earlier rounds moved on to `released`): the frame count
    /// drops to the capacity, the retired frames' memory goes back to the system, and the row
    /// cache opens (at once if no frame was past the capacity).
    fn finish_shrink(&self, frames: &mut FrameList) {
        let count = self.frame_count.load(Relaxed) as usize;
        let capacity = self.capacity();
        if count > capacity && frames.retired.len() < count - capacity {
            return;
        }
        if count > capacity {
            self.frame_count.store(capacity as u32, Release);
        }
        let block = frames.arena.block;
        let mut runs = std::mem::take(&mut frames.retired);
        runs.sort_unstable();
        // Contiguous frames form one run; a run's whole memory pages are given back.
        let mut start = 0;
        for i in 1..=runs.len() {
            if i == runs.len() || runs[i].as_ptr() != runs[i - 1].as_ptr().wrapping_add(block) {
                super::frames::release(runs[start], block * (i - start));
                start = i;
            }
        }
        frames.released.append(&mut runs);
        self.rows.open();
    }

    /// The pool's counters.
    pub fn stats(&self) -> BufferStats {
        let file_pages = u64::from(self.file_pages.load(Relaxed));
        let frames = self.frame_count.load(Relaxed) as u64;
        // Frames retired while the pool shrinks are still below the frame count.
        let retired = self.frames.lock().unwrap_or_else(|p| p.into_inner()).retired.len();
        let idle = (self.free_frames.load(Relaxed) + retired) as u64;
        self.counters.snapshot(
            self.page_size,
            if self.capacity() == usize::MAX { 0 } else { self.capacity() as u64 },
            frames.saturating_sub(idle),
            file_pages,
            self.rows.figures(),
        )
    }

    /// Marks page `pid`'s dirty count (called when an exclusive release made it dirty).
    pub(crate) fn note_dirtied(&self, before: u64) {
        if before & DIRTY == 0 {
            self.counters.dirty.fetch_add(1, Relaxed);
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.evictor.stop();
    }
}

/// Why an optimistic fix gave no page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Miss {
    /// The page is on disk: validate the id's source, fault it in, try again.
    Evicted,
    /// The id is stale or the page changed: restart the operation.
    Restart,
}

impl From<Restart> for Miss {
    fn from(_: Restart) -> Miss {
        Miss::Restart
    }
}
