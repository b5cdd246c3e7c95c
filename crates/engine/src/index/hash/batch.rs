//! A batch's way through the hash family: its operations decoded (keys to `u64`s; values to `u64`s, or for
//! a bytes-valued database to values appended to `hash.values` whose handles the index stores, see
//! `db_values`), each with the value it replaces and the state after the batch (for the ledger; the digest
//! covers a bytes value through its xxh3, so cleaning the value log, which moves values, changes no state), the room the region must have for the tables the batch may
//! need (checked before the shell logs the batch, so a logged batch always fits), and the operations applied
//! to the index. All of it runs under the family's lock (`db_index`).
//!
//! Room: buckets are compacted in place; the table grows only by doubling into fresh space (at the heap start
//! if it fits below the current generation, else after it), when the load passes 7/8 or a bucket's chain has
//! no room left (at any load). So every write needs room for one doubling after the current generation, and
//! a batch whose puts could take the load past 7/8 needs room for every doubling they may cause.

use xxhash_rust::xxh3::xxh3_64;

use super::HashIndex;
use super::core_view::CoreView;
use super::db_values::DbValues;
use super::header::HEADER_BYTES;
use super::layout::{CHUNK_SLOTS, MAX_LOG2_BUCKETS, SB_ROOT};
use super::ledger::{BatchFile, Ledger, Op, State};
use super::region::RegionFile;
use super::values::{MAX_VALUE, batch_need};
use crate::error::{Error, Result};
use crate::index::WriteOp;
use crate::storage::pm::Pm;
use crate::storage::pm::XPLINE;

/// What the family's lock guards: the index, the ledger and the batch-body file.
pub struct Inner {
    pub index: HashIndex<CoreView>,
    pub ledger: Ledger,
    pub batch: BatchFile,
    /// The value log of a database with bytes values (`None`: `u64` values, stored in the index itself).
    pub values: Option<DbValues>,
}

/// One operation as the batch gives it: the key and the encoded new value (`None` deletes).
pub type Raw<'a> = (u64, Option<&'a [u8]>);

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

/// The batch as (key, encoded new value) pairs, values checked: 8 bytes (`u64`) or, with `bytes_values`,
/// at most [`MAX_VALUE`] bytes; merges and weights are refused.
pub fn decode(ops: &[WriteOp], bytes_values: bool) -> Result<Vec<Raw<'_>>> {
    ops.iter()
        .map(|op| match op {
            WriteOp::Put { key, value } => {
                let key = key_of(key)?;
                if bytes_values && value.len() > MAX_VALUE {
                    return Err(Error::invalid(format!(
                        "a value of {} bytes; the hash index stores values of at most {MAX_VALUE} bytes",
                        value.len()
                    )));
                }
                if !bytes_values && value.len() != 8 {
                    return Err(Error::invalid(format!(
                        "a value of this hash database is a u64 (8 bytes), got {} bytes",
                        value.len()
                    )));
                }
                Ok((key, Some(value.as_slice())))
            }
            WriteOp::Delete { key } => Ok((key_of(key)?, None)),
            WriteOp::PutWeighted { .. } => Err(Error::invalid("the hash index has no weights")),
            WriteOp::Merge { .. } => Err(Error::invalid("the hash index has no merge operator")),
        })
        .collect()
}

/// Puts of a decoded batch.
pub fn puts(raw: &[Raw<'_>]) -> u64 {
    raw.iter().filter(|(_, v)| v.is_some()).count() as u64
}

/// Bytes of value-log records a decoded batch appends at most.
pub fn value_need(raw: &[Raw<'_>]) -> u64 {
    batch_need(raw.iter().filter_map(|(_, v)| v.map(<[u8]>::len)))
}

impl Inner {
    /// What the digest counts for `key`'s stored value: the value itself (`u64` values), or the xxh3 of the
    /// bytes its handle names (read and checked).
    fn ident(&self, key: u64, stored: u64, buf: &mut Vec<u8>) -> Result<u64> {
        match &self.values {
            None => Ok(stored),
            Some(values) => {
                values.read(key, stored, buf)?;
                Ok(xxh3_64(buf))
            }
        }
    }

    /// What the digest counts for an encoded new value.
    fn ident_of(&self, value: &[u8]) -> Result<u64> {
        match self.values {
            None => key_of(value),
            Some(_) => Ok(xxh3_64(value)),
        }
    }

    /// Records and digest of what the index holds (one pass over every live record; with bytes values,
    /// every value is read and checked).
    pub fn scan_state(&self, nonce: u64) -> Result<State> {
        let mut s = State::default();
        if self.values.is_none() {
            self.index
                .for_each(|k, v| s = s.step(nonce, k, None, Some(v)))?;
            return Ok(s);
        }
        let entries = super::PmHashIndex::entries(&self.index)?;
        let mut buf = Vec::new();
        for (k, v) in entries {
            s = s.step(nonce, k, None, Some(self.ident(k, v, &mut buf)?));
        }
        Ok(s)
    }

    /// The state after the batch (each operation's digest identity replacing the one before it, earlier
    /// operations of the batch included).
    pub fn plan(&self, ops: &[Raw<'_>]) -> Result<State> {
        let nonce = self.ledger.nonce();
        let mut state = self.ledger.slot.after;
        let mut pending: std::collections::HashMap<u64, Option<u64>> =
            std::collections::HashMap::new();
        let mut buf = Vec::new();
        for &(key, new) in ops {
            let old = match pending.get(&key) {
                Some(&ident) => ident,
                None => match self.index.get(key)? {
                    Some(v) => Some(self.ident(key, v, &mut buf)?),
                    None => None,
                },
            };
            let new = new.map(|v| self.ident_of(v)).transpose()?;
            if ops.len() > 1 {
                pending.insert(key, new);
            }
            state = state.step(nonce, key, old, new);
        }
        Ok(state)
    }

    /// Each stored operation with the stored value it replaces (earlier operations of the batch included).
    pub fn steps(&self, ops: &[Op]) -> Result<Vec<Step>> {
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
            steps.push(Step { key, new, old });
        }
        Ok(steps)
    }

    /// Cleans the value log until the batch's values fit (nothing without a value log).
    pub fn make_value_room(&mut self, ops: &[Raw<'_>]) -> Result<()> {
        match &mut self.values {
            None => Ok(()),
            Some(values) => values.make_room(&mut self.index, value_need(ops)),
        }
    }

    /// The batch's operations as the index stores them: `u64` values, or the handles of the values appended
    /// (and persisted) to the value log.
    pub fn store_values(&mut self, ops: &[Raw<'_>]) -> Result<Vec<Op>> {
        ops.iter()
            .map(|&(key, new)| {
                let stored = match (new, &mut self.values) {
                    (None, _) => None,
                    (Some(v), None) => Some(key_of(v)?),
                    (Some(v), Some(values)) => Some(values.append(key, v)?),
                };
                Ok((key, stored))
            })
            .collect()
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
        let home_slots = self.index.geo.bucket_bytes / XPLINE * CHUNK_SLOTS as u64;
        let log2 = u64::from((capacity / home_slots).trailing_zeros());
        let root = self.index.pm().load_u64_atomic(SB_ROOT)?;
        let end = root + self.index.generation_bytes(log2);
        let records = self.index.len() + puts;
        let (mut l, mut at) = (log2, end);
        while l < MAX_LOG2_BUCKETS {
            l += 1;
            at += self.index.generation_bytes(l);
            if records * 8 <= (7 * home_slots) << l {
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
