//! Checkpoints of a dynamized index: the state file `DYNSTATE` and the shard files it lists.
//!
//! A checkpoint pins one version, makes sure every shard of it has a synced shard file (shards are immutable,
//! so a file written for one checkpoint serves every later one), then writes the state file — the WAL
//! sequence number it contains, the next shard id, the levels as lists of shard ids, each shard's tagged
//! record indexes, and the buffered operations oldest buffer first — to `DYNSTATE.tmp`, syncs it and renames
//! it over `DYNSTATE`. Only then are shard files that no version refers to any more removed. A crash at any
//! point leaves the previous state file and every file it lists intact.
//!
//! State file: a sealed file (`storage::sealed`: magic `STRDYNST`, body length, xxh3-64, body); the body,
//! all integers little endian:
//! seqno u64, next shard id u64, level count u32, per level: shard count u32, per shard: id u64, tag count
//! u64, tagged indexes u64…; then buffered op count u64, per op: kind u8 (1 put, 2 delete), key u64,
//! value u64, weight bits u64.

// A decoder of bytes read from disk: every index and slice is checked.
#![deny(clippy::indexing_slicing)]

use super::buffer::{BufferEntry, OpKind};
use super::shard::Shard;
use super::version::Version;
use crate::error::{Error, Result};
use crate::storage::codec::{Reader, Writer};
use crate::storage::sealed::{SEALED_HEADER, read_sealed, write_sealed};
use crate::storage::{IoStats, Vfs};
use std::path::Path;

pub use crate::files::DYN_STATE as STATE;
const MAGIC: &[u8; 8] = b"STRDYNST";

/// What a state file holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct State {
    pub seqno: u64,
    pub next_shard_id: u64,
    /// Per level, per shard (oldest first): id and tagged record indexes.
    pub levels: Vec<Vec<(u64, Vec<u64>)>>,
    /// Buffered operations, oldest first.
    pub ops: Vec<BufferEntry>,
}

impl State {
    /// The state of `v` with sequence number `seqno`. Pending shards (flushed, not yet placed) are listed
    /// as the newest shards of level 0; reopening places those beyond what the layout keeps there again.
    pub fn of_version<S: Shard>(v: &Version<S>, seqno: u64, next_shard_id: u64) -> State {
        let mut levels: Vec<Vec<(u64, Vec<u64>)>> = v
            .levels
            .iter()
            .map(|l| l.iter().map(|s| (s.id, s.tags.tagged())).collect())
            .collect();
        if !v.pending.is_empty() {
            if levels.is_empty() {
                levels.push(Vec::new());
            }
            if let Some(l0) = levels.first_mut() {
                l0.extend(v.pending.iter().map(|s| (s.id, s.tags.tagged())));
            }
        }
        State {
            seqno,
            next_shard_id,
            levels,
            ops: v.buffers.iter().rev().flat_map(|b| b.resolved()).collect(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        let mut w = Writer::new(&mut b);
        w.u64(self.seqno)
            .u64(self.next_shard_id)
            .u32(self.levels.len() as u32);
        for level in &self.levels {
            w.u32(level.len() as u32);
            for (id, tags) in level {
                w.u64(*id).u64(tags.len() as u64);
                for &t in tags {
                    w.u64(t);
                }
            }
        }
        w.u64(self.ops.len() as u64);
        for op in &self.ops {
            w.u8(match op.kind {
                OpKind::Put => 1,
                OpKind::Delete => 2,
            })
            .u64(op.key)
            .u64(op.value)
            .f64(op.weight);
        }
        b
    }

    pub(crate) fn decode(body: &[u8]) -> std::result::Result<State, String> {
        // Counts come from disk: each is bounded by the bytes left before anything is allocated.
        let mut r = Reader::new(body);
        let seqno = r.u64()?;
        let next_shard_id = r.u64()?;
        let levels_n = r.u32()? as usize;
        if levels_n > 64 {
            return Err(format!("{levels_n} levels"));
        }
        let mut levels = Vec::with_capacity(levels_n);
        for _ in 0..levels_n {
            let count = r.u32()?;
            let shards = r.count(u64::from(count), 16)?;
            let mut level = Vec::with_capacity(shards);
            for _ in 0..shards {
                let id = r.u64()?;
                let count = r.u64()?;
                let n = r
                    .count(count, 8)
                    .map_err(|e| format!("shard {id} lists {count} tags: {e}"))?;
                let mut tags = Vec::with_capacity(n);
                for _ in 0..n {
                    tags.push(r.u64()?);
                }
                level.push((id, tags));
            }
            levels.push(level);
        }
        let count = r.u64()?;
        let n = r
            .count(count, 25)
            .map_err(|e| format!("{count} buffered operations: {e}"))?;
        let mut ops = Vec::with_capacity(n);
        for i in 0..n {
            let kind = match r.u8()? {
                1 => OpKind::Put,
                2 => OpKind::Delete,
                k => return Err(format!("buffered operation {i} has kind {k}")),
            };
            let key = r.u64()?;
            let value = r.u64()?;
            let weight = r.f64()?;
            if !(weight.is_finite() && weight >= 0.0) {
                return Err(format!("buffered operation {i} has weight {weight}"));
            }
            ops.push(BufferEntry {
                key,
                value,
                weight,
                kind,
            });
        }
        r.finish()?;
        Ok(State {
            seqno,
            next_shard_id,
            levels,
            ops,
        })
    }

    /// Writes the state file atomically (a sealed file: temporary file, sync, rename, directory sync).
    pub fn write(&self, vfs: &dyn Vfs, dir: &Path, stats: &IoStats) -> Result<()> {
        write_sealed(vfs, dir, STATE, MAGIC, &self.encode(), stats)
    }

    /// Reads the state file.
    pub fn read(vfs: &dyn Vfs, dir: &Path, stats: &IoStats) -> Result<State> {
        let path = dir.join(STATE);
        let body = read_sealed(vfs, &path, MAGIC, "dynamized state file", 1 << 40, stats)?;
        State::decode(&body).map_err(|d| Error::corruption(&path, SEALED_HEADER as u64, d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemVfs;

    #[test]
    fn state_round_trips_and_damage_is_reported() {
        let vfs = MemVfs::new();
        let dir = Path::new("/db");
        vfs.create_dir_all(dir).unwrap();
        let stats = IoStats::new();
        let s = State {
            seqno: 42,
            next_shard_id: 9,
            levels: vec![vec![(3, vec![1, 5])], vec![(1, vec![]), (2, vec![0])]],
            ops: vec![
                BufferEntry {
                    key: 7,
                    value: 70,
                    weight: 2.5,
                    kind: OpKind::Put,
                },
                BufferEntry {
                    key: 8,
                    value: 0,
                    weight: 0.0,
                    kind: OpKind::Delete,
                },
            ],
        };
        s.write(&vfs, dir, &stats).unwrap();
        assert_eq!(State::read(&vfs, dir, &stats).unwrap(), s);
        // Flip one byte of the body: the checksum catches it.
        let f = vfs
            .open(&dir.join(STATE), crate::storage::OpenOptions::default())
            .unwrap();
        let mut b = [0u8; 1];
        f.read_at(&mut b, 30).unwrap();
        f.write_all_at(&[b[0] ^ 1], 30).unwrap();
        let e = State::read(&vfs, dir, &stats).unwrap_err();
        assert!(matches!(e, Error::Corruption { offset: 24, .. }), "{e}");
        // Bodies with impossible counts are refused without allocating them.
        assert!(State::decode(&[0u8; 20]).is_err());
        let mut huge = s.encode();
        huge[16..20].copy_from_slice(&1000u32.to_le_bytes());
        assert!(State::decode(&huge).is_err());
    }
}
