//! Batched point lookups: the descents of many keys interleaved level by level, so that the cache misses
//! of different keys overlap instead of being paid one after another.
//!
//! A lone lookup pays, at each level, a chain of dependent misses on a node that is not hot: the buffer
//! pool's frame, the node's header, its slot array (or packed keys), then the matching cell. A batch runs
//! each level in stages, every stage over all the keys of a group before the next: ask for each distinct
//! node's frame line; pin each node and ask for its header line; ask for the lines its search probes;
//! search. The misses of one stage are independent of each other, so the CPU waits for them together.
//!
//! Invariants:
//! * every answer is what [`super::read::get`] gives for the key: the same tree state (one read lock for
//!   the whole batch), the same checks of each node's type and level (`Corruption` otherwise);
//! * a node wanted by several keys of a group is pinned once: a thread never holds two guards on one page
//!   (the pool's data locks are not reentrant); a group pins at most [`GROUP`] nodes and an eighth of the
//!   pool's frames (plus one overflow page while it copies a long value).
//!
//! Cost: per group of up to [`GROUP`] keys and per level, four passes over the group; nothing allocated
//! but the answers (and the group's guards, inline).

use super::read::{check_inner, check_leaf, load_value};
use super::{BTree, TreeState};
use crate::error::Result;
use crate::storage::{PageId, PageReadGuard};
use smallvec::SmallVec;

/// Keys whose descents are interleaved together (more would keep more pins and lines in flight than the
/// CPU can track; fewer would overlap fewer misses).
pub(super) const GROUP: usize = 16;

/// Keys interleaved together in a pool of `frames` frames: [`GROUP`], but never more than an eighth of the
/// frames, so that a batch (which pins a node per key, and an overflow page while it reads a long value)
/// leaves the other readers and the writer room in a small pool; at least one (a lone lookup).
fn group_len(frames: usize) -> usize {
    GROUP.min(frames / 8).max(1)
}

/// Appends one answer per key of `keys` to `out`, in order. On an error nothing is appended.
pub(super) fn get_many(
    tree: &BTree,
    st: &TreeState,
    keys: &[&[u8]],
    out: &mut Vec<Option<Vec<u8>>>,
) -> Result<()> {
    let mut answers = Vec::with_capacity(keys.len());
    for group in keys.chunks(group_len(tree.pool.frame_count())) {
        let mut ids: SmallVec<[PageId; GROUP]> = SmallVec::from_elem(st.root, group.len());
        for level in (1..st.height).rev() {
            let nodes = Pinned::pin(tree, &ids)?;
            for (id, guard) in nodes.distinct() {
                check_inner(tree, id, guard, level)?;
                tree.layout.prefetch_inner_search(guard);
            }
            for (i, key) in group.iter().enumerate() {
                let p = nodes.page_of(i);
                ids[i] = tree.layout.inner_child(p, tree.layout.inner_search(p, key));
            }
        }
        let leaves = Pinned::pin(tree, &ids)?;
        for (id, guard) in leaves.distinct() {
            check_leaf(tree, id, guard)?;
            tree.layout.prefetch_leaf_search(guard);
        }
        for (i, key) in group.iter().enumerate() {
            tree.layout.prefetch_leaf_entry(leaves.page_of(i), key);
        }
        for (i, key) in group.iter().enumerate() {
            let leaf = leaves.page_of(i);
            answers.push(match tree.layout.leaf_search(leaf, key) {
                Ok(j) => {
                    let mut value = Vec::new();
                    load_value(tree, tree.layout.leaf_value(leaf, j), &mut value)?;
                    Some(value)
                }
                Err(_) => None,
            });
        }
    }
    out.append(&mut answers);
    Ok(())
}

/// The distinct nodes of one level of a group, pinned, and which of them each key descends through.
struct Pinned<'a> {
    ids: SmallVec<[PageId; GROUP]>,
    guards: SmallVec<[PageReadGuard<'a>; GROUP]>,
    /// For each key of the group, its node's index in `ids` / `guards`.
    of_key: SmallVec<[u8; GROUP]>,
}

impl<'a> Pinned<'a> {
    /// Pins the distinct pages of `wanted` (one per key): first asks for every frame's line, then pins each
    /// page and asks for its header line.
    fn pin(tree: &'a BTree, wanted: &[PageId]) -> Result<Pinned<'a>> {
        debug_assert!(wanted.len() <= GROUP);
        let mut ids: SmallVec<[PageId; GROUP]> = SmallVec::new();
        let mut of_key = SmallVec::new();
        for &id in wanted {
            let at = match ids.iter().position(|&d| d == id) {
                Some(at) => at,
                None => {
                    ids.push(id);
                    ids.len() - 1
                }
            };
            of_key.push(at as u8);
        }
        for &id in &ids {
            tree.pool.prefetch(id);
        }
        let mut guards = SmallVec::new();
        for &id in &ids {
            let guard = tree.pool.read(id)?;
            crate::algo::prefetch_line(&guard[0]);
            guards.push(guard);
        }
        Ok(Pinned {
            ids,
            guards,
            of_key,
        })
    }

    /// Each distinct node: its page id and its bytes.
    fn distinct(&self) -> impl Iterator<Item = (PageId, &[u8])> {
        self.ids
            .iter()
            .copied()
            .zip(self.guards.iter().map(|g| &g[..]))
    }

    /// The bytes of the node key `i` of the group descends through.
    fn page_of(&self, i: usize) -> &[u8] {
        &self.guards[usize::from(self.of_key[i])]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{OrderedIndex, WriteOp};
    use crate::storage::{IoStats, MemVfs, PageFile, PageFileOptions, Vfs};
    use std::path::Path;
    use std::sync::Arc;

    fn tree(key_width: Option<usize>, value_width: Option<usize>, cache_bytes: usize) -> BTree {
        let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        let opts = PageFileOptions {
            page_size: 4096,
            direct: false,
        };
        let stats = Arc::new(IoStats::new());
        let file =
            PageFile::create(&vfs, Path::new("/db/data.pages"), opts, stats.clone()).unwrap();
        BTree::create(file, key_width, value_width, cache_bytes, stats).unwrap()
    }

    /// `get_many` answers every batch exactly as `get` answers each key: present and absent keys, keys
    /// repeated within a group, groups over one leaf and over many, and batches of every size around the
    /// group length.
    fn answers_like_get(tree: &BTree, present: &[Vec<u8>], absent: &[Vec<u8>]) {
        let mut keys: Vec<&[u8]> = present.iter().chain(absent).map(|k| &k[..]).collect();
        keys.extend(present.iter().step_by(5).map(|k| &k[..]));
        let len = keys.len();
        for i in 0..len {
            keys.swap(i, (i * 7919 + 11) % len);
        }
        // Sorted runs too: a group's keys then share leaves.
        keys.extend(present.iter().take(200).map(|k| &k[..]));
        let mut at = 0;
        let mut hits = 0;
        for size in [1usize, 16, 3, 17, 40, 15, 32].into_iter().cycle() {
            if at >= keys.len() {
                break;
            }
            let batch = &keys[at..(at + size).min(keys.len())];
            let mut got = vec![None];
            tree.get_many(batch, &mut got).unwrap();
            assert_eq!(
                got.len(),
                batch.len() + 1,
                "answers are appended, one per key"
            );
            for (k, v) in batch.iter().zip(&got[1..]) {
                let mut want = Vec::new();
                let found = tree.get(k, &mut want).unwrap();
                assert_eq!(v.as_ref(), found.then_some(&want), "key {k:?}");
                hits += usize::from(found);
            }
            at += size;
        }
        assert!(
            hits >= present.len(),
            "every present key was asked for and found"
        );
    }

    #[test]
    fn variable_keys_with_long_shared_starts_and_overflow_values() {
        let t = tree(None, None, 4 << 20);
        let key = |i: u32| format!("tenant-000000/user/{i:07}").into_bytes();
        let present: Vec<Vec<u8>> = (0..6000).map(|i| key(i * 2)).collect();
        let ops: Vec<WriteOp> = present
            .iter()
            .enumerate()
            .map(|(i, k)| WriteOp::Put {
                key: k.clone(),
                value: vec![i as u8; if i % 97 == 0 { 5000 } else { 1 + i % 120 }],
            })
            .collect();
        t.apply(&ops).unwrap();
        assert!(t.height() >= 3, "a tree with inner levels");
        assert!(group_len(t.pool.frame_count()) == GROUP);
        let mut absent: Vec<Vec<u8>> = (0..500).map(|i| key(i * 24 + 1)).collect();
        absent.extend([
            b"a".to_vec(),
            b"tenant-000000/user/9999999".to_vec(),
            b"zz".to_vec(),
        ]);
        absent.push(b"tenant-000000/user".to_vec());
        answers_like_get(&t, &present, &absent);
    }

    #[test]
    fn fixed_width_keys_and_values() {
        let t = tree(Some(8), Some(8), 4 << 20);
        let present: Vec<Vec<u8>> = (0..20_000u64)
            .map(|i| (i * 3).to_be_bytes().to_vec())
            .collect();
        let ops: Vec<WriteOp> = present
            .iter()
            .map(|k| WriteOp::Put {
                key: k.clone(),
                value: k.iter().rev().copied().collect(),
            })
            .collect();
        t.apply(&ops).unwrap();
        let absent: Vec<Vec<u8>> = (0..2000u64)
            .map(|i| (i * 30 + 1).to_be_bytes().to_vec())
            .collect();
        answers_like_get(&t, &present, &absent);
    }

    /// In a pool of a few frames, a batch pins no more than a lone lookup does, so it never runs the pool
    /// out of frames however large the batch.
    #[test]
    fn a_small_pool_is_never_exhausted() {
        let t = tree(None, None, 0);
        assert!(t.pool.frame_count() < 16, "the smallest pool");
        let present: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| format!("k{i:05}").into_bytes())
            .collect();
        let ops: Vec<WriteOp> = present
            .iter()
            .map(|k| WriteOp::Put {
                key: k.clone(),
                value: vec![7; 300],
            })
            .collect();
        t.apply(&ops).unwrap();
        answers_like_get(&t, &present, &[b"k".to_vec(), b"k99999".to_vec()]);
    }
}
