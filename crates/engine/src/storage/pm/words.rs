//! Byte copies in and out of memory seen as aligned 8-byte atomic words.
//!
//! Accessing a shared mapping only through same-size atomics is what keeps racing accesses from being
//! undefined behaviour: Rust's memory model forbids racing non-atomic accesses and racing atomics of
//! different sizes, so every access here — whole words, the edges of unaligned ranges, the commit store —
//! is an `AtomicU64` operation on an aligned word. A store that covers a word only partly merges its bytes
//! with a compare-exchange loop, so bytes of the same word written concurrently by another thread are kept.
//! A word's bytes in memory are its native-endian bytes.
//!
//! Callers check bounds first; an index past the end here is a bug in this module and panics.

use std::sync::atomic::{AtomicU64, Ordering};

use super::arch;

/// Calls `f(word index, first byte in the word, bytes taken, position in the caller's buffer)` for every
/// word that overlaps `[off, off + len)`, in address order.
fn for_each_word(off: usize, len: usize, mut f: impl FnMut(usize, usize, usize, usize)) {
    let mut pos = off;
    let mut done = 0;
    while done < len {
        let in_word = pos % 8;
        let take = (8 - in_word).min(len - done);
        f(pos / 8, in_word, take, done);
        pos += take;
        done += take;
    }
}

/// Copies `buf.len()` bytes starting at byte `off` into `buf` (relaxed loads).
pub(crate) fn read(words: &[AtomicU64], off: usize, buf: &mut [u8]) {
    for_each_word(off, buf.len(), |w, at, take, pos| {
        let bytes = words[w].load(Ordering::Relaxed).to_ne_bytes();
        buf[pos..pos + take].copy_from_slice(&bytes[at..at + take]);
    });
}

/// Stores `data` at byte `off` (relaxed stores; partial words merged atomically).
pub(crate) fn write(words: &[AtomicU64], off: usize, data: &[u8]) {
    if off.is_multiple_of(8) && data.len().is_multiple_of(8) {
        // Whole words (a hash log record, a slot): one store each, without the per-word split of the
        // general path (a 32 B record cost 170 instructions through it).
        let first = off / 8;
        for (word, src) in words[first..first + data.len() / 8]
            .iter()
            .zip(data.chunks_exact(8))
        {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(src);
            word.store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
        }
        return;
    }
    for_each_word(off, data.len(), |w, at, take, pos| {
        let src = &data[pos..pos + take];
        if take == 8 {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(src);
            words[w].store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
        } else {
            // The closure always returns `Some`, so the update cannot fail.
            let _ = words[w].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                let mut bytes = old.to_ne_bytes();
                bytes[at..at + take].copy_from_slice(src);
                Some(u64::from_ne_bytes(bytes))
            });
        }
    });
}

/// Stores `data` at byte `off` with non-temporal stores. `off` and `data.len()` are multiples of 8.
pub(crate) fn write_nt(words: &[AtomicU64], off: usize, data: &[u8]) {
    debug_assert!(off.is_multiple_of(8) && data.len().is_multiple_of(8));
    for (i, chunk) in data.chunks_exact(8).enumerate() {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(chunk);
        arch::store_nt(&words[off / 8 + i], u64::from_ne_bytes(bytes));
    }
}

/// The atomic word that holds byte `off` (an aligned word when `off` is a multiple of 8).
pub(crate) fn word_at(words: &[AtomicU64], off: usize) -> &AtomicU64 {
    &words[off / 8]
}

/// A little-endian value as the native word whose memory bytes are those little-endian bytes.
pub(crate) fn le_to_word(value: u64) -> u64 {
    u64::from_ne_bytes(value.to_le_bytes())
}

/// The inverse of [`le_to_word`].
pub(crate) fn word_to_le(word: u64) -> u64 {
    u64::from_le_bytes(word.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_copies_round_trip_and_keep_neighbours() {
        let words: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(u64::MAX)).collect();
        let data: Vec<u8> = (1..=21).collect();
        write(&words, 5, &data);
        let mut all = [0u8; 64];
        read(&words, 0, &mut all);
        assert_eq!(&all[..5], &[0xff; 5]);
        assert_eq!(&all[5..26], &data[..]);
        assert_eq!(&all[26..], &[0xff; 38][..]);
        let mut mid = [0u8; 3];
        read(&words, 7, &mut mid);
        assert_eq!(mid, [3, 4, 5]);
        write_nt(&words, 32, &[9u8; 16]);
        read(&words, 30, &mut all[..20]);
        assert_eq!(
            &all[..20],
            &[
                0xff, 0xff, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 0xff, 0xff
            ]
        );
        assert_eq!(
            word_to_le(le_to_word(0x0102_0304_0506_0708)),
            0x0102_0304_0506_0708
        );
        // Whole words (the fast path) land in place too.
        let whole: Vec<u8> = (101..=116).collect();
        write(&words, 40, &whole);
        read(&words, 32, &mut all[..32]);
        assert_eq!(&all[..8], &[9; 8]);
        assert_eq!(&all[8..24], &whole[..]);
        assert_eq!(&all[24..32], &[0xff; 8]);
    }
}
