//! The PM layout: constants, the hash and fingerprint of a key, the superblock ([`Geometry`]), the layout of
//! one table generation ([`Gen`]), and the codecs of the words that commit data: a chunk's commit word
//! ([`ChunkHead`]), a chunk's identity word, and a compaction redo's commit word.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::format::{corruption_in, le, read_superblock, write_superblock};
use crate::error::{Error, Result};
use crate::storage::pm::{CACHE_LINE, Pm, XPLINE};

/// Bytes of a P-bucket by default: 16 chunks of one XPLine each. A region records its own size
/// ([`Geometry::bucket_bytes`], `HashConfig::pbucket_bytes`): a power of two from [`MIN_BUCKET_BYTES`] to
/// [`MAX_BUCKET_BYTES`] (the P-bucket sweep of Exp 12).
pub const BUCKET_BYTES: u64 = 4096;
/// Smallest P-bucket: 4 chunks.
pub const MIN_BUCKET_BYTES: u64 = 1024;
/// Largest P-bucket: 64 chunks (960 home slots).
pub const MAX_BUCKET_BYTES: u64 = 16384;
/// Home chunks of a default P-bucket, and the home chunks whose fingerprints and live bits the DRAM
/// bucket holds inline (a larger P-bucket keeps those of its other home chunks in the bucket's
/// extension, sized for its generation: `bucket::Ext`). A generation's own count is [`Gen::home_chunks`].
pub const HOME_CHUNKS: usize = 16;
/// Most home chunks of a P-bucket (of [`MAX_BUCKET_BYTES`]).
pub const MAX_HOME_CHUNKS: usize = (MAX_BUCKET_BYTES / XPLINE) as usize;
/// Bytes of a chunk's header: the commit word and the identity word.
pub const CHUNK_HEADER: u64 = 16;
/// Slots (16 B: 8 B key + 8 B value) of a chunk: 15 after its 16 B header. Also the D-bucket's capacity.
pub const CHUNK_SLOTS: usize = 15;
/// Home slots whose fingerprints and live bits the DRAM bucket holds inline (all of a default P-bucket's).
pub const HOME_SLOTS: usize = HOME_CHUNKS * CHUNK_SLOTS;
/// Pool chunks a bucket may link.
pub const MAX_OVERFLOW: usize = 14;
/// Longest chain of a bucket, in chunks: its home chunks and up to [`MAX_OVERFLOW`] pool chunks
/// ([`Gen::max_chain`]; 30 for the default P-bucket, 78 for the largest).
pub const MAX_CHAIN: usize = MAX_HOME_CHUNKS + MAX_OVERFLOW;
/// Bytes of a slot.
pub const SLOT_BYTES: u64 = 16;
/// Bytes of the superblock (one page, so that generations start 4 KiB-aligned).
pub const SUPER_BYTES: u64 = 4096;
/// Bytes of a log record.
pub const RECORD_BYTES: u64 = 32;
/// Most collecting logs (one per concurrent writer).
pub const MAX_LOGS: u64 = 62;
/// Largest table: 2^32 buckets (bucket numbers fit a pool chunk's identity word).
pub const MAX_LOG2_BUCKETS: u64 = 32;
/// Smallest and largest configured log, in 64 B lines.
pub const MIN_LOG_LINES: u64 = 8;
pub const MAX_LOG_LINES: u64 = 1 << 32;
/// Bit 63 of the superblock's log-lines word: every log is exactly `log_lines` (no growth with the table).
/// Regions written before this flag existed have it clear (logs that grow), so they open unchanged.
pub const FIXED_LOG_FLAG: u64 = 1 << 63;
/// Log records per bucket, summed over the logs of a generation: the log holds every staged record, so its
/// size bounds how full a D-bucket gets before log space forces it out (16: most flushes are of full or
/// nearly full D-buckets; 256 B of log per 4 KiB P-bucket per 8 records).
pub const LOG_RECORDS_PER_BUCKET: u64 = 16;
/// Largest sequence number of a bucket (45 bits of a chunk's commit word).
pub const MAX_SEQ: u64 = (1 << 45) - 1;

pub const MAGIC: u64 = u64::from_le_bytes(*b"STRHASH1");
pub const GEN_MAGIC: u64 = u64::from_le_bytes(*b"STRHGEN2");
pub const VERSION: u64 = 2;

// Superblock fields (byte offsets). Bytes 0..56 are immutable and covered by the checksum at 56.
pub const SB_MAGIC: u64 = 0;
pub const SB_VERSION: u64 = 8;
pub const SB_BUCKET_BYTES: u64 = 16;
pub const SB_LOGS: u64 = 24;
pub const SB_LOG_LINES: u64 = 32;
pub const SB_NONCE: u64 = 40;
pub const SB_REGION_LEN: u64 = 48;
pub const SB_CHECK: u64 = 56;
/// The root word: offset of the current generation (an 8 B atomic store switches generations).
pub const SB_ROOT: u64 = 64;

/// Damage in the region, reported under the name `<pm hash index>`.
pub fn corruption(offset: u64, detail: impl Into<String>) -> Error {
    corruption_in("<pm hash index>", offset, detail)
}

/// 64-bit hash of a key: the low bits pick the bucket, the top 16 bits are the fingerprint.
#[inline]
pub fn hash(key: u64) -> u64 {
    xxh3_64_with_seed(&key.to_le_bytes(), 0x5EED_4A54)
}

/// The 16-bit fingerprint of hash `h` (bits 48..64, never part of a bucket number).
#[inline]
pub fn fingerprint(h: u64) -> u16 {
    (h >> 48) as u16
}

pub fn round_up(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

fn mix(parts: &[u64], seed: u64) -> u64 {
    let mut b = [0u8; 40];
    for (i, p) in parts.iter().take(5).enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&p.to_le_bytes());
    }
    xxh3_64_with_seed(&b[..parts.len().min(5) * 8], seed)
}

/// The immutable geometry recorded in the superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes of a P-bucket (a power of two in `MIN_BUCKET_BYTES..=MAX_BUCKET_BYTES`).
    pub bucket_bytes: u64,
    /// Collecting logs of every generation (one per concurrent writer).
    pub logs: u64,
    /// Smallest log, in 64 B lines (a generation's logs grow with its bucket count unless `fixed_log`).
    pub log_lines: u64,
    /// Every log is exactly `log_lines` whatever the table's size (the collecting-log experiment, Exp 11):
    /// recorded as [`FIXED_LOG_FLAG`] in the superblock's log-lines word.
    pub fixed_log: bool,
    pub nonce: u64,
    pub region_len: u64,
}

impl Geometry {
    /// Writes the superblock's immutable part and its checksum (not persisted).
    pub fn write<P: Pm>(&self, pm: &P) -> Result<()> {
        write_superblock(
            pm,
            SB_CHECK,
            &[
                (SB_MAGIC, MAGIC),
                (SB_VERSION, VERSION),
                (SB_BUCKET_BYTES, self.bucket_bytes),
                (SB_LOGS, self.logs),
                (
                    SB_LOG_LINES,
                    self.log_lines | if self.fixed_log { FIXED_LOG_FLAG } else { 0 },
                ),
                (SB_NONCE, self.nonce),
                (SB_REGION_LEN, self.region_len),
            ],
        )
    }

    /// Reads and validates the superblock of `pm`.
    pub fn read<P: Pm>(pm: &P) -> Result<Geometry> {
        let b = read_superblock(pm, SUPER_BYTES, SB_CHECK, MAGIC, |at, what| {
            corruption(at, what)
        })?;
        let word = |at: u64| le(&b[at as usize..]);
        let bucket_bytes = word(SB_BUCKET_BYTES);
        if word(SB_VERSION) != VERSION || check_bucket_bytes(bucket_bytes).is_err() {
            return Err(Error::Incompatible(format!(
                "hash index version {} with {bucket_bytes} B buckets, expected {VERSION} and a power of two \
                 in {MIN_BUCKET_BYTES}..={MAX_BUCKET_BYTES}",
                word(SB_VERSION),
            )));
        }
        let g = Geometry {
            bucket_bytes,
            logs: word(SB_LOGS),
            log_lines: word(SB_LOG_LINES) & !FIXED_LOG_FLAG,
            fixed_log: word(SB_LOG_LINES) & FIXED_LOG_FLAG != 0,
            nonce: word(SB_NONCE),
            region_len: word(SB_REGION_LEN),
        };
        g.validate(pm.len())
            .map_err(|e| corruption(0, e.to_string()))?;
        Ok(g)
    }

    /// `InvalidArgument` unless the geometry is in range for a region of `len` bytes.
    pub fn validate(&self, len: u64) -> Result<()> {
        check_bucket_bytes(self.bucket_bytes)?;
        if !(1..=MAX_LOGS).contains(&self.logs) {
            return Err(Error::invalid(format!(
                "{} logs (1..={MAX_LOGS})",
                self.logs
            )));
        }
        if !(MIN_LOG_LINES..=MAX_LOG_LINES).contains(&self.log_lines) {
            return Err(Error::invalid(format!(
                "log of {} lines ({MIN_LOG_LINES}..={MAX_LOG_LINES})",
                self.log_lines
            )));
        }
        if self.region_len != len || SUPER_BYTES >= len {
            return Err(Error::invalid(format!(
                "region of {len} bytes (recorded {}) has no room after the superblock",
                self.region_len
            )));
        }
        Ok(())
    }
}

/// `InvalidArgument` unless `bytes` is a P-bucket size this build supports: a power of two in
/// `MIN_BUCKET_BYTES..=MAX_BUCKET_BYTES` (4 to 64 chunks).
pub fn check_bucket_bytes(bytes: u64) -> Result<()> {
    if bytes.is_power_of_two() && (MIN_BUCKET_BYTES..=MAX_BUCKET_BYTES).contains(&bytes) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "P-bucket of {bytes} bytes (a power of two in {MIN_BUCKET_BYTES}..={MAX_BUCKET_BYTES})"
        )))
    }
}

/// One table generation in PM, at a 4 KiB-aligned offset:
/// `header (256 B) · tail words (64 B per log) · pad to 4 KiB · redo areas (one per log, [`Gen::scratch_bytes`]:
/// 8 KiB for P-buckets up to 4 KiB, 12 KiB for 8 KiB, 24 KiB for 16 KiB) · logs (each
/// rounded to 4 KiB) · pool chunks (256 B each, rounded to 4 KiB) · P-buckets (`bucket_bytes` each)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gen {
    pub off: u64,
    /// Generation number: 0 at create, +1 per doubling. Salts the identity of chunks, logs and redos.
    pub number: u64,
    pub log2: u64,
    pub logs: u64,
    /// Records per log.
    pub log_records: u64,
    /// Pool chunks (overflow chunks shared by the buckets).
    pub pool_chunks: u64,
    /// Home chunks of a P-bucket (from the superblock's bucket size).
    pub home: u64,
}

const GEN_HEADER_WORDS: usize = 7;

impl Gen {
    /// The generation of 2^log2 buckets numbered `number` at `off`, its logs and pool sized for it (each log
    /// `log_lines` when `fixed_log`, else at least that and [`LOG_RECORDS_PER_BUCKET`] per bucket in all).
    pub fn plan(geo: &Geometry, off: u64, number: u64, log2: u64) -> Gen {
        let buckets = 1u64 << log2;
        let per_log = if geo.fixed_log {
            0
        } else {
            (LOG_RECORDS_PER_BUCKET * buckets).div_ceil(geo.logs)
        };
        Gen {
            off,
            number,
            log2,
            logs: geo.logs,
            log_records: round_up(per_log.max(geo.log_lines * 2), XPLINE / RECORD_BYTES),
            pool_chunks: (buckets / 8).max(16),
            home: geo.bucket_bytes / XPLINE,
        }
    }
    /// Home chunks of a P-bucket.
    #[inline]
    pub fn home_chunks(&self) -> usize {
        self.home as usize
    }
    /// Home slots of a bucket.
    #[inline]
    pub fn home_slots(&self) -> usize {
        self.home_chunks() * CHUNK_SLOTS
    }
    /// Longest chain: the home chunks and up to [`MAX_OVERFLOW`] pool chunks.
    #[inline]
    pub fn max_chain(&self) -> usize {
        self.home_chunks() + MAX_OVERFLOW
    }
    /// Bytes of a P-bucket.
    #[inline]
    pub fn bucket_bytes(&self) -> u64 {
        self.home * XPLINE
    }
    pub fn buckets(&self) -> u64 {
        1 << self.log2
    }
    pub fn mask(&self) -> u64 {
        self.buckets() - 1
    }
    fn header_span(&self) -> u64 {
        round_up(XPLINE + self.logs * CACHE_LINE, 4096)
    }
    /// Tail word of log `i`: the first position replay starts at.
    pub fn tail_word(&self, i: u64) -> u64 {
        self.off + XPLINE + i * CACHE_LINE
    }
    /// Bytes of a redo area's header: its commit word, the bucket, and the target offset of each image
    /// (up to [`Gen::max_chain`]), in whole XPLines (one for P-buckets up to 4 KiB).
    pub fn redo_header_bytes(&self) -> u64 {
        round_up(16 + 8 * self.max_chain() as u64, XPLINE)
    }
    /// Bytes of a redo area: its header and up to [`Gen::max_chain`] chunk images, in whole 4 KiB pages.
    pub fn scratch_bytes(&self) -> u64 {
        round_up(
            self.redo_header_bytes() + self.max_chain() as u64 * XPLINE,
            4096,
        )
    }
    /// Redo area of log `i` (used by compactions done while holding that log).
    pub fn scratch(&self, i: u64) -> u64 {
        self.off + self.header_span() + i * self.scratch_bytes()
    }
    fn log_span(&self) -> u64 {
        round_up(self.log_records * RECORD_BYTES, 4096)
    }
    pub fn log_base(&self, i: u64) -> u64 {
        self.scratch(self.logs) + i * self.log_span()
    }
    pub fn pool_off(&self) -> u64 {
        self.log_base(self.logs)
    }
    pub fn pool_chunk(&self, i: u64) -> u64 {
        self.pool_off() + i * XPLINE
    }
    fn buckets_off(&self) -> u64 {
        self.pool_off() + round_up(self.pool_chunks * XPLINE, 4096)
    }
    pub fn bucket_off(&self, b: u64) -> u64 {
        self.buckets_off() + b * self.bucket_bytes()
    }
    /// Offset of home chunk `c` (below `home`) of bucket `b`.
    pub fn home_chunk(&self, b: u64, c: usize) -> u64 {
        self.bucket_off(b) + c as u64 * XPLINE
    }
    /// End of the generation, rounded up to 4 KiB (where the next generation may start; P-buckets of 1 or
    /// 2 KiB may end mid-page).
    pub fn end(&self) -> u64 {
        round_up(self.bucket_off(self.buckets()), 4096)
    }
    pub fn bytes(&self) -> u64 {
        self.end() - self.off
    }
    /// Seed of log `i`'s record checksums: a record of another generation, index or log never validates.
    pub fn log_seed(&self, nonce: u64, i: u64) -> u64 {
        mix(&[nonce, self.number, i, 0x4C4F_47AA], 17)
    }
    /// Identity word of home chunk `c` of bucket `b` (never 0).
    pub fn home_tag(&self, nonce: u64, b: u64, c: usize) -> u64 {
        mix(&[nonce, self.number, b, c as u64], 29) | 1
    }
    /// Identity word of a pool chunk holding position `pos` (`home..max_chain`) of bucket `b`'s chain:
    /// `b << 32 | pos << 16 | check` (the pool is zeroed when the generation is made, so a stale identity
    /// never appears; the check catches damage).
    pub fn pool_tag(&self, nonce: u64, b: u64, pos: usize) -> u64 {
        b << 32 | (pos as u64) << 16 | (mix(&[nonce, self.number, b, pos as u64], 31) & 0xFFFF)
    }
    /// The owner `(bucket, position)` a pool chunk's identity word names, if it is well formed.
    pub fn pool_owner(&self, nonce: u64, word: u64) -> Option<(u64, usize)> {
        let (b, pos) = (word >> 32, (word >> 16 & 0xFFFF) as usize);
        let ok = b < self.buckets()
            && (self.home_chunks()..self.max_chain()).contains(&pos)
            && self.pool_tag(nonce, b, pos) == word;
        ok.then_some((b, pos))
    }
    /// Commit word of redo area `i` when it holds `n` chunk images (n in 1..=max_chain).
    pub fn redo_word(&self, nonce: u64, i: u64, n: u64) -> u64 {
        (mix(&[nonce, self.number, i, 0x5245_444F], 37) & !0xFF) | n
    }

    fn header(&self, nonce: u64) -> [u8; GEN_HEADER_WORDS * 8] {
        let words = [
            GEN_MAGIC,
            self.number,
            self.log2,
            self.logs,
            self.log_records,
            self.pool_chunks,
        ];
        let mut h = [0u8; GEN_HEADER_WORDS * 8];
        for (i, w) in words.iter().enumerate() {
            h[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        let check = xxh3_64_with_seed(&h[..48], nonce ^ self.off);
        h[48..].copy_from_slice(&check.to_le_bytes());
        h
    }

    /// Writes the header (not persisted).
    pub fn write_header<P: Pm>(&self, pm: &P, nonce: u64) -> Result<()> {
        pm.write(self.off, &self.header(nonce))
    }

    /// The generation the root word `root` points to, validated against the geometry and the region.
    pub fn read<P: Pm>(pm: &P, geo: &Geometry, root: u64) -> Result<Gen> {
        if root < SUPER_BYTES || !root.is_multiple_of(4096) || root >= pm.len() {
            return Err(corruption(
                SB_ROOT,
                format!("generation root {root} out of range"),
            ));
        }
        let mut h = [0u8; GEN_HEADER_WORDS * 8];
        pm.read(root, &mut h)?;
        let word = |i: usize| le(&h[i * 8..]);
        let (log2, logs, log_records, pool_chunks) = (word(2), word(3), word(4), word(5));
        let sane = log2 <= MAX_LOG2_BUCKETS
            && logs == geo.logs
            && (geo.log_lines * 2..=1 << 40).contains(&log_records)
            && log_records.is_multiple_of(XPLINE / RECORD_BYTES)
            && (1..=1 << 36).contains(&pool_chunks);
        let g = Gen {
            off: root,
            number: word(1),
            log2,
            logs,
            log_records,
            pool_chunks,
            home: geo.bucket_bytes / XPLINE,
        };
        if !sane || g.header(geo.nonce) != h {
            return Err(corruption(
                root,
                "bad generation header (magic, fields or checksum)",
            ));
        }
        if g.end() > pm.len() {
            return Err(corruption(
                root,
                format!("generation of 2^{log2} buckets ends past the region"),
            ));
        }
        Ok(g)
    }
}

/// A chunk's commit word: `count` (bits 0..4: slots in use, a prefix of the chunk; 0 = empty), the
/// tombstone bit of each slot (bits 4..19) and the bucket's sequence number at the commit (bits 19..64):
/// every record of the bucket with a sequence number up to it is in the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkHead(pub u64);

impl ChunkHead {
    pub fn new(count: usize, tomb: u16, seq: u64) -> ChunkHead {
        debug_assert!(count <= CHUNK_SLOTS && seq <= MAX_SEQ && tomb >> CHUNK_SLOTS == 0);
        ChunkHead(count as u64 | (tomb as u64) << 4 | seq << 19)
    }
    pub fn count(self) -> usize {
        (self.0 & 0xF) as usize
    }
    pub fn tomb(self) -> u16 {
        (self.0 >> 4) as u16 & 0x7FFF
    }
    pub fn seq(self) -> u64 {
        self.0 >> 19
    }
    /// `Corruption` at `at` unless the word is well formed (count ≤ 15, tombstones only on used slots).
    pub fn validate(self, at: u64) -> Result<()> {
        let used = (1u32 << self.count().min(CHUNK_SLOTS)) - 1;
        if self.count() > CHUNK_SLOTS || u32::from(self.tomb()) & !used != 0 {
            return Err(corruption(
                at,
                format!("chunk commit word {:#x} malformed", self.0),
            ));
        }
        Ok(())
    }
}

/// Offset of slot `i` of the chunk at `chunk`.
#[inline]
pub fn slot_off(chunk: u64, i: usize) -> u64 {
    chunk + CHUNK_HEADER + i as u64 * SLOT_BYTES
}

/// A chunk image: commit word, identity word, then `(key, value)` for each used slot.
pub fn chunk_image(head: ChunkHead, tag: u64, slots: &[(u64, u64)]) -> [u8; XPLINE as usize] {
    let mut img = [0u8; XPLINE as usize];
    img[..8].copy_from_slice(&head.0.to_le_bytes());
    img[8..16].copy_from_slice(&tag.to_le_bytes());
    for (i, &(k, v)) in slots.iter().enumerate() {
        let at = (CHUNK_HEADER + i as u64 * SLOT_BYTES) as usize;
        img[at..at + 8].copy_from_slice(&k.to_le_bytes());
        img[at + 8..at + 16].copy_from_slice(&v.to_le_bytes());
    }
    img
}

/// Key and value of slot `i` of a chunk image.
#[inline]
pub fn image_slot(img: &[u8], i: usize) -> (u64, u64) {
    let at = (CHUNK_HEADER + i as u64 * SLOT_BYTES) as usize;
    (le(&img[at..]), le(&img[at + 8..]))
}
