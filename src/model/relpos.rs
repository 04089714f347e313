//! Relative-position buckets, computed exactly as Hugging Face does (the float operations in f32,
//! in the same order, so bucket boundaries fall where transformers puts them).

/// MPNet's (and T5's bidirectional) bucket of `relative = key_pos − query_pos`:
/// half the buckets per direction; distances below `buckets/4` get their own bucket, longer ones
/// share log-spaced buckets up to `max_distance`.
///
/// Mirrors `MPNetModel.relative_position_bucket` (`modeling_mpnet.py`) and T5's
/// `_relative_position_bucket(bidirectional=True)`:
/// ```python
/// n = -relative_position; num_buckets //= 2
/// ret += (n < 0).to(torch.long) * num_buckets; n = torch.abs(n)
/// max_exact = num_buckets // 2; is_small = n < max_exact
/// val_if_large = max_exact + (torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
///                             * (num_buckets - max_exact)).to(torch.long)
/// val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))
/// ret += torch.where(is_small, n, val_if_large)
/// ```
pub fn bidirectional_bucket(relative: i64, buckets: usize, max_distance: usize) -> usize {
    let n = -relative;
    let half = (buckets / 2) as i64;
    let mut ret = if n < 0 { half } else { 0 };
    let n = n.abs();
    let max_exact = half / 2;
    if n < max_exact {
        return (ret + n) as usize;
    }
    // torch: float32 tensor op divided by a Python float (computed in double, applied in f32).
    let ratio = (n as f32 / max_exact as f32).ln();
    let denom = ((max_distance as f64) / (max_exact as f64)).ln() as f32;
    let large = max_exact + (ratio / denom * (half - max_exact) as f32) as i64;
    ret += large.min(half - 1);
    ret as usize
}

/// T5's decoder bucket (`_relative_position_bucket(bidirectional=False)`) of `relative =
/// key_pos − query_pos`: only keys at or before the query count (later ones share bucket 0);
/// distances below `buckets/2` get their own bucket, longer ones log-spaced buckets up to
/// `max_distance`.
pub fn causal_bucket(relative: i64, buckets: usize, max_distance: usize) -> usize {
    let n = -relative.min(0);
    let max_exact = (buckets / 2) as i64;
    if n < max_exact {
        return n as usize;
    }
    let ratio = (n as f32 / max_exact as f32).ln();
    let denom = ((max_distance as f64) / (max_exact as f64)).ln() as f32;
    let large = max_exact + (ratio / denom * (buckets as i64 - max_exact) as f32) as i64;
    large.min(buckets as i64 - 1) as usize
}

/// DeBERTa-v2's log bucket of `relative = query_pos − key_pos`: exact within `bucket_size/2`,
/// then log-spaced up to `max_position`, keeping the sign.
///
/// Mirrors `make_log_bucket_position` (`modeling_deberta_v2.py)`:
/// ```python
/// sign = torch.sign(relative_pos); mid = bucket_size // 2
/// abs_pos = torch.where((relative_pos < mid) & (relative_pos > -mid), torch.tensor(mid - 1).type_as(relative_pos), torch.abs(relative_pos))
/// log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1)) + mid
/// bucket_pos = torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * sign)
/// ```
pub fn log_bucket(relative: i64, bucket_size: usize, max_position: usize) -> i64 {
    let mid = (bucket_size / 2) as i64;
    let abs_pos = if relative < mid && relative > -mid { mid - 1 } else { relative.abs() };
    if abs_pos <= mid {
        return relative;
    }
    // `abs_pos / mid` is a float32 tensor; the denominator a float32 tensor of the double quotient.
    let num = (abs_pos as f32 / mid as f32).ln();
    let den = (((max_position - 1) as f64 / mid as f64) as f32).ln();
    let log_pos = (num / den * (mid - 1) as f32).ceil() + mid as f32;
    log_pos as i64 * relative.signum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mpnet_buckets_match_transformers() {
        // Values printed by transformers 5.23's MPNetEncoder.relative_position_bucket (32 buckets, 128).
        let want = [
            (0, 0),
            (1, 17),
            (-1, 1),
            (7, 23),
            (-7, 7),
            (8, 24),
            (-8, 8),
            (20, 26),
            (-20, 10),
            (127, 31),
            (-127, 15),
            (500, 31),
            (-500, 15),
        ];
        for (relative, bucket) in want {
            assert_eq!(bidirectional_bucket(relative, 32, 128), bucket, "relative {relative}");
        }
    }

    #[test]
    fn deberta_log_buckets_keep_sign_and_near_distances() {
        for r in -8..=8 {
            assert_eq!(log_bucket(r, 16, 64), r, "within mid distances are exact");
        }
        // Beyond mid: ceil(ln(|r|/8) / ln(63/8) · 7) + 8, with the sign of r (values printed by
        // transformers 5.23's make_log_bucket_position).
        assert_eq!(log_bucket(9, 16, 64), 9);
        assert_eq!(log_bucket(-9, 16, 64), -9);
        assert_eq!(log_bucket(16, 16, 64), 11);
        assert_eq!(log_bucket(63, 16, 64), 15);
        assert_eq!(log_bucket(-200, 16, 64), -19);
        assert_eq!(log_bucket(300, 256, 512), 207);
    }
}
