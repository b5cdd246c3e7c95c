//! Counts heap allocations of the page-level write path the B+-tree (and the Bε-tree) use, with a counting
//! global allocator (per thread): freeing and allocating pages allocates nothing once the page file's free
//! sets cover the ids, and the images of sealed pages a writer copies during a commit reuse the images the
//! previous commit wrote. Every allocation the writer makes there could wait on the allocator's arena lock
//! that the checkpoint thread holds while it frees blocks the writer allocated (see `page_file/id_set.rs`
//! and `BufferPool::spent_copies`).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use std::path::Path;
use std::sync::Arc;
use strata::lab::storage::{BufferPool, IoStats, MemVfs, PageFile, PageFileOptions, PageId, Vfs};
mod counting;
use counting::allocations;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

const PS: usize = 4096;

fn pool(frames: usize) -> BufferPool {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let opts = PageFileOptions {
        page_size: PS,
        direct: false,
    };
    let pf = PageFile::create(
        &vfs,
        Path::new("/db/data.pages"),
        opts,
        Arc::new(IoStats::new()),
    )
    .unwrap();
    BufferPool::new(pf, frames * PS, None)
}

fn allocate(pool: &BufferPool, n: usize) -> Vec<PageId> {
    (0..n)
        .map(|i| {
            let mut g = pool.allocate().unwrap();
            g[100] = i as u8;
            g.id()
        })
        .collect()
}

/// Pages of the working epoch freed and allocated again, round after round: after the first round (the
/// free set's memory grows once) no allocation at all.
#[test]
fn freeing_and_allocating_pages_allocates_nothing_in_the_steady_state() {
    let pool = pool(4096);
    let ids = allocate(&pool, 3000);
    let epoch = pool.file().epoch();
    let mut ids = ids;
    for round in 0..3 {
        let n = allocations(|| {
            for &id in &ids {
                pool.free(id, epoch);
            }
            for id in ids.iter_mut() {
                *id = pool.allocate().unwrap().id();
            }
        });
        if round > 0 {
            assert_eq!(
                n, 0,
                "round {round}: {n} allocations for 3,000 frees and allocations"
            );
        }
    }
}

/// During a commit in the background, a writer that copies sealed pages on write keeps their images for
/// the commit: after one commit returned its images, the next commit's copies take them (a handful of
/// allocations for the list, not one per page).
#[test]
fn sealed_page_copies_reuse_the_images_the_last_commit_wrote() {
    let pool = pool(4096);
    let mut ids = allocate(&pool, 200);
    for round in 0..3 {
        let sealed = pool.begin_commit(b"root").unwrap();
        // The writer copies every sealed page on write: each old image is kept for the commit.
        let n = allocations(|| {
            for id in ids.iter_mut() {
                let g = pool.write_cow(*id).unwrap();
                *id = g.id();
            }
        });
        std::thread::scope(|s| {
            s.spawn(|| pool.finish_commit(sealed).unwrap())
                .join()
                .unwrap()
        });
        if round > 0 {
            assert!(
                n < 20,
                "round {round}: {n} allocations for 200 copies on write of sealed pages"
            );
        }
    }
}
