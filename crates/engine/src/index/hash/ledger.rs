//! The ledger: how the hash family ties its region to the `Db` shell's write-ahead log.
//!
//! The index makes every operation durable by itself (its collecting log), but the shell needs more: the
//! sequence number of the last batch the region holds (WAL replay resumes after it), batches that are
//! atomic even when their WAL record was never written (`Durability::None`, a killed process), and damage
//! that is found rather than served. The ledger gives all three with one **intent slot per batch**, written
//! and persisted *before* the batch is applied:
//!
//! * `seqno` of the batch, and the region's **state** after it: live records and a **digest** (the wrapping
//!   sum of `xxh3(key, value)` over the live records, seeded with the region's nonce; order-independent, so
//!   it is updated per operation from the old and new value).
//! * the batch's operations: one inline, or several as a body in `hash.batch` (24 B per operation: key,
//!   value, kind 1 put / 2 delete) with its xxh3 and extent.
//!
//! Two slots (at 1024 and 1152 of `hash.pm`) alternate; each carries an xxh3 of its first 64 bytes, so a
//! torn or damaged slot is invalid and the other one stands. A body is never placed over the body of the
//! newest slot, so falling back to the older slot never needs a body that was overwritten.
//!
//! **Recovery** (see `db_index`): open the index, compute its (records, digest); if it is not the newest
//! slot's state, re-apply the slot's operations (idempotent: puts and deletes set absolute values, and the
//! batch was the last one) and compare again; a mismatch is `Error::Corruption`. So a batch cut short by a
//! crash is completed, and damage that changes what the index holds is detected. A checkpoint writes a slot
//! without operations (the seqno the shell gives it), so a clean database never needs `hash.batch`.
//!
//! Cost per batch: one slot write + persist (one fence under eADR), plus for several operations one
//! `pwrite` of the body (and an `fdatasync` in msync mode); one lookup per operation for the old value.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::format::le;
use super::region::RegionFile;
use crate::error::{Error, Result};
use crate::storage::vfs::read_exact_at;
use crate::storage::{FileKind, IoStats, VfsFile};

/// One operation of a batch: `None` deletes.
pub type Op = (u64, Option<u64>);

/// File offsets of the two slots in `hash.pm`.
pub const SLOT_OFFSETS: [u64; 2] = [1024, 1152];
const SLOT_BYTES: usize = 72;
const SLOT_CHECKED: usize = 64;
/// Bytes of one operation in a body.
const BODY_OP_BYTES: usize = 24;
const KIND_PUT: u64 = 1;
const KIND_DELETE: u64 = 2;
const SLOT_SEED: u64 = 0x4C45_4447_4552;
const DIGEST_SEED: u64 = 0x4449_4745_5354;

/// What the index holds after a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct State {
    pub records: u64,
    pub digest: u64,
}

impl State {
    /// The state after `key` went from `old` to `new`.
    pub fn step(self, nonce: u64, key: u64, old: Option<u64>, new: Option<u64>) -> State {
        let mut s = self;
        // Wrapping: the counts come from the region, and a damaged one must give a mismatch, not a panic.
        if let Some(o) = old {
            s.records = s.records.wrapping_sub(1);
            s.digest = s.digest.wrapping_sub(term(nonce, key, o));
        }
        if let Some(n) = new {
            s.records = s.records.wrapping_add(1);
            s.digest = s.digest.wrapping_add(term(nonce, key, n));
        }
        s
    }
}

/// A live record's share of the digest.
pub fn term(nonce: u64, key: u64, value: u64) -> u64 {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&key.to_le_bytes());
    b[8..].copy_from_slice(&value.to_le_bytes());
    xxh3_64_with_seed(&b, nonce ^ DIGEST_SEED)
}

/// The operations a slot records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotOps {
    /// A checkpoint (or the empty database).
    None,
    One(Op),
    /// `bytes` of body at `off` of `hash.batch`, with their xxh3.
    Body {
        off: u64,
        bytes: u64,
        checksum: u64,
    },
}

/// One decoded slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub seqno: u64,
    pub after: State,
    pub ops: SlotOps,
}

impl Slot {
    fn encode(&self, nonce: u64, index: usize) -> [u8; SLOT_BYTES] {
        let (count, a, b, c) = match self.ops {
            SlotOps::None => (0, 0, 0, 0),
            SlotOps::One((k, Some(v))) => (1, k, v, KIND_PUT),
            SlotOps::One((k, None)) => (1, k, 0, KIND_DELETE),
            SlotOps::Body {
                off,
                bytes,
                checksum,
            } => (bytes / BODY_OP_BYTES as u64, off, bytes, checksum),
        };
        let mut out = [0u8; SLOT_BYTES];
        for (i, w) in [
            self.seqno,
            count,
            self.after.records,
            self.after.digest,
            a,
            b,
            c,
            0,
        ]
        .into_iter()
        .enumerate()
        {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        let check = xxh3_64_with_seed(&out[..SLOT_CHECKED], slot_seed(nonce, index));
        out[SLOT_CHECKED..].copy_from_slice(&check.to_le_bytes());
        out
    }

    /// The slot in `b`, or `None` when its checksum fails (torn or damaged).
    fn decode(b: &[u8], nonce: u64, index: usize) -> Option<Slot> {
        if le(&b[SLOT_CHECKED..]) != xxh3_64_with_seed(&b[..SLOT_CHECKED], slot_seed(nonce, index))
        {
            return None;
        }
        let w = |i: usize| le(&b[i * 8..]);
        let ops = match w(1) {
            0 => SlotOps::None,
            1 if w(6) == KIND_PUT => SlotOps::One((w(4), Some(w(5)))),
            1 if w(6) == KIND_DELETE => SlotOps::One((w(4), None)),
            n if n > 1 && n.checked_mul(BODY_OP_BYTES as u64) == Some(w(5)) => SlotOps::Body {
                off: w(4),
                bytes: w(5),
                checksum: w(6),
            },
            _ => return None,
        };
        Some(Slot {
            seqno: w(0),
            after: State {
                records: w(2),
                digest: w(3),
            },
            ops,
        })
    }
}

fn slot_seed(nonce: u64, index: usize) -> u64 {
    nonce ^ SLOT_SEED ^ index as u64
}

/// `hash.batch`: the bodies of batches of several operations.
#[derive(Debug)]
pub struct BatchFile {
    pub file: Box<dyn VfsFile>,
    pub path: PathBuf,
    /// `fdatasync` each body before its slot (msync mode: the slot will be durable at once).
    pub sync: bool,
    pub stats: Arc<IoStats>,
}

/// The ledger's DRAM side: the newest slot and where it is.
#[derive(Debug, Clone)]
pub struct Ledger {
    nonce: u64,
    /// Index (0 or 1) of the newest slot.
    newest: usize,
    pub slot: Slot,
}

impl Ledger {
    /// Writes the first slot of a new region: seqno 0, no records.
    pub fn create(region: &RegionFile) -> Result<Ledger> {
        let mut ledger = Ledger {
            nonce: region.header().nonce,
            newest: 1,
            slot: Slot {
                seqno: 0,
                after: State::default(),
                ops: SlotOps::None,
            },
        };
        ledger.write(region, ledger.slot)?;
        Ok(ledger)
    }

    /// Reads the newest valid slot (on a tie, the one without operations). No valid slot is damage.
    pub fn open(region: &RegionFile) -> Result<Ledger> {
        let nonce = region.header().nonce;
        let mut best: Option<(usize, Slot)> = None;
        for (i, &off) in SLOT_OFFSETS.iter().enumerate() {
            let mut b = [0u8; SLOT_BYTES];
            region.read(off, &mut b)?;
            let Some(s) = Slot::decode(&b, nonce, i) else {
                continue;
            };
            let better = match best {
                None => true,
                Some((_, o)) => s.seqno > o.seqno || (s.seqno == o.seqno && s.ops == SlotOps::None),
            };
            if better {
                best = Some((i, s));
            }
        }
        let (newest, slot) = best.ok_or_else(|| {
            Error::corruption(
                region.path(),
                SLOT_OFFSETS[0],
                "neither ledger slot of the hash region is valid",
            )
        })?;
        Ok(Ledger {
            nonce,
            newest,
            slot,
        })
    }

    pub fn nonce(&self) -> u64 {
        self.nonce
    }

    /// Records batch `seqno` (its operations and the state after it) in the older slot, durably: the body
    /// first (not over the newest slot's body), then the slot.
    pub fn commit(
        &mut self,
        region: &RegionFile,
        batch: &BatchFile,
        seqno: u64,
        after: State,
        ops: &[Op],
    ) -> Result<()> {
        let ops = match ops {
            [] => SlotOps::None,
            [one] => SlotOps::One(*one),
            many => {
                let mut body = Vec::with_capacity(many.len() * BODY_OP_BYTES);
                for &(k, v) in many {
                    let kind = if v.is_some() { KIND_PUT } else { KIND_DELETE };
                    for w in [k, v.unwrap_or(0), kind] {
                        body.extend_from_slice(&w.to_le_bytes());
                    }
                }
                let bytes = body.len() as u64;
                let off = match self.slot.ops {
                    SlotOps::Body {
                        off, bytes: held, ..
                    } if off < bytes => (off + held).next_multiple_of(4096),
                    _ => 0,
                };
                batch.file.write_all_at(&body, off)?;
                batch.stats.record_write(FileKind::Pages, body.len());
                if batch.sync {
                    batch.file.sync_data()?;
                    batch.stats.record_sync(FileKind::Pages);
                }
                let checksum = xxh3_64_with_seed(&body, self.nonce ^ seqno);
                SlotOps::Body {
                    off,
                    bytes,
                    checksum,
                }
            }
        };
        self.write(region, Slot { seqno, after, ops })
    }

    fn write(&mut self, region: &RegionFile, slot: Slot) -> Result<()> {
        let index = 1 - self.newest;
        let at = SLOT_OFFSETS[index];
        region.write(at, &slot.encode(self.nonce, index))?;
        region.persist(at, SLOT_BYTES as u64)?;
        self.newest = index;
        self.slot = slot;
        Ok(())
    }

    /// The operations of the newest slot (a body is read from `hash.batch` and checked).
    pub fn ops(&self, batch: &BatchFile) -> Result<Vec<Op>> {
        match self.slot.ops {
            SlotOps::None => Ok(Vec::new()),
            SlotOps::One(op) => Ok(vec![op]),
            SlotOps::Body {
                off,
                bytes,
                checksum,
            } => read_body(batch, off, bytes, checksum, self.nonce ^ self.slot.seqno),
        }
    }
}

fn read_body(batch: &BatchFile, off: u64, bytes: u64, checksum: u64, seed: u64) -> Result<Vec<Op>> {
    let damaged = |what: &str| {
        Error::corruption(
            &batch.path,
            off,
            format!("batch body of {bytes} bytes: {what}"),
        )
    };
    let len = usize::try_from(bytes).map_err(|_| damaged("too large"))?;
    let have = batch.file.len()?;
    if off.checked_add(bytes).is_none_or(|end| end > have) {
        return Err(damaged(&format!("the file holds only {have} bytes")));
    }
    let mut body = vec![0u8; len];
    read_exact_at(batch.file.as_ref(), &mut body, off)?;
    if xxh3_64_with_seed(&body, seed) != checksum {
        return Err(damaged("checksum mismatch"));
    }
    body.chunks_exact(BODY_OP_BYTES)
        .map(|op| match le(&op[16..]) {
            KIND_PUT => Ok((le(op), Some(le(&op[8..])))),
            KIND_DELETE => Ok((le(op), None)),
            _ => Err(damaged("unknown operation")),
        })
        .collect()
}

/// The path of `hash.batch` next to `region`.
pub fn batch_path(dir: &Path) -> PathBuf {
    dir.join(crate::files::HASH_BATCH)
}
