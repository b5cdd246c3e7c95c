//! The Bε-tree's I/O against its cost model, on the counting in-memory backend (deterministic: the counts
//! are the storage layer's, so this test cannot be flaky).
//!
//! Setting: 8-byte pairs (u32 keys and values, fixed width), 4 KiB pages, ε = ½ (F = 22 children), a buffer
//! pool of 8 pages. Cost model: a message is flushed at most h − 1 times on its way from the root to a leaf;
//! a flush moves at least a 1/F share of a full buffer of b messages (the heaviest child's) and costs at most
//! 3 page I/Os amortised (the child read, its write-back, and its share of splits). So a random insert costs
//! at most 3 · (h − 1) · F / b page I/Os, amortised, against ~h for a B+-tree.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::sync::Arc;
use strata::Direction;
use strata::KeyRange;
use strata::WriteOp;
use strata::lab::index::OrderedIndex;
use strata::lab::index::betree::BeTree;
use strata::lab::index::betree::node::NodeFormat;
use strata::lab::storage::IoStats;
use strata::lab::storage::PageFile;
use strata::lab::storage::PageFileOptions;
use strata::vfs::FileKind;
use strata::vfs::MemVfs;
use strata::vfs::Vfs;

const PAGE: usize = 4096;

fn pairs_tree(stats: &Arc<IoStats>) -> BeTree {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let opts = PageFileOptions {
        page_size: PAGE,
        direct: false,
    };
    let file = PageFile::create(&vfs, Path::new("/io.pages"), opts, stats.clone()).unwrap();
    let format = NodeFormat {
        key_width: Some(4),
        value_width: Some(4),
    };
    BeTree::create(file, format, None, 0.5, 8 * PAGE, stats.clone()).unwrap()
}

fn page_io(stats: &IoStats) -> (u64, u64) {
    let c = stats.snapshot().kind(FileKind::Pages);
    (c.reads, c.writes)
}

#[test]
fn random_inserts_stay_under_the_cost_model_and_queries_never_write() {
    let n: u32 = 300_000;
    let stats = Arc::new(IoStats::new());
    let tree = pairs_tree(&stats);
    let fanout = tree.core().fanout();
    assert_eq!(fanout, 22);
    // Messages a full inner buffer holds at least: the page less its header, F child ids and F − 1 pivots,
    // at 8 bytes and 2 kind bits a message.
    let buffer_msgs = ((PAGE - 48 - fanout * 8 - (fanout - 1) * 4) * 4 / 33) as f64;
    // A fixed random permutation of 0..n.
    let mut keys: Vec<u32> = (0..n).collect();
    keys.shuffle(&mut ChaCha8Rng::seed_from_u64(5));
    assert_eq!(keys.len(), n as usize);
    let (r0, w0) = page_io(&stats);
    for &k in &keys {
        tree.apply(&[WriteOp::Put {
            key: k.to_be_bytes().to_vec(),
            value: (k ^ 7).to_be_bytes().to_vec(),
        }])
        .unwrap();
    }
    tree.checkpoint(1).unwrap();
    let (r1, w1) = page_io(&stats);
    let height = tree.core().height() as f64;
    let per_insert = ((r1 - r0) + (w1 - w0)) as f64 / n as f64;
    let bound = 3.0 * (height - 1.0) * fanout as f64 / buffer_msgs;
    eprintln!(
        "height {height}, b ≥ {buffer_msgs}, {per_insert:.4} page I/Os per insert, bound {bound:.4}, {:?}",
        tree.flush_stats()
    );
    assert!(
        height >= 4.0,
        "the tree must be deep enough to test flushes"
    );
    assert!(
        per_insert <= bound,
        "{per_insert} page I/Os per insert exceed the cost model's {bound}"
    );
    let flushes = tree.flush_stats();
    assert!(flushes.flushes > 0);
    assert_eq!(
        flushes.below_share, 0,
        "every flush moves at least a 1/F share of its node's buffer"
    );
    assert!(
        flushes.messages_moved as f64 / flushes.flushes as f64 >= buffer_msgs / fanout as f64 / 2.0,
        "{flushes:?}"
    );

    // Queries: point reads of every key and full scans both ways — correct, and not one page written.
    let (_, w_before) = page_io(&stats);
    let mut out = Vec::new();
    for &k in keys.iter().step_by(7) {
        assert!(tree.get(&k.to_be_bytes(), &mut out).unwrap());
        assert_eq!(out, (k ^ 7).to_be_bytes());
    }
    assert!(!tree.get(&n.to_be_bytes(), &mut out).unwrap());
    for dir in [Direction::Forward, Direction::Reverse] {
        let mut expect = if dir == Direction::Forward { 0 } else { n - 1 };
        let seen = tree
            .scan_visit(&KeyRange::all(), dir, usize::MAX, &mut |k, v| {
                assert_eq!(k, expect.to_be_bytes());
                assert_eq!(v, (expect ^ 7).to_be_bytes());
                expect = if dir == Direction::Forward {
                    expect + 1
                } else {
                    expect.wrapping_sub(1)
                };
                Ok(true)
            })
            .unwrap();
        assert_eq!(seen, n as usize);
    }
    assert_eq!(tree.len(), u64::from(n));
    let (_, w_after) = page_io(&stats);
    assert_eq!(w_after, w_before, "queries wrote pages");
    tree.check().unwrap();
}
