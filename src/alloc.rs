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
//! **No pool of spare buffers.** Large `f32` buffers ([`take`]) are fresh blocks, rounded up to
//! whole 2 MB pages. A pool that handed dropped attention data to the next pass used to sit on top:
//! with the allocator keeping freed large blocks it spared no page faults (ten 512-token passes:
//! 7,928 and 8,028 minor faults with it, 9,314 and 7,598 without), held about 8 MB more, and timed
//! on a quiet machine, alternated, no run was faster with it (a key at the end of 925 tokens: 20.5
//! and 19.3 ms with it, 17.4 and 17.7 without; a 512-token pass: 871 and 765 ms against 744 and
//! 753) — `docs/performance.md`, "The allocator".
//!
//! **The budget** ([`memory_budget`]) bounds the models loaded.
//!
//! **What is kept between runs** ([`keep_for`], [`release_idle`]): in the app, once a run is shown,
//! the freed blocks are cut to what the next run of the current text is likely to need (the run's own size), so that after a long input a short one does not sit on the long
//! one's gigabytes; a run lifts the bound while it runs ([`unbound`]). Idle for a few seconds, the
//! app also hands mimalloc's free pages back ([`release_idle`]). Without a bound (the command line,
//! the tests) nothing changes.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

use mimalloc::MiMalloc as Small;

/// Smaller buffers are left as asked (not rounded to whole pages).
const MIN_BYTES: usize = 1 << 20;

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

/// Bytes the allocator's freed blocks keep at most between runs ([`keep_for`]); `usize::MAX`: no
/// bound beyond their own.
static KEEP: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Bounds the allocator's freed blocks kept for later runs to `bytes`, and gives back at once what
/// is kept beyond it. The app calls it once a run is shown, with what the next run of the same
/// text is likely to need.
pub fn keep_for(bytes: usize) {
    KEEP.store(bytes, Ordering::Relaxed);
    map::trim(bytes);
}

/// Lifts the bound of [`keep_for`] (a run starts: what it frees may be what it takes next).
pub fn unbound() {
    KEEP.store(usize::MAX, Ordering::Relaxed);
}

/// Bytes kept in the allocator's freed blocks.
pub fn kept_bytes() -> usize {
    map::kept()
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

/// A buffer of `len` zeros; one of a megabyte or more rounded up to whole 2 MB pages (see
/// [`room`]).
pub fn take(len: usize) -> Vec<f32> {
    let mut buffer = vec![0.0; room::<f32>(len)];
    buffer.truncate(len);
    buffer
}

/// An empty vector with room for `len` values, rounded as [`take`] rounds (see [`room`]): for a
/// vector filled value by value whose final length is known (a GGUF header's vocabulary of
/// 49,152 tokens: 1.5 MB of values). Left at 1.5 MB it is mimalloc's, which held 14 MB more peak
/// RSS on a SmolLM2 load for three such arrays than with them mapped (`docs/performance.md`,
/// "Since the GGUF header reader").
pub fn with_room<T>(len: usize) -> Vec<T> {
    Vec::with_capacity(room::<T>(len))
}

/// `len` values of `T`, or, when they take a megabyte or more, as many as fill whole 2 MB pages:
/// the room a fresh kept buffer has ([`Allocator`] maps a block this large on a 2 MB boundary, in
/// huge pages, and keeps it when freed for the next large buffer); the end of the buffer is in a
/// huge page too, and a later, slightly longer take fits in it.
fn room<T>(len: usize) -> usize {
    let size = size_of::<T>();
    if len.saturating_mul(size) < MIN_BYTES {
        return len;
    }
    len.saturating_mul(size).next_multiple_of(HUGE) / size
}

/// 2 MB, the size of an x86-64 huge page.
pub const HUGE: usize = 2 << 20;

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
    fn a_large_buffer_is_zeros_in_whole_pages_and_freed_blocks_are_bounded() {
        let len = MIN_BYTES / 4 + 123;
        let buffer = take(len);
        assert_eq!(buffer.len(), len);
        assert!(buffer.iter().all(|&v| v == 0.0));
        #[cfg(target_os = "linux")]
        assert!(buffer.capacity() * 4 == HUGE, "a whole 2 MB page");
        assert_eq!(take(10), vec![0.0; 10]);
        // Any type: a vocabulary's 49,152 values of 32 bytes get whole pages, 100 keep their room.
        let values: Vec<[u64; 4]> = with_room(49_152);
        assert_eq!((values.len(), values.capacity() * 32), (0, HUGE));
        assert_eq!(with_room::<[u64; 4]>(100).capacity(), 100);
        drop(buffer);
        // Bounded to what the next run needs: the allocator's freed blocks beyond it go at once.
        keep_for(0);
        assert_eq!(kept_bytes(), 0, "nothing kept beyond a bound of nothing");
        drop(vec![1u8; 3 * HUGE]);
        assert_eq!(kept_bytes(), 0, "blocks freed past the bound are freed");
        release_idle();
        unbound();
    }
}
