//! A small global pool of large `f32` buffers (an allocator concern, not analysis): the values of
//! dropped attention data, kept for the next forward pass.
//!
//! A forward pass at 512 tokens records 75 MB of probabilities. Fresh memory that large comes
//! from the OS one page at a time as it is first written (18 000 page faults, a tenth of the
//! pass). The app and `attnviz bench` run the model again and again on inputs of similar length,
//! so the buffers of dropped [`Attention`](crate::analysis::Attention) data are kept (a few, bounded in
//! size) and handed to the next pass instead; fresh ones are asked for in 2 MB pages.

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
    let available = crate::model::files::memory_budget().map_or(0, |(bytes, _)| bytes / 8);
    usize::try_from(available).unwrap_or(usize::MAX).max(FLOOR_BYTES)
}

static SPARE: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());

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
            .filter(|(_, v)| v.capacity() >= len && v.capacity() / 2 <= len)
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
    let buffer = vec![0.0; len];
    huge_pages(&buffer);
    buffer
}

/// Asks Linux to back a fresh large buffer (zero pages from `calloc`'s `mmap`, not yet touched)
/// with 2 MB pages where it can: the first write then faults once per 2 MB instead of once per
/// 4 KB (a recorded run of a thousand tokens is half a million faults, most of its time on a
/// virtual machine). Only a hint: the values are the same either way.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn huge_pages(buffer: &[f32]) {
    const HUGE: usize = 2 << 20;
    let (start, end) = (buffer.as_ptr() as usize, buffer.as_ptr() as usize + std::mem::size_of_val(buffer));
    let (first, last) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
    if last > first {
        // SAFETY: the range lies inside `buffer`'s allocation, which this function borrows; the
        // advice changes how its pages are backed, not their contents or the mapping.
        unsafe {
            libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn huge_pages(_: &[f32]) {}

/// Keeps `buffer` for a later [`take`] if it is large and there is room; frees it otherwise.
pub fn give(buffer: Vec<f32>) {
    let bytes = buffer.capacity() * size_of::<f32>();
    if bytes < MIN_BYTES {
        return;
    }
    if bytes > FLOOR_BYTES && bytes > max_bytes() {
        return;
    }
    // The newest buffers are kept, the oldest freed to make room: what was dropped last is what
    // the next pass is likeliest to need (a keystroke takes the blocks its previous run gave up,
    // not the long first pass's step buffers).
    let evicted = if let Ok(mut spare) = SPARE.lock() {
        spare.push(buffer);
        let mut kept: usize = spare.iter().map(|v| v.capacity() * size_of::<f32>()).sum();
        let most = if kept > FLOOR_BYTES { max_bytes() } else { FLOOR_BYTES };
        let mut evicted = Vec::new();
        while spare.len() > MAX_KEPT || kept > most {
            let oldest = spare.remove(0);
            kept -= oldest.capacity() * size_of::<f32>();
            evicted.push(oldest);
        }
        evicted
    } else {
        Vec::new()
    };
    drop(evicted); // freed outside the lock
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_buffer_of_a_fitting_size_is_taken_again() {
        // One test touches the shared pool, so no other test races it.
        let len = MIN_BYTES / 4 + 123;
        let mut buffer = take(len);
        assert_eq!(buffer.len(), len);
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
    }
}
