//! Checkpoints of a dynamized index: the state file `DYNSTATE` and the shard files it lists.
//!
//! A checkpoint pins one version, makes sure every shard of it has a synced shard file (shards are immutable,
//! so a file written for one checkpoint serves every later one), then writes the state file — the WAL
//! sequence number it contains, the next shard id, the levels as lists of shard ids, each shard's tagged
//! record indexes, and the buffered operations oldest buffer first — to `DYNSTATE.tmp`, syncs it and renames
//! it over `DYNSTATE`. Only then are shard files that no version refers to any more removed. A crash at any
//! point leaves the previous state file and every file it lists intact.
//!
//! State file: magic `STRDYNST`, body length u64 LE, xxh3-64 of the body u64 LE, body (all integers LE):
//! seqno u64, next shard id u64, level count u32, per level: shard count u32, per shard: id u64, tag count
//! u64, tagged indexes u64…; then buffered op count u64, per op: kind u8 (1 put, 2 delete), key u64,
//! value u64, weight bits u64.

use super::buffer::{BufferEntry, OpKind};
use super::shard::Shard;
use super::version::Version;
use crate::error::{Error, Result};
use crate::storage::vfs::{read_exact_at, write_file_atomically};
use crate::storage::{FileKind, IoStats, OpenOptions, Vfs};
use std::path::Path;

pub const STATE: &str = "DYNSTATE";
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
    /// The state of `v` with sequence number `seqno`.
    pub fn of_version<S: Shard>(v: &Version<S>, seqno: u64, next_shard_id: u64) -> State {
        State {
            seqno,
            next_shard_id,
            levels: v
                .levels
                .iter()
                .map(|l| l.iter().map(|s| (s.id, s.tags.tagged())).collect())
                .collect(),
            ops: v.buffers.iter().rev().flat_map(|b| b.resolved()).collect(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.seqno.to_le_bytes());
        b.extend_from_slice(&self.next_shard_id.to_le_bytes());
        b.extend_from_slice(&(self.levels.len() as u32).to_le_bytes());
        for level in &self.levels {
            b.extend_from_slice(&(level.len() as u32).to_le_bytes());
            for (id, tags) in level {
                b.extend_from_slice(&id.to_le_bytes());
                b.extend_from_slice(&(tags.len() as u64).to_le_bytes());
                for t in tags {
                    b.extend_from_slice(&t.to_le_bytes());
                }
            }
        }
        b.extend_from_slice(&(self.ops.len() as u64).to_le_bytes());
        for op in &self.ops {
            b.push(match op.kind {
                OpKind::Put => 1,
                OpKind::Delete => 2,
            });
            b.extend_from_slice(&op.key.to_le_bytes());
            b.extend_from_slice(&op.value.to_le_bytes());
            b.extend_from_slice(&op.weight.to_bits().to_le_bytes());
        }
        b
    }

    fn decode(body: &[u8]) -> std::result::Result<State, String> {
        // Counts come from disk: each is bounded by the bytes left before anything is allocated.
        let mut at = 0usize;
        let rd = |at: &mut usize, n: usize| -> std::result::Result<&[u8], String> {
            let s = body.get(*at..*at + n).ok_or_else(|| {
                format!("state ends at byte {} but more was expected", body.len())
            })?;
            *at += n;
            Ok(s)
        };
        let u32_at =
            |at: &mut usize| rd(at, 4).map(|s| u32::from_le_bytes(s.try_into().expect("4")));
        let u64_at =
            |at: &mut usize| rd(at, 8).map(|s| u64::from_le_bytes(s.try_into().expect("8")));
        let seqno = u64_at(&mut at)?;
        let next_shard_id = u64_at(&mut at)?;
        let levels_n = u32_at(&mut at)? as usize;
        if levels_n > 64 {
            return Err(format!("{levels_n} levels"));
        }
        let mut levels = Vec::with_capacity(levels_n);
        for _ in 0..levels_n {
            let shards = u32_at(&mut at)? as usize;
            if shards > body.len() / 16 {
                return Err(format!("{shards} shards in a level"));
            }
            let mut level = Vec::with_capacity(shards);
            for _ in 0..shards {
                let id = u64_at(&mut at)?;
                let n = u64_at(&mut at)? as usize;
                if n > (body.len() - at) / 8 {
                    return Err(format!(
                        "shard {id} lists {n} tags, more than the file holds"
                    ));
                }
                let mut tags = Vec::with_capacity(n);
                for _ in 0..n {
                    tags.push(u64_at(&mut at)?);
                }
                level.push((id, tags));
            }
            levels.push(level);
        }
        let n = u64_at(&mut at)? as usize;
        if n > (body.len() - at) / 25 {
            return Err(format!("{n} buffered operations, more than the file holds"));
        }
        let mut ops = Vec::with_capacity(n);
        for i in 0..n {
            let kind = match rd(&mut at, 1)?[0] {
                1 => OpKind::Put,
                2 => OpKind::Delete,
                k => return Err(format!("buffered operation {i} has kind {k}")),
            };
            let key = u64_at(&mut at)?;
            let value = u64_at(&mut at)?;
            let weight = f64::from_bits(u64_at(&mut at)?);
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
        if at != body.len() {
            return Err(format!("{} trailing bytes", body.len() - at));
        }
        Ok(State {
            seqno,
            next_shard_id,
            levels,
            ops,
        })
    }

    /// Writes the state file atomically (temporary file, sync, rename, directory sync).
    pub fn write(&self, vfs: &dyn Vfs, dir: &Path, stats: &IoStats) -> Result<()> {
        let body = self.encode();
        let mut bytes = Vec::with_capacity(24 + body.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&body).to_le_bytes());
        bytes.extend_from_slice(&body);
        write_file_atomically(vfs, dir, STATE, &bytes, stats)
    }

    /// Reads the state file.
    pub fn read(vfs: &dyn Vfs, dir: &Path, stats: &IoStats) -> Result<State> {
        let path = dir.join(STATE);
        let file = vfs.open(&path, OpenOptions::default())?;
        let len = file.len()?;
        if !(24..=1 << 40).contains(&len) {
            return Err(Error::corruption(
                &path,
                0,
                format!("state file of {len} bytes"),
            ));
        }
        let mut bytes = vec![0u8; len as usize];
        read_exact_at(file.as_ref(), &mut bytes, 0)?;
        stats.record_read(FileKind::Meta, bytes.len());
        if &bytes[..8] != MAGIC {
            return Err(Error::corruption(&path, 0, "not a dynamized state file"));
        }
        let body_len = u64::from_le_bytes(bytes[8..16].try_into().expect("8"));
        if body_len != len - 24 {
            return Err(Error::corruption(
                &path,
                8,
                format!("body of {body_len} bytes in a file of {len}"),
            ));
        }
        let sum = u64::from_le_bytes(bytes[16..24].try_into().expect("8"));
        let body = &bytes[24..];
        if xxhash_rust::xxh3::xxh3_64(body) != sum {
            return Err(Error::corruption(&path, 24, "state checksum mismatch"));
        }
        State::decode(body).map_err(|d| Error::corruption(&path, 24, d))
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
        let f = vfs.open(&dir.join(STATE), OpenOptions::default()).unwrap();
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
