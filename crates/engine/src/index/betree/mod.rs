//! # Bε-tree (fractal tree)
//!
//! A write-optimized tree for data larger than memory (issue 5, design facts in `reference/betree.md`):
//! nodes of one page; an inner node spends about B^ε of its page on pivots and the rest on a buffer of
//! messages (puts, deletes, upserts with sequence numbers) that move down in batches, so a random insert costs
//! O((log_B N) / B^(1−ε)) I/Os amortised instead of a B+-tree's O(log_B N).
//!
//! Built so far:
//! * [`message`]: messages, the merge operator of upserts, node buffers (one terminal message or a run of
//!   upserts per key) and their application to leaf records and to reads.
//! * [`node`]: leaves and inner nodes (pivots, children, one message buffer), decoded and encoded whole,
//!   with a page format whose every length, order and id is checked on decode.
//! * [`tree`]: the core over the buffer pool — writes as messages, heaviest-child flushes, splits, point
//!   and range reads that never write, merges of underfull children. Not built yet: checkpoints and reopen, the
//!   engine shell, `strata check`, the CLI and the `betree-io` suite.
//!
//! Invariants kept by every part: a message only moves down the tree, so along any root-to-leaf path the
//! messages of a key are newer the higher they sit; a read applies them from the leaf upwards and never
//! writes.

pub mod message;
pub mod node;
pub mod tree;
