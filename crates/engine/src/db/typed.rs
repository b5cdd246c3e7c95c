//! The typed handle `Db<K, V>`: encodes keys and values (see `types`) and decodes results.

use super::{Config, DbStats, Options, RawDb, RawIter, RawSnapshot};
use crate::error::Result;
use crate::index::{CheckReport, Direction, KeyRange, WriteOp};
use crate::storage::IoSnapshot;
use crate::types::{Durability, Key, Value};
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::path::Path;

/// A database with keys of type `K` and values of type `V`.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use strata::{Config, Db, Options};
/// let db = Db::<u64, u64>::create(dir.path().join("db"), &Config::default(), &Options::default()).unwrap();
/// db.insert(&7, &70).unwrap();
/// assert_eq!(db.get(&7).unwrap(), Some(70));
/// assert_eq!(db.count_range(0..=10).unwrap(), 1);
/// ```
pub struct Db<K: Key, V: Value> {
    raw: RawDb,
    _types: PhantomData<fn(K, V)>,
}

impl<K: Key, V: Value> Clone for Db<K, V> {
    fn clone(&self) -> Self {
        Db {
            raw: self.raw.clone(),
            _types: PhantomData,
        }
    }
}

impl<K: Key, V: Value> std::fmt::Debug for Db<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.raw.fmt(f)
    }
}

fn enc<T: Value>(t: &T) -> Vec<u8> {
    let mut v = Vec::with_capacity(t.encoded_len());
    t.encode_into(&mut v);
    v
}

fn bound_enc<K: Key>(b: Bound<&K>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(enc(k)),
        Bound::Excluded(k) => Bound::Excluded(enc(k)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn key_range<K: Key>(r: impl RangeBounds<K>) -> KeyRange {
    KeyRange {
        lo: bound_enc(r.start_bound()),
        hi: bound_enc(r.end_bound()),
    }
}

/// A lookup of `key` by an untyped `get_into`, decoded.
fn typed_get<K: Key, V: Value>(
    key: &K,
    get_into: impl FnOnce(&[u8], &mut Vec<u8>) -> Result<bool>,
) -> Result<Option<V>> {
    let mut out = Vec::new();
    if get_into(&enc(key), &mut out)? {
        Ok(Some(V::decode(&out)?))
    } else {
        Ok(None)
    }
}

fn decode_pair<K: Key, V: Value>((k, v): (Vec<u8>, Vec<u8>)) -> Result<(K, V)> {
    Ok((K::decode(&k)?, V::decode(&v)?))
}

impl<K: Key, V: Value> Db<K, V> {
    /// Creates a database in `dir`; the key and value types of `config` are taken from `K` and `V`.
    pub fn create(dir: impl AsRef<Path>, config: &Config, options: &Options) -> Result<Self> {
        let config = Config {
            key: K::KIND,
            value: V::KIND,
            ..config.clone()
        };
        Self::from_raw(RawDb::create(dir, &config, options)?)
    }

    /// Opens an existing database; its key and value types must be `K` and `V`.
    pub fn open(dir: impl AsRef<Path>, options: &Options) -> Result<Self> {
        Self::from_raw(RawDb::open(dir, options)?)
    }

    /// Opens an existing database for reading only (see [`RawDb::open_read_only`]): a shared lock, nothing
    /// written, a crashed writer's WAL replayed in memory.
    pub fn open_read_only(dir: impl AsRef<Path>, options: &Options) -> Result<Self> {
        Self::from_raw(RawDb::open_read_only(dir, options)?)
    }

    /// Wraps an untyped handle, checking its types.
    pub fn from_raw(raw: RawDb) -> Result<Self> {
        raw.expect_types(raw.manifest().index.kind(), K::KIND, V::KIND)?;
        Ok(Db {
            raw,
            _types: PhantomData,
        })
    }

    /// The untyped handle.
    pub fn raw(&self) -> &RawDb {
        &self.raw
    }

    pub fn get(&self, key: &K) -> Result<Option<V>> {
        typed_get(key, |k, out| self.raw.get_into(k, out))
    }

    /// Inserts or overwrites.
    pub fn insert(&self, key: &K, value: &V) -> Result<()> {
        let op = WriteOp::Put {
            key: enc(key),
            value: enc(value),
        };
        self.raw.write(std::slice::from_ref(&op), None)
    }

    /// Removes (no effect if absent).
    pub fn delete(&self, key: &K) -> Result<()> {
        self.raw.write(&[WriteOp::Delete { key: enc(key) }], None)
    }

    /// Combines `operand` with the key's value by the database's merge operator (a Bε-tree created with
    /// one, e.g. `u64-add`); other databases refuse it.
    pub fn merge(&self, key: &K, operand: &V) -> Result<()> {
        let op = WriteOp::Merge {
            key: enc(key),
            operand: enc(operand),
        };
        self.raw.write(std::slice::from_ref(&op), None)
    }

    /// Applies a batch atomically.
    pub fn write(&self, batch: Batch<K, V>) -> Result<()> {
        self.raw.write(&batch.ops, batch.durability)
    }

    /// Ascending iterator over a key range.
    pub fn range(&self, range: impl RangeBounds<K>) -> Iter<K, V> {
        self.iter_dir(range, Direction::Forward)
    }

    /// Iterator over a key range in either direction.
    pub fn iter_dir(&self, range: impl RangeBounds<K>, dir: Direction) -> Iter<K, V> {
        Iter {
            raw: self.raw.range(key_range(range), dir),
            _types: PhantomData,
        }
    }

    /// A point-in-time view (see [`RawSnapshot`]); `InvalidArgument` for a family without snapshots.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use strata::{Config, Db, IndexConfig, IndexKind, Options};
    /// let config = Config { index: IndexKind::Learned.default_config(), ..Config::default() };
    /// let db = Db::<u64, u64>::create(dir.path().join("db"), &config, &Options::default()).unwrap();
    /// db.insert(&1, &10).unwrap();
    /// let snap = db.snapshot().unwrap();
    /// db.insert(&1, &11).unwrap();
    /// db.insert(&2, &20).unwrap();
    /// assert_eq!(snap.get(&1).unwrap(), Some(10));
    /// assert_eq!(snap.range(..).map(|r| r.unwrap()).collect::<Vec<_>>(), vec![(1, 10)]);
    /// assert_eq!(db.get(&1).unwrap(), Some(11));
    /// ```
    pub fn snapshot(&self) -> Result<Snapshot<K, V>> {
        Ok(Snapshot {
            raw: self.raw.snapshot()?,
            _types: PhantomData,
        })
    }

    pub fn len(&self) -> u64 {
        self.raw.len()
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Inserts or overwrites a record with a sampling weight (finite, ≥ 0): weighted databases only
    /// ([`Capabilities::weighted`](crate::Capabilities)).
    pub fn insert_weighted(&self, key: &K, value: &V, weight: f64) -> Result<()> {
        self.raw.write(
            &[WriteOp::PutWeighted {
                key: enc(key),
                value: enc(value),
                weight,
            }],
            None,
        )
    }

    /// What the database's index can do.
    pub fn capabilities(&self) -> crate::Capabilities {
        self.raw.capabilities()
    }

    /// Number of records in a key range, in O(log n).
    pub fn count_range(&self, range: impl RangeBounds<K>) -> Result<u64> {
        self.raw.count_range(&key_range(range))
    }

    /// `k` independent samples (with replacement) of the records in `[lo, hi]`: uniform, or in proportion to
    /// the records' weights in a weighted database.
    pub fn sample_range(
        &self,
        lo: &K,
        hi: &K,
        k: usize,
        rng: &mut impl rand::RngCore,
    ) -> Result<Vec<(K, V)>> {
        self.raw
            .sample_range(&KeyRange::inclusive(enc(lo), enc(hi)), k, rng)?
            .into_iter()
            .map(decode_pair)
            .collect()
    }

    /// Loads sorted records into an empty database (see [`RawDb::bulk_load`]).
    pub fn bulk_load(&self, records: impl IntoIterator<Item = (K, V)>) -> Result<u64> {
        self.raw
            .bulk_load(&mut records.into_iter().map(|(k, v)| (enc(&k), enc(&v))))
    }

    pub fn flush(&self) -> Result<()> {
        self.raw.flush()
    }

    pub fn checkpoint(&self) -> Result<()> {
        self.raw.checkpoint()
    }

    pub fn check(&self) -> Result<CheckReport> {
        self.raw.check()
    }

    pub fn stats(&self) -> Result<DbStats> {
        self.raw.stats()
    }

    pub fn io(&self) -> IoSnapshot {
        self.raw.io()
    }

    /// Checkpoints and closes, reporting errors.
    pub fn close(self) -> Result<()> {
        self.raw.close()
    }
}

/// A group of writes applied atomically, optionally with its own durability.
pub struct Batch<K: Key, V: Value> {
    ops: Vec<WriteOp>,
    durability: Option<Durability>,
    _types: PhantomData<fn(K, V)>,
}

impl<K: Key, V: Value> Default for Batch<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Key, V: Value> Batch<K, V> {
    pub fn new() -> Self {
        Batch {
            ops: Vec::new(),
            durability: None,
            _types: PhantomData,
        }
    }
    pub fn insert(&mut self, key: &K, value: &V) -> &mut Self {
        self.ops.push(WriteOp::Put {
            key: enc(key),
            value: enc(value),
        });
        self
    }
    pub fn delete(&mut self, key: &K) -> &mut Self {
        self.ops.push(WriteOp::Delete { key: enc(key) });
        self
    }
    /// A merge of `operand` into the key's value (see [`Db::merge`]).
    pub fn merge(&mut self, key: &K, operand: &V) -> &mut Self {
        self.ops.push(WriteOp::Merge {
            key: enc(key),
            operand: enc(operand),
        });
        self
    }
    /// Durability for this batch instead of the handle's.
    pub fn durability(&mut self, d: Durability) -> &mut Self {
        self.durability = Some(d);
        self
    }
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Typed ordered iterator.
pub struct Iter<K, V> {
    raw: RawIter,
    _types: PhantomData<fn(K, V)>,
}

impl<K: Key, V: Value> Iterator for Iter<K, V> {
    type Item = Result<(K, V)>;
    fn next(&mut self) -> Option<Self::Item> {
        self.raw.next().map(|r| r.and_then(decode_pair))
    }
}

/// A point-in-time view of a typed database ([`Db::snapshot`]; see [`RawSnapshot`]).
pub struct Snapshot<K: Key, V: Value> {
    raw: RawSnapshot,
    _types: PhantomData<fn(K, V)>,
}

impl<K: Key, V: Value> Clone for Snapshot<K, V> {
    fn clone(&self) -> Self {
        Snapshot {
            raw: self.raw.clone(),
            _types: PhantomData,
        }
    }
}

impl<K: Key, V: Value> Snapshot<K, V> {
    /// The value of `key` as of the snapshot.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        typed_get(key, |k, out| self.raw.get_into(k, out))
    }

    /// Ascending iterator over a key range as of the snapshot.
    pub fn range(&self, range: impl RangeBounds<K>) -> Iter<K, V> {
        self.iter_dir(range, Direction::Forward)
    }

    /// Iterator over a key range as of the snapshot, in either direction.
    pub fn iter_dir(&self, range: impl RangeBounds<K>, dir: Direction) -> Iter<K, V> {
        Iter {
            raw: self.raw.range(key_range(range), dir),
            _types: PhantomData,
        }
    }

    /// The untyped view.
    pub fn raw(&self) -> &RawSnapshot {
        &self.raw
    }
}
