//! A small global pool of large `f32` buffers (an allocator concern, not analysis): the values of
//! dropped attention data, kept for the next forward pass.
//!
//! A forward pass at 512 tokens records 75 MB of probabilities. Fresh memory that large comes
//! from the OS one page at a time as it is first written (18 000 page faults, a tenth of the
//! pass). The app and `attnviz bench` run the model again and again on inputs of similar length,
//! so the buffers of dropped [`Attention`](crate::analysis::Attention) data are kept (a few, bounded in
//! size) and handed to the next pass instead.

use std::sync::Mutex;

/// Smaller buffers are left to the allocator.
const MIN_BYTES: usize = 1 << 20;
/// Buffers kept at most.
const MAX_KEPT: usize = 2;
/// Bytes kept at most.
const MAX_BYTES: usize = 256 << 20;

static SPARE: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());

/// A buffer of `len` values whose contents are unspecified (zeros, or values of an earlier run):
/// for a caller that writes every value. Reuses a kept buffer of a fitting size when there is one.
pub fn take(len: usize) -> Vec<f32> {
    let bytes = len.saturating_mul(size_of::<f32>());
    if bytes >= MIN_BYTES
        && let Ok(mut spare) = SPARE.lock()
    {
        // The smallest kept buffer that fits and is not more than twice too large.
        let fitting = spare
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= len && v.capacity() / 2 <= len)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i);
        if let Some(i) = fitting {
            let mut buffer = spare.swap_remove(i);
            drop(spare);
            if buffer.len() >= len {
                buffer.truncate(len);
            } else {
                buffer.resize(len, 0.0);
            }
            return buffer;
        }
    }
    vec![0.0; len]
}

/// Keeps `buffer` for a later [`take`] if it is large and there is room; frees it otherwise.
pub fn give(buffer: Vec<f32>) {
    let bytes = buffer.capacity() * size_of::<f32>();
    if bytes < MIN_BYTES {
        return;
    }
    if let Ok(mut spare) = SPARE.lock() {
        let kept: usize = spare.iter().map(|v| v.capacity() * size_of::<f32>()).sum();
        if spare.len() < MAX_KEPT && kept + bytes <= MAX_BYTES {
            spare.push(buffer);
        }
    }
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
