//! A batch's way through the hash family: its operations decoded to `u64`s, each with the value it replaces
//! and the state after the batch (for the ledger), the room the region must have for the tables the batch may
//! need (checked before the shell logs the batch, so a logged batch always fits), and the operations applied
//! to the index. All of it runs under the family's lock (`db_index`).
//!
//! Room: buckets are compacted in place; the table grows only by doubling into fresh space (at the heap start
//! if it fits below the current generation, else after it), when the load passes 7/8 or a bucket's chain has
//! no room left (at any load). So every write needs room for one doubling after the current generation, and
//! a batch whose puts could take the load past 7/8 needs room for every doubling they may cause.

use super::HashIndex;
use super::core_view::CoreView;
use super::header::HEADER_BYTES;
use super::layout::{HOME_SLOTS, MAX_LOG2_BUCKETS, SB_ROOT};
use super::ledger::{BatchFile, Ledger, Op, State};
use super::region::RegionFile;
use crate::error::{Error, Result};
use crate::index::WriteOp;
use crate::storage::pm::Pm;

/// What the family's lock guards: the index, the ledger and the batch-body file.
pub struct Inner {
    pub index: HashIndex<CoreView>,
    pub ledger: Ledger,
    pub batch: BatchFile,
}

/// One operation with the value it replaces.
pub struct Step {
    pub key: u64,
    pub new: Option<u64>,
    pub old: Option<u64>,
}

/// A `u64` from its 8 encoded (big-endian) bytes.
pub fn key_of(bytes: &[u8]) -> Result<u64> {
    <[u8; 8]>::try_from(bytes)
        .map(u64::from_be_bytes)
        .map_err(|_| {
            Error::invalid(format!(
                "a hash index key is a u64 (8 bytes), got {} bytes",
                bytes.len()
            ))
        })
}

/// The batch as (key, new value) pairs; merges and weights are refused.
pub fn decode(ops: &[WriteOp]) -> Result<Vec<Op>> {
    ops.iter()
        .map(|op| match op {
            WriteOp::Put { key, value } => Ok((key_of(key)?, Some(key_of(value)?))),
            WriteOp::Delete { key } => Ok((key_of(key)?, None)),
            WriteOp::PutWeighted { .. } => Err(Error::invalid("the hash index has no weights")),
            WriteOp::Merge { .. } => Err(Error::invalid("the hash index has no merge operator")),
        })
        .collect()
}

impl Inner {
    /// Records and digest of what the index holds (one pass over every live record).
    pub fn scan_state(&self, nonce: u64) -> Result<State> {
        let mut s = State::default();
        self.index
            .for_each(|k, v| s = s.step(nonce, k, None, Some(v)))?;
        Ok(s)
    }

    /// Each operation with the value it replaces (earlier operations of the batch included), and the state
    /// after the batch.
    pub fn plan(&self, ops: &[Op]) -> Result<(Vec<Step>, State)> {
        let nonce = self.ledger.nonce();
        let mut state = self.ledger.slot.after;
        let mut pending: std::collections::HashMap<u64, Option<u64>> =
            std::collections::HashMap::new();
        let mut steps = Vec::with_capacity(ops.len());
        for &(key, new) in ops {
            let old = match pending.get(&key) {
                Some(&v) => v,
                None => self.index.get(key)?,
            };
            if ops.len() > 1 {
                pending.insert(key, new);
            }
            state = state.step(nonce, key, old, new);
            steps.push(Step { key, new, old });
        }
        Ok((steps, state))
    }

    /// Applies steps whose value changes (a put of the same value or a delete of an absent key is nothing).
    pub fn apply_steps(&mut self, steps: &[Step]) -> Result<()> {
        for s in steps.iter().filter(|s| s.new != s.old) {
            match s.new {
                Some(v) => self.index.insert(s.key, v)?,
                None => {
                    self.index.remove(s.key)?;
                }
            }
        }
        Ok(())
    }

    /// The file offset up to which the region must be allocated for a batch of `puts` puts: the current
    /// generation, one doubling placed after it (a chain with no room left doubles the table at any load),
    /// and — if the puts could take the load past 7/8 — every doubling they may need. `ResourceExhausted`
    /// past the region.
    pub fn room_for(&self, region: &RegionFile, puts: u64) -> Result<u64> {
        let capacity = self.index.capacity();
        let log2 = u64::from((capacity / HOME_SLOTS as u64).trailing_zeros());
        let root = self.index.pm().load_u64_atomic(SB_ROOT)?;
        let end = root + self.index.generation_bytes(log2);
        let records = self.index.len() + puts;
        let (mut l, mut at) = (log2, end);
        while l < MAX_LOG2_BUCKETS {
            l += 1;
            at += self.index.generation_bytes(l);
            if records * 8 <= (7 * HOME_SLOTS as u64) << l {
                break;
            }
        }
        let worst = at;
        let need = HEADER_BYTES + worst;
        let total = region.header().total;
        if need > total {
            return Err(Error::ResourceExhausted(format!(
                "the hash region {} is full: a batch of {puts} puts may need tables up to byte {need}, past \
                 its {total} bytes (option region_bytes; the index holds {} records in {capacity} slots, and \
                 rebuilding a table needs room for a second one); create the database with a larger \
                 region_bytes, about 128 bytes per key",
                region.path().display(),
                self.index.len()
            )));
        }
        Ok(need)
    }
}
