//! # Bε-tree (fractal tree)
//!
//! A write-optimized tree for data larger than memory (issue 5, design facts in `reference/betree.md`):
//! nodes of one page; an inner node spends about B^ε of its page on pivots and the rest on a buffer of
//! messages (puts, deletes, upserts; ordered by write, see below) that move down in batches, so a random insert costs
//! O((log_B N) / B^(1−ε)) I/Os amortised instead of a B+-tree's O(log_B N).
//!
//! Parts:
//! * [`bytes`]: keys and values held inline up to 16 bytes; 8-byte keys compared as integers.
//! * [`message`]: messages, the merge operator of upserts, node buffers (one terminal message or a run of
//!   upserts per key) and their application to leaf records and to reads.
//! * [`node`]: leaves and inner nodes (pivots, children, one message buffer), decoded and encoded whole,
//!   with a page format whose every length, order and id is checked on decode; fixed-width keys and values
//!   are stored without lengths and searched in place.
//! * [`tree`]: the core over the buffer pool — writes as messages, heaviest-child flushes, splits, merges of
//!   underfull children, point and range reads that never write.
//! * `db_index` ([`BeTree`]): the core as an `OrderedIndex` for the `Db` shell — locking, checkpoints in
//!   the page file's root record (`meta`), merges by a named operator ([`merge_ops`]).
//! * `check`: `strata check` — pivots, buffer order and routing, levels, MSNs, page accounting, checksums.
//!
//! Messages carry their sequence numbers implicitly: within a buffer a key's messages are kept in write
//! order (newest last) and each node records the newest MSN it holds (`max_msn`, never above its
//! parent's). A per-message MSN would double the size of an 8-byte pair in a buffer, halving the batch a
//! flush moves; order plus the node's MSN answers every question one would (which message is newer, and
//! whether a node already holds a write — the WAL replay is idempotent at the shell's sequence number).
//!
//! Invariants kept by every part: a message only moves down the tree, so along any root-to-leaf path the
//! messages of a key are newer the higher they sit; a read applies them from the leaf upwards and never
//! writes.

pub mod bytes;
mod check;
mod db_index;
pub mod family;
pub mod merge_ops;
pub mod message;
pub(crate) mod meta;
pub mod node;
pub mod tree;

pub use db_index::{BeTree, BeTreeOptions};
pub use merge_ops::BUILTIN_MERGE_OPERATORS;
