//! Linear models over sorted `u64` keys and the searches they bound.
//!
//! * [`Linear`]: position ≈ slope · (key − origin) + intercept, fitted by least squares; the slope of a fit
//!   over sorted keys is never negative, so predictions are monotone in the key.
//! * [`GroupSearch`]: how a group finds a key in its sorted key array: up to [`MAX_MODELS`] linear pieces
//!   over equal runs of the array, with the largest error of any, whose prediction is followed by an
//!   exponential search outward from it within the window `[pred − err, pred + err]`; or, where the
//!   pieces cannot meet the error bound (locally hard keys), a fallback node: the first key of each of
//!   up to [`UPPER_KEYS`] equal blocks (at least [`FALLBACK_FANOUT`] keys each) in an upper level inline
//!   in the group header, searched by binary search, then one block searched 8-ary (7 independent probes
//!   per round, so their misses overlap) — a two-level B+-tree-like node, never much worse than a
//!   B+-tree's leaf search.
//! * A piece is 16 bytes (first key, `f32` slope and intercept; its run of positions follows from its
//!   index), so eight fit in two cache lines of the group header — the bytes four 32-byte pieces took.
//!   Eight pieces instead of four halve the mean prediction error on books-like keys (about 8 → 4.6
//!   positions for groups of 4,096) and fit groups four could not, at no memory cost. The fallback's
//!   upper level takes the same 128 bytes of the header: no allocation of its own, so no pointer (and
//!   no cache and TLB miss) between the header and the block.
//!
//! Every search checks its answer against the neighbouring keys and falls back to a binary search of the
//! whole range when a window missed (floating-point rounding), so a model can only cost time, never
//! correctness.
//!
//! Cost: a model search is a multiply-add and an exponential search outward from the prediction within
//! the ≤ 2·err + 1 keys of its window (err ≤ [`ERROR_BOUND`]): about 2·log2(d) probes for a prediction `d`
//! positions off; the fallback is a binary search of ≤ 16 inline keys (two cache lines of the header) and
//! an 8-ary search of one block (256 keys for a group of 4,096: two rounds of overlapping misses).

/// Largest acceptable maximum error of a group's model piece (positions), as XIndex's group error bound.
pub const ERROR_BOUND: usize = 32;
/// Most linear pieces per group.
pub const MAX_MODELS: usize = 8;
/// Fewest keys per piece: a smaller array gets fewer pieces.
pub const KEYS_PER_PIECE: usize = 64;
/// Fewest keys per block of the fallback node.
pub const FALLBACK_FANOUT: usize = 64;
/// Most keys of the fallback node's upper level (inline in the group header).
pub const UPPER_KEYS: usize = 16;

/// A linear model from keys to positions.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Linear {
    pub origin: u64,
    pub slope: f64,
    pub intercept: f64,
}

impl Linear {
    /// Least-squares fit of `keys[i] ↦ base + i`; returns the model and its maximum error over `keys`.
    pub fn fit(keys: &[u64], base: usize) -> (Linear, usize) {
        let Some(&origin) = keys.first() else {
            return (Linear::default(), 0);
        };
        let n = keys.len() as f64;
        let (mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0);
        for (i, &k) in keys.iter().enumerate() {
            let x = (k - origin) as f64;
            let y = i as f64;
            sx += x;
            sy += y;
            sxx += x * x;
            sxy += x * y;
        }
        let var = sxx - sx * sx / n;
        let slope = if var > 0.0 {
            ((sxy - sx * sy / n) / var).max(0.0)
        } else {
            0.0
        };
        let intercept = sy / n - slope * sx / n + base as f64;
        let model = Linear {
            origin,
            slope,
            intercept,
        };
        let err = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| model.predict(k).abs_diff(base + i))
            .max()
            .unwrap_or(0);
        (model, err)
    }

    /// The predicted position of `key` (rounded, never negative).
    #[inline]
    pub fn predict(&self, key: u64) -> usize {
        let p = self.slope * key.saturating_sub(self.origin) as f64 + self.intercept;
        if p <= 0.0 { 0 } else { p as usize }
    }

    /// Bytes of one model.
    pub const BYTES: usize = std::mem::size_of::<Linear>();
}

/// One model piece of a group: the keys from `first_key` on, at positions `start..end` (the piece's share
/// of the array: pieces cut it into equal runs, so neither bound is stored), predicted as
/// `start + intercept + slope · (key − first_key)`. Slope and intercept are kept as `f32`: a prediction
/// spans at most a group's positions, so their rounding moves it by far less than one position, and the
/// group's error bound is measured with the rounded model anyway.
#[derive(Debug, Clone, Copy, Default)]
pub struct Piece {
    first_key: u64,
    slope: f32,
    intercept: f32,
}

impl Piece {
    /// The prediction of `key` relative to the piece's start (never negative).
    #[inline]
    fn offset(&self, key: u64) -> usize {
        let p = f64::from(self.slope) * key.saturating_sub(self.first_key) as f64
            + f64::from(self.intercept);
        if p <= 0.0 { 0 } else { p as usize }
    }
}

/// A group's model pieces, inline: `count` pieces over runs of `per` positions, and the largest error of
/// any of them.
#[derive(Debug, Clone, Copy)]
pub struct Pieces {
    pieces: [Piece; MAX_MODELS],
    /// Positions per piece (the last one may have fewer).
    per: u32,
    count: u8,
    err: u8,
}

impl Pieces {
    fn live(&self) -> &[Piece] {
        self.pieces
            .get(..usize::from(self.count))
            .unwrap_or(&self.pieces)
    }
}

/// How a group searches its key array.
#[derive(Debug, Clone)]
pub enum GroupSearch {
    /// Up to [`MAX_MODELS`] linear pieces meeting the error bound (inline: no pointer to chase).
    Models(Pieces),
    /// The fallback node's upper level (inline: no pointer to chase).
    Fallback(Upper),
}

/// The fallback node's upper level: the first key of every block of `fanout` keys, at most
/// [`UPPER_KEYS`] of them, inline in the group header (the bytes the pieces take), so a lookup goes from
/// the header straight to the block. `fanout` is the array's length over [`UPPER_KEYS`], at least
/// [`FALLBACK_FANOUT`].
#[derive(Debug, Clone, Copy)]
pub struct Upper {
    firsts: [u64; UPPER_KEYS],
    count: u8,
    fanout: u32,
}

impl Upper {
    fn build(keys: &[u64]) -> Upper {
        let fanout = keys.len().div_ceil(UPPER_KEYS).max(FALLBACK_FANOUT);
        let mut firsts = [0; UPPER_KEYS];
        let mut count = 0u8;
        for (slot, &k) in firsts.iter_mut().zip(keys.iter().step_by(fanout)) {
            *slot = k;
            count += 1;
        }
        Upper {
            firsts,
            count,
            // Only an array of over 2^36 keys (far beyond `max_group`) could clamp here; the search's
            // check of its answer would then fall back to a binary search.
            fanout: u32::try_from(fanout).unwrap_or(u32::MAX),
        }
    }

    fn live(&self) -> &[u64] {
        self.firsts
            .get(..usize::from(self.count))
            .unwrap_or(&self.firsts)
    }
}

/// The first position in `keys[lo..hi]` whose key is ≥ `key` (`hi` if none).
#[inline]
fn lower_bound_in(keys: &[u64], lo: usize, hi: usize, key: u64) -> usize {
    lo + keys
        .get(lo..hi)
        .map_or(0, |w| w.partition_point(|&k| k < key))
}

/// As [`lower_bound_in`], by 8-ary search: each round compares `key` with 7 evenly spaced keys of the range
/// and keeps the part between the last smaller one and the next; those 7 loads do not depend on each
/// other, so their cache misses overlap, and a range of `n` keys costs about log8(n / 16) rounds of
/// memory latency instead of log2(n) dependent probes (the fallback node's blocks are cold).
#[inline]
fn lower_bound_kary(keys: &[u64], mut lo: usize, mut hi: usize, key: u64) -> usize {
    hi = hi.min(keys.len());
    while hi > lo + 16 {
        let step = (hi - lo) / 8;
        // Sorted keys: the probes below `key` are a prefix, of `c` probes.
        let c = (1..8)
            .filter(|&j| keys.get(lo + j * step).is_some_and(|&k| k < key))
            .count();
        // The answer lies after probe `c` (if c > 0) and at or before probe `c + 1` (or `hi`).
        let next_hi = if c < 7 { lo + (c + 1) * step } else { hi };
        if c > 0 {
            lo += c * step + 1;
        }
        hi = next_hi;
    }
    lower_bound_in(keys, lo, hi, key)
}

/// As [`lower_bound_in`], searching outward from the predicted position `pred` in steps of 1, 2, 4, …
/// and then by binary search within the last step (exponential search): a prediction `d` positions off
/// costs about 2·log2(d) probes, mostly in the cache lines next to `pred`, instead of a binary search
/// of the whole window.
#[inline]
fn lower_bound_near(keys: &[u64], lo: usize, hi: usize, pred: usize, key: u64) -> usize {
    if lo >= hi {
        return lo;
    }
    let pred = pred.clamp(lo, hi - 1);
    let mut step = 1;
    if keys.get(pred).is_some_and(|&k| k < key) {
        // The answer is in (below, hi].
        let mut below = pred;
        loop {
            let next = below + step;
            if next >= hi {
                return lower_bound_in(keys, below + 1, hi, key);
            }
            if keys.get(next).is_none_or(|&k| k >= key) {
                return lower_bound_in(keys, below + 1, next, key);
            }
            below = next;
            step *= 2;
        }
    }
    // The answer is in [lo, above].
    let mut above = pred;
    loop {
        match above.checked_sub(step).filter(|&next| next >= lo) {
            None => return lower_bound_in(keys, lo, above, key),
            Some(next) if keys.get(next).is_some_and(|&k| k < key) => {
                return lower_bound_in(keys, next + 1, above, key);
            }
            Some(next) => above = next,
        }
        step *= 2;
    }
}

impl GroupSearch {
    /// Trains the search of `keys`: [`MAX_MODELS`] pieces (fewer for a small array: one per
    /// [`KEYS_PER_PIECE`] keys at least) if they meet the error bound, else the fallback node. Pieces cost
    /// no memory beyond the group header whatever their number, and more of them predict closer (on
    /// books-like keys the mean error is about 8 positions with four pieces and 4.6 with eight), so a
    /// group always takes as many as it can use.
    pub fn train(keys: &[u64]) -> GroupSearch {
        let count = (keys.len() / KEYS_PER_PIECE).clamp(1, MAX_MODELS);
        match Self::pieces(keys, count) {
            Some(p) => GroupSearch::Models(p),
            None => GroupSearch::Fallback(Upper::build(keys)),
        }
    }

    fn pieces(keys: &[u64], count: usize) -> Option<Pieces> {
        let per = keys.len().div_ceil(count).max(1);
        let mut out = Pieces {
            pieces: [Piece::default(); MAX_MODELS],
            per: u32::try_from(per).ok()?,
            count: 0,
            err: 0,
        };
        for (chunk, slot) in keys.chunks(per).zip(out.pieces.iter_mut()) {
            let (model, _) = Linear::fit(chunk, 0);
            let piece = Piece {
                first_key: model.origin,
                slope: model.slope as f32,
                intercept: model.intercept as f32,
            };
            let err = chunk
                .iter()
                .enumerate()
                .map(|(i, &k)| piece.offset(k).abs_diff(i))
                .max()
                .unwrap_or(0);
            if err > ERROR_BOUND {
                return None;
            }
            *slot = piece;
            out.count += 1;
            out.err = out.err.max(u8::try_from(err).ok()?);
        }
        Some(out)
    }

    /// True when the group fell back to the B+-tree-like node.
    pub fn is_fallback(&self) -> bool {
        matches!(self, GroupSearch::Fallback(_))
    }

    /// Bytes of the models beyond the group header: none (the pieces and the fallback node's upper level
    /// live inline in it).
    pub fn memory(&self) -> usize {
        0
    }

    /// The first position of `keys` (the array this search was trained on) whose key is ≥ `key`.
    pub fn lower_bound(&self, keys: &[u64], key: u64) -> usize {
        let n = keys.len();
        let pos = match self {
            GroupSearch::Models(pieces) => {
                let (pred, start, end) = Self::piece_prediction(pieces, key, n);
                let err = usize::from(pieces.err);
                let lo = pred.saturating_sub(err).max(start);
                let hi = (pred + err + 1).min(end);
                lower_bound_near(keys, lo, hi, pred, key)
            }
            GroupSearch::Fallback(upper) => {
                let b = upper
                    .live()
                    .partition_point(|&k| k <= key)
                    .saturating_sub(1);
                let fanout = upper.fanout as usize;
                let (lo, hi) = ((b * fanout).min(n), ((b + 1) * fanout + 1).min(n));
                lower_bound_kary(keys, lo, hi, key)
            }
        };
        let below_ok = pos == 0 || keys.get(pos - 1).is_some_and(|&k| k < key);
        let above_ok = pos == n || keys.get(pos).is_some_and(|&k| k >= key);
        if below_ok && above_ok {
            pos
        } else {
            lower_bound_in(keys, 0, n, key)
        }
    }

    /// The piece covering `key` in an array of `n` keys: its prediction (clamped to the piece), start and
    /// end.
    #[inline]
    fn piece_prediction(pieces: &Pieces, key: u64, n: usize) -> (usize, usize, usize) {
        let live = pieces.live();
        let i = live
            .partition_point(|p| p.first_key <= key)
            .saturating_sub(1);
        let per = pieces.per as usize;
        let start = (i * per).min(n);
        let end = (start + per).min(n);
        let pred = live.get(i).map_or(start, |p| start + p.offset(key));
        (pred.clamp(start, end), start, end)
    }

    /// The position the models predict for `key` in an array of `n` keys (`None` on the fallback node,
    /// whose blocks are searched from their start): callers prefetch the record there while the search
    /// runs.
    #[inline]
    pub fn predict(&self, key: u64, n: usize) -> Option<usize> {
        match self {
            GroupSearch::Models(pieces) => Some(Self::piece_prediction(pieces, key, n).0),
            GroupSearch::Fallback(_) => None,
        }
    }

    /// The position of `key` in `keys`, if present.
    #[inline]
    pub fn find(&self, keys: &[u64], key: u64) -> Option<usize> {
        let pos = self.lower_bound(keys, key);
        (keys.get(pos) == Some(&key)).then_some(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_all(keys: &[u64]) -> GroupSearch {
        let s = GroupSearch::train(keys);
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(s.find(keys, k), Some(i));
            if k < u64::MAX {
                assert_eq!(s.lower_bound(keys, k + 1), i + 1);
            }
        }
        assert_eq!(s.lower_bound(keys, 0), 0);
        s
    }

    #[test]
    fn exponential_search_agrees_with_binary_search() {
        let keys: Vec<u64> = (0..40u64).map(|i| 5 + i * 10 + i % 5).collect();
        let n = keys.len();
        for lo in (0..=n).step_by(3) {
            for hi in (lo..=n).step_by(2) {
                for pred in lo..=hi + 1 {
                    for key in (0..keys[n - 1] + 3).step_by(3) {
                        assert_eq!(
                            lower_bound_near(&keys, lo, hi, pred, key),
                            lower_bound_in(&keys, lo, hi, key),
                            "lo {lo} hi {hi} pred {pred} key {key}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn pieces_cover_arrays_of_every_length() {
        let mut x = 12345u64;
        let mut k = 0u64;
        let keys: Vec<u64> = (0..5000)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                k += 1 + (x >> 54);
                k
            })
            .collect();
        for n in [
            1, 2, 63, 64, 65, 127, 128, 129, 511, 513, 1000, 4095, 4097, 5000,
        ] {
            let s = check_all(&keys[..n]);
            let GroupSearch::Models(p) = &s else {
                panic!("{n} keys fell back");
            };
            assert_eq!(
                usize::from(p.count),
                (n / KEYS_PER_PIECE).clamp(1, MAX_MODELS)
            );
            assert!(usize::from(p.err) <= ERROR_BOUND);
            // Keys between and around the array's keys.
            for (i, w) in keys[..n].windows(2).enumerate() {
                if w[1] > w[0] + 1 {
                    assert_eq!(s.lower_bound(&keys[..n], w[0] + 1), i + 1);
                }
            }
            assert_eq!(s.lower_bound(&keys[..n], u64::MAX), n);
        }
    }

    #[test]
    fn kary_search_agrees_with_binary_search() {
        let keys: Vec<u64> = (0..700u64).map(|i| 3 + i * 4 + i % 3).collect();
        let n = keys.len();
        for lo in (0..=n).step_by(37) {
            for hi in (lo..=n).step_by(23).chain([n]) {
                for key in 0..keys[n - 1] + 6 {
                    assert_eq!(
                        lower_bound_kary(&keys, lo, hi, key),
                        lower_bound_in(&keys, lo, hi, key),
                        "lo {lo} hi {hi} key {key}"
                    );
                }
            }
        }
    }

    #[test]
    fn eight_pieces_fit_two_cache_lines() {
        assert_eq!(std::mem::size_of::<Piece>(), 16);
        assert!(std::mem::size_of::<GroupSearch>() <= 2 * 64 + 16);
    }

    #[test]
    fn smooth_keys_train_one_model_and_hard_keys_fall_back() {
        let smooth: Vec<u64> = (0..4096).map(|i| 1000 + i * 7).collect();
        assert!(matches!(check_all(&smooth), GroupSearch::Models(p) if p.count == 8 && p.err <= 1));
        // Clusters of keys with huge gaps: no four lines fit within 32 positions.
        let mut hard = Vec::new();
        for c in 0..64u64 {
            for j in 0..64u64 {
                hard.push((c * c * c) << 30 | j);
            }
        }
        assert!(check_all(&hard).is_fallback());
        check_all(&[5]);
        check_all(&[u64::MAX - 1, u64::MAX]);
        assert_eq!(GroupSearch::train(&[]).lower_bound(&[], 9), 0);
    }
}
