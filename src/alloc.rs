//! The process's memory: its allocator, a small pool of large `f32` buffers, and the memory the
//! process may use. The ground floor: imports nothing of the crate.
//!
//! **The allocator** ([`Allocator`]) is mimalloc for every block under 2 MB, and for blocks of
//! 2 MB or more a mapping of its own in 2 MB pages, freed blocks kept for the next ones. Why not
//! mimalloc (or the system's) alone: measured with release builds alternated on SmolLM2
//! (`docs/performance.md`, "The allocator"), mimalloc alone loads and writes faster than glibc
//! (many small blocks) but holds 20–30 MB more and is slower on the first keystroke after a whole
//! pass (its large blocks are returned and faulted in again); our large-block mapping alone keeps
//! glibc's slower small blocks. Both together measured as fast as the faster of the two on a
//! 512-token pass and a key at the end of 925 tokens, and faster than either at writing, for
//! 20 MB more peak RSS than ours alone on a `dump` (mimalloc's arenas). The large-block part is what an ordinary Linux box gains too: a model's large buffers (a
//! long run's attention, the recorded rows a keystroke copies, key/value caches) in huge pages from
//! their first byte — one page-table entry per 2 MB instead of 512 — under the usual
//! `transparent_hugepage=madvise` setting, which mimalloc does not ask for by default.
//!
//! **The pool** ([`take`], [`give`], [`reserve`]): the values of dropped attention data, kept for
//! the next forward pass and handed out as they are (every value is written again). A forward pass
//! at 512 tokens records 75 MB of probabilities, a keystroke at the end of a thousand tokens copies
//! blocks of recorded rows worth gigabytes; a new `Vec` of zeros that large is either fresh pages
//! (faulted in one at a time as they are written) or a block the allocator kept, zeroed first. The
//! allocator's kept blocks now spare the faults as well as the pool does (ten 512-token passes:
//! 7,928 and 8,028 minor faults with the pool, 9,314 and 7,598 without; 53-token keystrokes:
//! 6,235 / 6,289 against 6,503 / 6,342); what the pool still spares is writing the zeros the
//! caller overwrites, for about 8 MB more peak RSS.
//!
//! **The budget** ([`memory_budget`]) bounds the pool here and the models loaded.
//!
//! **What is kept between runs** ([`keep_for`], [`release_idle`]): in the app, once a run is shown,
//! the pool and the freed blocks are each cut to what the next run of the current text is likely to
//! need (the run's own size), so that after a long input a short one does not sit on the long
//! one's gigabytes; a run lifts the bound while it runs ([`unbound`]). Idle for a few seconds, the
//! app also hands mimalloc's free pages back ([`release_idle`]). Without a bound (the command line,
//! the tests) nothing changes.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

use mimalloc::MiMalloc as Small;
use std::sync::Mutex;

/// Smaller buffers are left to the allocator.
const MIN_BYTES: usize = 1 << 20;
/// Buffers kept at most.
const MAX_KEPT: usize = 8;
/// Bytes always allowed to be kept.
const FLOOR_BYTES: usize = 256 << 20;
/// Bytes kept at most: [`FLOOR_BYTES`], or an eighth of the memory available when that is more —
/// a thousand-token run of SmolLM2 records two 1 GB buffers, and the app's next run (a keystroke)
/// takes them again instead of faulting and zeroing 2 GB of fresh pages. Reads `/proc/meminfo`:
/// asked only past the floor (dropping a long run gives back a few hundred blocks).
fn max_bytes() -> usize {
    let available = memory_budget().map_or(0, |(bytes, _)| bytes / 8);
    usize::try_from(available).unwrap_or(usize::MAX).max(FLOOR_BYTES)
}

/// The memory a load may use: `ATTNVIZ_MAX_MEMORY_GB` when set (`true`), else what the system
/// says can be allocated without swapping (`MemAvailable` of `/proc/meminfo`), else no limit.
pub fn memory_budget() -> Option<(u64, bool)> {
    let set = std::env::var("ATTNVIZ_MAX_MEMORY_GB").ok().and_then(|v| v.trim().parse::<f64>().ok());
    if let Some(gb) = set.filter(|gb| gb.is_finite() && *gb >= 0.0) {
        return Some(((gb * f64::from(1u32 << 30)) as u64, true));
    }
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = info.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?.trim().strip_suffix("kB")?.trim();
    Some((kb.parse::<u64>().ok()?.saturating_mul(1024), false))
}

static SPARE: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());

/// Bytes the pool, and apart from it the allocator's freed blocks, keep at most between runs
/// ([`keep_for`]); `usize::MAX`: no bound beyond their own.
static KEEP: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Bounds what is kept for later runs to `bytes` — the pool's buffers, and apart from them the
/// allocator's freed blocks — and gives back at once what is kept beyond it, oldest first. The app
/// calls it once a run is shown, with what the next run of the same text is likely to need.
pub fn keep_for(bytes: usize) {
    KEEP.store(bytes, Ordering::Relaxed);
    let evicted = SPARE.lock().map_or_else(|_| Vec::new(), |mut spare| evict(&mut spare, bytes));
    drop(evicted);
    map::trim(bytes);
}

/// Lifts the bound of [`keep_for`] (a run starts: what it frees may be what it takes next).
pub fn unbound() {
    KEEP.store(usize::MAX, Ordering::Relaxed);
}

/// Bytes kept in the pool and in the allocator's freed blocks: (pool, blocks).
pub fn kept_bytes() -> (usize, usize) {
    let pool = SPARE.lock().map_or(0, |spare| spare.iter().map(|v| v.capacity() * size_of::<f32>()).sum());
    (pool, map::kept())
}

/// Idle: what is kept is cut to the bound again, and mimalloc gives the free pages of the calling
/// thread's heap (the app's inference thread, which made and dropped the runs) back to the system
/// (`mi_collect`).
pub fn release_idle() {
    keep_for(KEEP.load(Ordering::Relaxed));
    collect_small();
}

/// mimalloc's free pages handed back to the system.
#[allow(unsafe_code)]
fn collect_small() {
    unsafe extern "C" {
        /// mimalloc's own: frees what its heaps hold unused (`force`: also what it keeps for
        /// reuse).
        fn mi_collect(force: bool);
    }
    // SAFETY: mimalloc's collection takes no pointer; any thread may call it at any time.
    unsafe { mi_collect(true) };
}

/// Takes the oldest buffers out of `spare` until it holds at most `most` bytes and [`MAX_KEPT`]
/// buffers; returns them, to be freed outside the lock.
fn evict(spare: &mut Vec<Vec<f32>>, most: usize) -> Vec<Vec<f32>> {
    let mut kept: usize = spare.iter().map(|v| v.capacity() * size_of::<f32>()).sum();
    let mut evicted = Vec::new();
    while !spare.is_empty() && (spare.len() > MAX_KEPT || kept > most) {
        let oldest = spare.remove(0);
        kept -= oldest.capacity() * size_of::<f32>();
        evicted.push(oldest);
    }
    evicted
}

/// A buffer of `len` values whose contents are unspecified (zeros, or values of an earlier run):
/// for a caller that writes every value. Reuses a kept buffer of a fitting size when there is one.
pub fn take(len: usize) -> Vec<f32> {
    let bytes = len.saturating_mul(size_of::<f32>());
    if bytes >= MIN_BYTES
        && let Ok(mut spare) = SPARE.lock()
    {
        // The smallest kept buffer that fits and is not more than twice too large, else the
        // largest at least half as large, grown (its pages are kept: a pass over a growing input,
        // a step after a step, faults in only the new part).
        let fitting = spare
            .iter()
            .enumerate()
            .filter(|(_, v)| fits(v.capacity(), len))
            .min_by_key(|(_, v)| v.capacity())
            .or_else(|| {
                spare
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| v.capacity() < len && v.capacity() * 2 >= len)
                    .max_by_key(|(_, v)| v.capacity())
            })
            .map(|(i, _)| i);
        if let Some(i) = fitting {
            let mut buffer = spare.remove(i); // in age order (see `give`)
            drop(spare);
            if buffer.len() >= len {
                buffer.truncate(len);
            } else {
                buffer.resize(len, 0.0);
            }
            return buffer;
        }
    }
    let whole = if bytes >= MIN_BYTES { whole_pages(len) } else { len };
    let mut buffer = vec![0.0; whole];
    buffer.truncate(len);
    buffer
}

/// `len` values rounded up to whole 2 MB pages, the room a fresh kept buffer has ([`Allocator`]
/// maps a block this large on a 2 MB boundary, in huge pages): the end of the buffer is in a huge
/// page too, and a later, slightly longer take fits in it.
fn whole_pages(len: usize) -> usize {
    len.saturating_mul(size_of::<f32>()).next_multiple_of(HUGE) / size_of::<f32>()
}

/// Whether a kept buffer of `capacity` values is handed out for `len`: it is long enough and not
/// more than twice too long.
fn fits(capacity: usize, len: usize) -> bool {
    capacity >= len && capacity / 2 <= len
}

/// Keeps a buffer for each of `lens` (values) that a later [`take`] hands out, its pages touched
/// now; buffers already kept count. For takes that should not wait on fresh pages: the blocks the
/// next keystroke copies, prepared while the app draws the run before (the first keystroke after
/// a whole pass otherwise faults in megabytes).
pub fn reserve(lens: &[usize]) {
    let mut unmet = Vec::new();
    if let Ok(spare) = SPARE.lock() {
        let mut claimed = vec![false; spare.len()];
        for &len in lens.iter().filter(|&&len| len.saturating_mul(size_of::<f32>()) >= MIN_BYTES) {
            let kept = (0..spare.len())
                .filter(|&i| !claimed[i] && fits(spare[i].capacity(), len))
                .min_by_key(|&i| spare[i].capacity());
            match kept {
                Some(i) => claimed[i] = true,
                None => unmet.push(len),
            }
        }
    }
    for len in unmet {
        let whole = whole_pages(len);
        let mut buffer: Vec<f32> = Vec::with_capacity(whole);
        // Written, so that its pages are there (a zeroed allocation's are not, until written).
        buffer.resize(whole, 0.0);
        give(buffer);
    }
}

/// 2 MB, the size of an x86-64 huge page.
pub const HUGE: usize = 2 << 20;

/// Keeps `buffer` for a later [`take`] if it is large and there is room; frees it otherwise.
pub fn give(buffer: Vec<f32>) {
    let bytes = buffer.capacity() * size_of::<f32>();
    if bytes < MIN_BYTES {
        return;
    }
    let bound = KEEP.load(Ordering::Relaxed);
    if bytes > bound || (bytes > FLOOR_BYTES && bytes > max_bytes()) {
        return;
    }
    // The newest buffers are kept, the oldest freed to make room: what was dropped last is what
    // the next pass is likeliest to need (a keystroke takes the blocks its previous run gave up,
    // not the long first pass's step buffers).
    let evicted = if let Ok(mut spare) = SPARE.lock() {
        spare.push(buffer);
        let kept: usize = spare.iter().map(|v| v.capacity() * size_of::<f32>()).sum();
        let most = if kept > FLOOR_BYTES { max_bytes() } else { FLOOR_BYTES };
        evict(&mut spare, most.min(bound))
    } else {
        Vec::new()
    };
    drop(evicted); // freed outside the lock
}

/// The process's allocator: mimalloc's, except that blocks of [`HUGE`] bytes or more (aligned
/// to at most a page) are mapped on their own, a fresh one starting on a 2 MB boundary, and asked
/// for in 2 MB pages (`MADV_HUGEPAGE`), so that a large buffer is huge pages from its first byte —
/// not only the 2 MB-aligned middle that advice on a `malloc`ed block can cover. A model's large buffers are read again and again (the
/// blocks of recorded rows a keystroke copies, a long run's attention, key/value caches): one
/// page-table entry per 2 MB instead of 512, and on a virtual machine whose host takes back an
/// idle guest's pages, one refault per 2 MB. Freed blocks are kept for the next ones (up to 1 GB),
/// as `malloc` keeps freed memory. Smaller blocks are mimalloc's (see the module's comment for why
/// both).
pub struct Allocator;

/// Whether a block of `layout` is mapped by [`Allocator`] itself (decided the same way when it is
/// allocated, reallocated and freed).
fn mapped(layout: Layout) -> bool {
    cfg!(target_os = "linux") && layout.size() >= HUGE && layout.align() <= PAGE
}

/// 4 KB: the alignment every mapping, and every kept block's front, has.
const PAGE: usize = 4096;

/// `size` rounded up to whole 4 KB pages.
fn page_round(size: usize) -> usize {
    size.next_multiple_of(PAGE)
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
// SAFETY (of each call): mmap/munmap/madvise/mremap on ranges this allocator mapped, sized as
// mapped (`page_round` of the layout's size).
mod map {
    use std::sync::Mutex;

    use super::{HUGE, page_round};

    /// A fresh zeroed mapping of `size` bytes starting on a 2 MB boundary, advised into huge pages;
    /// null when the system has no memory for it.
    pub(super) fn aligned(size: usize) -> *mut u8 {
        let len = page_round(size);
        let Some(reserve) = len.checked_add(HUGE) else { return std::ptr::null_mut() };
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        let start = (base as usize).next_multiple_of(HUGE);
        let (head, tail) = (start - base as usize, base as usize + reserve - (start + len));
        // SAFETY: the unaligned head and the tail past `len` lie in the mapping just made and are
        // never handed out.
        unsafe {
            if head > 0 {
                libc::munmap(base, head);
            }
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
        start as *mut u8
    }

    /// Freed blocks kept for the next ones, as `malloc` keeps freed memory (a written token's run
    /// replaces the last one, a pass's blocks of recorded rows the previous pass's: their memory is
    /// taken again instead of fresh pages faulted in and zeroed), at most [`KEPT`] of them and
    /// [`KEPT_BYTES`] together, oldest first.
    static FREED: Mutex<Kept> = Mutex::new(Kept { blocks: [(0, 0); KEPT], count: 0 });

    /// Freed blocks kept at most.
    const KEPT: usize = 64;
    /// Bytes kept at most (the oldest blocks are unmapped to make room).
    const KEPT_BYTES: usize = 1 << 30;

    /// `(address, mapped length)` of freed blocks, the first `count` of `blocks`.
    struct Kept {
        blocks: [(usize, usize); KEPT],
        count: usize,
    }

    impl Kept {
        /// Takes out block `i`.
        fn remove(&mut self, i: usize) -> (usize, usize) {
            let block = self.blocks[i];
            self.blocks.copy_within(i + 1..self.count, i);
            self.count -= 1;
            block
        }
    }

    /// A block for `size` bytes: the front of the smallest kept one at least that long (the rest
    /// stays kept when it is 2 MB or more, else is unmapped), else a fresh [`aligned`] one, the
    /// oldest kept blocks as long together unmapped first (so that keeping blocks adds little to
    /// what the process holds at its peak). Whether it is fresh (zeroed) is said.
    pub(super) fn block(size: usize) -> (*mut u8, bool) {
        let len = page_round(size);
        let mut unmap = [(0, 0); KEPT];
        let mut n_unmap = 0;
        let mut found = None;
        if let Ok(mut kept) = FREED.lock() {
            let best = (0..kept.count).filter(|&i| kept.blocks[i].1 >= len).min_by_key(|&i| kept.blocks[i].1);
            if let Some(i) = best {
                let (at, mapped) = kept.blocks[i];
                if mapped - len >= HUGE {
                    kept.blocks[i] = (at + len, mapped - len);
                } else {
                    kept.remove(i);
                    if mapped > len {
                        (unmap[0], n_unmap) = ((at + len, mapped - len), 1);
                    }
                }
                found = Some(at);
            } else {
                let mut unmapped = 0;
                while kept.count > 0 && unmapped < len {
                    unmap[n_unmap] = kept.remove(0);
                    unmapped += unmap[n_unmap].1;
                    n_unmap += 1;
                }
            }
        }
        for &(at, len) in &unmap[..n_unmap] {
            // SAFETY: a kept block (or its excess), held by no one.
            unsafe { libc::munmap(at as *mut libc::c_void, len) };
        }
        match found {
            Some(at) => (at as *mut u8, false),
            None => (aligned(size), true),
        }
    }

    /// Bytes of the freed blocks kept.
    pub(super) fn kept() -> usize {
        FREED.lock().map_or(0, |kept| kept.blocks[..kept.count].iter().map(|b| b.1).sum())
    }

    /// Unmaps the oldest kept blocks until at most `most` bytes are kept.
    pub(super) fn trim(most: usize) {
        let mut unmap = [(0, 0); KEPT];
        let mut n_unmap = 0;
        if let Ok(mut kept) = FREED.lock() {
            let mut total: usize = kept.blocks[..kept.count].iter().map(|b| b.1).sum();
            while kept.count > 0 && total > most {
                unmap[n_unmap] = kept.remove(0);
                total -= unmap[n_unmap].1;
                n_unmap += 1;
            }
        }
        for &(at, len) in &unmap[..n_unmap] {
            // SAFETY: a kept block, held by no one.
            unsafe { libc::munmap(at as *mut libc::c_void, len) };
        }
    }

    /// Frees a block [`block`] or [`resized`] made for `size` bytes: kept for a later one, or
    /// unmapped.
    pub(super) unsafe fn free(ptr: *mut u8, size: usize) {
        let len = page_round(size);
        let mut evicted = [(0, 0); KEPT + 1];
        let mut n_evicted = 0;
        let most = KEPT_BYTES.min(super::KEEP.load(std::sync::atomic::Ordering::Relaxed));
        match FREED.lock() {
            Ok(mut kept) if len <= most => {
                let mut total: usize = kept.blocks[..kept.count].iter().map(|b| b.1).sum();
                while kept.count == KEPT || total + len > most {
                    evicted[n_evicted] = kept.remove(0);
                    total -= evicted[n_evicted].1;
                    n_evicted += 1;
                }
                let count = kept.count;
                kept.blocks[count] = (ptr as usize, len);
                kept.count += 1;
            }
            _ => {
                evicted[0] = (ptr as usize, len);
                n_evicted = 1;
            }
        }
        for &(at, len) in &evicted[..n_evicted] {
            // SAFETY: a block this allocator mapped with this length, held by no one now.
            unsafe { libc::munmap(at as *mut libc::c_void, len) };
        }
    }

    /// The block at `ptr` (mapped for `old` bytes) grown or shrunk to `new` bytes, moved by the
    /// kernel when it must (pages are moved, not copied); null when it cannot be.
    pub(super) unsafe fn resized(ptr: *mut u8, old: usize, new: usize) -> *mut u8 {
        // SAFETY: the caller's block, mapped with this length.
        let moved = unsafe { libc::mremap(ptr.cast(), page_round(old), page_round(new), libc::MREMAP_MAYMOVE) };
        if moved == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        // SAFETY: the block just remapped.
        unsafe { libc::madvise(moved, page_round(new), libc::MADV_HUGEPAGE) };
        moved.cast()
    }
}

#[cfg(not(target_os = "linux"))]
mod map {
    pub(super) fn block(_: usize) -> (*mut u8, bool) {
        unreachable!("only Linux maps blocks itself")
    }
    pub(super) unsafe fn free(_: *mut u8, _: usize) {}
    pub(super) unsafe fn resized(_: *mut u8, _: usize, _: usize) -> *mut u8 {
        unreachable!("only Linux maps blocks itself")
    }
    pub(super) fn trim(_: usize) {}
    pub(super) fn kept() -> usize {
        0
    }
}

#[allow(unsafe_code)]
// SAFETY: blocks are either mimalloc's (passed back to it with their layout) or
// mappings of this one's (`mapped` decides which from the layout, the same at every call);
// mappings start on a page (the most alignment `mapped` accepts), are at least the layout's size,
// and are zeroed when fresh (a kept block asked for as zeros is zeroed here).
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed on.
        if mapped(layout) { map::block(layout.size()).0 } else { unsafe { Small.alloc(layout) } }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !mapped(layout) {
            // SAFETY: the caller's layout, passed on.
            return unsafe { Small.alloc_zeroed(layout) };
        }
        let (block, fresh) = map::block(layout.size());
        if !fresh && !block.is_null() {
            // SAFETY: a kept block of at least `layout.size()` bytes, now the caller's (a fresh
            // mapping is zeroed already).
            unsafe { std::ptr::write_bytes(block, 0, layout.size()) };
        }
        block
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's block and layout, freed by whichever allocator made it.
        unsafe {
            if mapped(layout) {
                map::free(ptr, layout.size());
            } else {
                Small.dealloc(ptr, layout);
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's block, layout and a valid new size (GlobalAlloc::realloc's contract).
        unsafe {
            let new = Layout::from_size_align_unchecked(new_size, layout.align());
            match (mapped(layout), mapped(new)) {
                (true, true) => map::resized(ptr, layout.size(), new_size),
                (false, false) => Small.realloc(ptr, layout, new_size),
                _ => {
                    let moved = self.alloc(new);
                    if !moved.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    moved
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    fn large_blocks_start_on_a_2mb_boundary_and_keep_their_values_when_resized() {
        // A fresh mapping starts on a 2 MB boundary (a kept block's front need not).
        let fresh = map::aligned(3 * HUGE + 5);
        assert!(!fresh.is_null() && (fresh as usize).is_multiple_of(HUGE));
        // SAFETY: the block just mapped, for this size.
        unsafe { map::free(fresh, 3 * HUGE + 5) };
        let n = HUGE / 4 + 5;
        let mut v: Vec<u32> = (0..n as u32).collect();
        v.reserve(3 * HUGE); // grown in place or moved by the kernel
        v.extend(0..10);
        assert!(v[..n].iter().enumerate().all(|(i, &x)| x == i as u32) && v[n..] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        v.truncate(100);
        v.shrink_to_fit(); // back to mimalloc
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
        let zeros = vec![0u8; 3 * HUGE + 1];
        assert!(zeros.iter().all(|&b| b == 0));
        // A freed block is kept and handed out again: zeroed when asked for zeros.
        for round in 0..20u8 {
            let dirty = vec![round | 1; 3 * HUGE - 7 * round as usize];
            drop(dirty);
            let clean = vec![0u8; 3 * HUGE - 5 * round as usize];
            assert!(clean.iter().all(|&b| b == 0), "round {round}");
        }
        let mut small = vec![1u8; 100];
        small.resize(HUGE, 2); // from mimalloc to a mapping
        assert!(small[..100].iter().all(|&b| b == 1) && small[100..].iter().all(|&b| b == 2));
    }

    #[test]
    fn a_given_buffer_of_a_fitting_size_is_taken_again() {
        // One test touches the shared pool, so no other test races it.
        let len = MIN_BYTES / 4 + 123;
        let mut buffer = take(len);
        assert_eq!(buffer.len(), len);
        #[cfg(target_os = "linux")]
        assert!(buffer.capacity() * 4 == HUGE, "a whole 2 MB page");
        buffer[0] = 42.0;
        let ptr = buffer.as_ptr();
        give(buffer);
        let again = take(len - 10);
        assert_eq!(again.len(), len - 10);
        assert_eq!(again.as_ptr(), ptr, "the same memory, handed out again");
        give(again);
        // Far smaller requests do not pin a large buffer; small buffers are not kept.
        let smaller = take(len / 3);
        assert_ne!(smaller.as_ptr(), ptr);
        assert_eq!(take(10), vec![0.0; 10]);
        let reused = take(len);
        assert_eq!(reused.as_ptr(), ptr);
        assert_eq!(reused.len(), len, "grown back to the requested length");
        // Reserving counts what is kept: two buffers for two requests (the one given back and a
        // new one), none more when asked again; a take then hands them out.
        give(reused);
        let kept = || SPARE.lock().unwrap().iter().filter(|v| fits(v.capacity(), len)).count();
        reserve(&[len, len]);
        assert_eq!(kept(), 2);
        reserve(&[len, len]);
        assert_eq!(kept(), 2);
        let (a, b) = (take(len), take(len));
        assert!(a.as_ptr() == ptr || b.as_ptr() == ptr);
        assert_eq!(kept(), 0);
        // Bounded to what the next run needs: what is kept beyond it goes at once, what is given
        // back beyond it is freed, and the allocator's freed blocks are bounded too.
        give(a);
        give(b);
        assert_eq!(kept(), 2);
        keep_for(HUGE);
        assert_eq!(kept(), 1, "one 2 MB buffer fits the bound, the older one went");
        keep_for(0);
        assert_eq!(kept_bytes(), (0, 0), "nothing kept beyond a bound of nothing");
        give(take(len));
        drop(vec![1u8; 3 * HUGE]);
        assert_eq!(kept_bytes(), (0, 0), "buffers given back and blocks freed past the bound are freed");
        release_idle();
        unbound();
        give(take(len));
        assert_eq!(kept(), 1, "a run lifts the bound");
    }
}
