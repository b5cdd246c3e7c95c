//! Tests of `page_file`.

use super::*;
use crate::storage::fault_vfs::FaultVfs;
use crate::storage::mem_vfs::MemVfs;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

const PS: usize = 4096;
const OPTS: PageFileOptions = PageFileOptions {
    page_size: PS,
    direct: false,
};

fn setup() -> (Arc<MemVfs>, Arc<dyn Vfs>, PathBuf, Arc<IoStats>) {
    let mem = Arc::new(MemVfs::new());
    let vfs: Arc<dyn Vfs> = mem.clone();
    (
        mem,
        vfs,
        PathBuf::from("/db/data.pages"),
        Arc::new(IoStats::new()),
    )
}

/// Writes a data page with a recognisable body.
fn write_data(pf: &PageFile, id: PageId, tag: u8) {
    let mut b = PageBuf::new(pf.page_size());
    set_page_type(&mut b, PageType::BTreeLeaf);
    set_page_epoch(&mut b, pf.epoch());
    b[100..200].fill(tag);
    pf.write_page(id, &mut b).unwrap();
}

fn read_tag(pf: &PageFile, id: PageId) -> u8 {
    let mut b = PageBuf::new(pf.page_size());
    pf.read_page(id, &mut b).unwrap();
    assert!(b[100..200].iter().all(|&x| x == b[100]));
    b[100]
}

fn corruption_offset(e: &Error) -> u64 {
    match e {
        Error::Corruption { offset, .. } => *offset,
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn create_reopen_keeps_user_root_and_epoch() {
    let (_mem, vfs, path, stats) = setup();
    let pf = PageFile::create(&vfs, &path, OPTS, stats.clone()).unwrap();
    assert_eq!(pf.epoch(), 1);
    assert_eq!(pf.page_count(), 2);
    assert!(pf.user_root().is_empty());
    assert_eq!(pf.path(), path.as_path());
    assert_eq!(stats.snapshot().kind(FileKind::Pages).writes, 2);
    assert_eq!(stats.snapshot().kind(FileKind::Pages).syncs, 1);
    let a = pf.allocate();
    assert_eq!(a, 2);
    write_data(&pf, a, 7);
    pf.commit(b"root-1").unwrap();
    assert_eq!(pf.epoch(), 2);
    let b = pf.allocate();
    write_data(&pf, b, 8);
    pf.commit(b"root-2").unwrap();
    assert_eq!(pf.check().unwrap(), 0);
    drop(pf);

    let pf = PageFile::open(&vfs, &path, OPTS, stats.clone()).unwrap();
    assert_eq!(pf.epoch(), 3);
    assert_eq!(pf.committed_epoch(), 2);
    assert_eq!(pf.user_root(), b"root-2");
    assert_eq!(pf.page_count(), 4);
    assert_eq!(read_tag(&pf, 2), 7);
    assert_eq!(read_tag(&pf, 3), 8);
    assert!(pf.unreachable_pages().is_empty());

    // A fresh file reopens at epoch 1 too.
    let p2 = PathBuf::from("/db/other.pages");
    drop(PageFile::create(&vfs, &p2, OPTS, stats.clone()).unwrap());
    let pf2 = PageFile::open(&vfs, &p2, OPTS, stats).unwrap();
    assert_eq!((pf2.epoch(), pf2.page_count()), (1, 2));
}

#[test]
fn options_and_user_root_are_validated() {
    let (_mem, vfs, path, stats) = setup();
    let bad = PageFileOptions {
        page_size: 1000,
        direct: false,
    };
    assert!(matches!(
        PageFile::create(&vfs, &path, bad, stats.clone()),
        Err(Error::InvalidArgument(_))
    ));
    let pf = PageFile::create(&vfs, &path, OPTS, stats.clone()).unwrap();
    assert!(matches!(
        pf.commit(&[0u8; 513]),
        Err(Error::InvalidArgument(_))
    ));
    pf.commit(&[1u8; 512]).unwrap();
    let mut b = PageBuf::new(PS);
    assert!(matches!(
        pf.write_page(0, &mut b),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        pf.write_page(1, &mut b),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        pf.write_page(2, &mut b),
        Err(Error::InvalidArgument(_))
    ));
    drop(pf);
    let pf = PageFile::open(&vfs, &path, OPTS, stats.clone()).unwrap();
    assert_eq!(pf.user_root(), vec![1u8; 512]);
    drop(pf);
    // Another page size: Incompatible naming both sizes.
    let big = PageFileOptions {
        page_size: 16384,
        direct: false,
    };
    match PageFile::open(&vfs, &path, big, stats.clone()) {
        Err(Error::Incompatible(msg)) => {
            assert!(msg.contains("4096") && msg.contains("16384"), "{msg}")
        }
        other => panic!("expected Incompatible, got {other:?}"),
    }
    let p16 = PathBuf::from("/db/p16");
    drop(PageFile::create(&vfs, &p16, big, stats.clone()).unwrap());
    match PageFile::open(&vfs, &p16, OPTS, stats.clone()) {
        Err(Error::Incompatible(msg)) => {
            assert!(msg.contains("4096") && msg.contains("16384"), "{msg}")
        }
        other => panic!("expected Incompatible, got {other:?}"),
    }
    // Missing file: Io NotFound.
    assert!(matches!(
        PageFile::open(&vfs, Path::new("/db/missing"), OPTS, stats),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound
    ));
}

#[test]
fn free_is_immediate_for_new_pages_and_pending_for_committed_ones() {
    let (_mem, vfs, path, stats) = setup();
    let pf = PageFile::create(&vfs, &path, OPTS, stats).unwrap();
    let a = pf.allocate();
    let b = pf.allocate();
    assert_eq!((a, b), (2, 3));
    // Allocated in this epoch: reusable immediately.
    pf.free(b, pf.epoch());
    assert_eq!(pf.free_count(), 1);
    assert_eq!(pf.allocate(), b);
    write_data(&pf, a, 1);
    write_data(&pf, b, 2);
    let committed_epoch = pf.epoch();
    pf.commit(b"").unwrap();

    // Page of the last commit: pending until the next commit.
    pf.free(a, committed_epoch);
    assert_eq!(pf.pending_count(), 1);
    let c = pf.allocate();
    assert_ne!(
        c, a,
        "a page of the last commit must not be reused before the next commit"
    );
    assert_eq!(c, 4);
    write_data(&pf, c, 3);
    assert_eq!(pf.unreachable_pages(), vec![a]);
    pf.commit(b"").unwrap();
    // After the commit the freed page is in the persisted free list, whose chain page came from a new page.
    assert_eq!(pf.pending_count(), 0);
    assert_eq!(pf.free_count(), 1);
    assert_eq!(pf.unreachable_pages(), vec![a, 5]);
    assert_eq!(pf.check().unwrap(), 1);
    assert_eq!(pf.allocate(), a);
    // The chain page itself becomes pending at the next commit, then reusable.
    pf.free(a, pf.epoch());
    pf.commit(b"").unwrap();
    // F = {a} ∪ {5} (old chain page); the new chain page comes from the reusable set ({a}), the list holds {5}.
    assert_eq!(pf.unreachable_pages(), vec![a, 5]);
    assert_eq!(pf.free_count(), 1);
    pf.commit(b"").unwrap();
    assert_eq!(pf.check().unwrap(), 1);
    assert_eq!(read_tag(&pf, b), 2);
    assert_eq!(read_tag(&pf, c), 3);
}

#[test]
fn randomized_allocation_matches_a_model_across_commits_and_reopens() {
    let (_mem, vfs, path, stats) = setup();
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
    let mut pf = PageFile::create(&vfs, &path, OPTS, stats.clone()).unwrap();
    // Model: live pages → (epoch, tag).
    let mut live: BTreeMap<PageId, (u64, u8)> = BTreeMap::new();
    for round in 0..60 {
        for _ in 0..rng.random_range(0..1200) {
            if live.is_empty() || rng.random_bool(0.55) {
                let id = pf.allocate();
                assert!(!live.contains_key(&id), "page {id} handed out twice");
                let tag = rng.random();
                write_data(&pf, id, tag);
                live.insert(id, (pf.epoch(), tag));
            } else {
                let idx = rng.random_range(0..live.len());
                let (&id, &(epoch, _)) = live.iter().nth(idx).unwrap();
                live.remove(&id);
                pf.free(id, epoch);
            }
        }
        pf.commit(&(round as u32).to_le_bytes()).unwrap();
        // Accounting: every page is live or unreachable, never both.
        let unreachable = pf.unreachable_pages();
        assert_eq!(unreachable.len() + live.len() + 2, pf.page_count() as usize);
        assert!(unreachable.iter().all(|id| !live.contains_key(id)));
        if round % 7 == 3 {
            let before_free = pf.free_count();
            let before_unreachable = unreachable.clone();
            pf.check().unwrap();
            drop(pf);
            pf = PageFile::open(&vfs, &path, OPTS, stats.clone()).unwrap();
            assert_eq!(pf.free_count(), before_free);
            assert_eq!(pf.unreachable_pages(), before_unreachable);
            assert_eq!(pf.user_root(), (round as u32).to_le_bytes());
            for (&id, &(_, tag)) in &live {
                assert_eq!(read_tag(&pf, id), tag);
            }
        }
    }
    assert!(pf.page_count() > 500);
}

#[test]
fn crash_during_commit_leaves_the_previous_commit() {
    // Fail the second commit at every I/O it does (2 free-list pages, the file length, sync, meta, sync),
    // then crash.
    let mut failures = 0;
    for budget in 0.. {
        let mem = Arc::new(MemVfs::new());
        let fault = FaultVfs::new(mem.clone());
        let vfs: Arc<dyn Vfs> = Arc::new(fault.clone());
        let path = PathBuf::from("/p");
        let stats = Arc::new(IoStats::new());
        let pf = PageFile::create(&vfs, &path, OPTS, stats.clone()).unwrap();
        let ids: Vec<PageId> = (0..600).map(|_| pf.allocate()).collect();
        for (i, &id) in ids.iter().enumerate() {
            write_data(&pf, id, (i % 251) as u8);
        }
        pf.commit(b"one").unwrap();
        let e1 = pf.epoch();
        // Free many pages (pending) and write new ones into fresh pages.
        for &id in &ids[..550] {
            pf.free(id, e1 - 1);
        }
        for _ in 0..10 {
            let id = pf.allocate();
            write_data(&pf, id, 0xEE);
        }
        fault.fail_after(budget);
        let r = pf.commit(b"two");
        if r.is_ok() {
            fault.crash();
            let re = PageFile::open(&vfs, &path, OPTS, stats).unwrap();
            assert_eq!(re.user_root(), b"two");
            assert_eq!(re.unreachable_pages().len(), 552);
            break;
        }
        failures += 1;
        // In-memory state unchanged after a failed commit.
        assert_eq!(pf.epoch(), e1);
        assert_eq!(pf.pending_count(), 550);
        fault.crash();
        let re = PageFile::open(&vfs, &path, OPTS, stats.clone()).unwrap();
        assert_eq!(re.user_root(), b"one");
        assert_eq!(re.epoch(), e1);
        assert_eq!(re.page_count(), 602);
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(read_tag(&re, id), (i % 251) as u8);
        }
    }
    assert_eq!(failures, 6);
}

#[test]
fn crash_before_meta_sync_and_unsynced_tail_is_cut() {
    let (mem, vfs, path, stats) = setup();
    let pf = PageFile::create(&vfs, &path, OPTS, stats.clone()).unwrap();
    let a = pf.allocate();
    write_data(&pf, a, 1);
    pf.commit(b"c1").unwrap();
    // Work after the commit: new pages written and synced, but no commit.
    for _ in 0..5 {
        let id = pf.allocate();
        write_data(&pf, id, 9);
    }
    pf.sync().unwrap();
    drop(pf);
    mem.crash();
    let pf = PageFile::open(&vfs, &path, OPTS, stats).unwrap();
    assert_eq!(pf.user_root(), b"c1");
    assert_eq!(pf.page_count(), 3);
    assert_eq!(
        mem.file_bytes(&path).unwrap().len(),
        3 * PS,
        "pages after the commit are cut"
    );
    assert_eq!(read_tag(&pf, a), 1);
    assert_eq!(pf.allocate(), 3);
}

#[test]
fn torn_meta_slot_falls_back_to_the_other() {
    let (mem, vfs, path, stats) = setup();
    let pf = PageFile::create(&vfs, &path, OPTS, stats.clone()).unwrap();
    let a = pf.allocate();
    write_data(&pf, a, 1);
    pf.commit(b"e1").unwrap(); // slot 1
    let b = pf.allocate();
    write_data(&pf, b, 2);
    pf.commit(b"e2").unwrap(); // slot 0
    drop(pf);
    // Tear slot 0 (the newest): garbage in its second half.
    let mut bytes = mem.file_bytes(&path).unwrap();
    bytes[2048..4096].fill(0xAB);
    mem.set_file_bytes(&path, bytes.clone());
    let pf = PageFile::open(&vfs, &path, OPTS, stats.clone()).unwrap();
    assert_eq!(pf.user_root(), b"e1");
    assert_eq!(pf.epoch(), 2);
    assert_eq!(read_tag(&pf, a), 1);
    // The next commit rewrites the torn slot, never the good one.
    pf.commit(b"e2-again").unwrap();
    drop(pf);
    let pf = PageFile::open(&vfs, &path, OPTS, stats.clone()).unwrap();
    assert_eq!(pf.user_root(), b"e2-again");
    drop(pf);

    // Both slots bad: Corruption naming both.
    let mut bytes = mem.file_bytes(&path).unwrap();
    bytes[100] ^= 1;
    bytes[PS + 100] ^= 1;
    mem.set_file_bytes(&path, bytes);
    match PageFile::open(&vfs, &path, OPTS, stats.clone()) {
        Err(Error::Corruption {
            offset: 0, detail, ..
        }) => {
            assert!(
                detail.contains("slot 0") && detail.contains("slot 1"),
                "{detail}"
            )
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    // Shorter than two pages: Corruption.
    mem.set_file_bytes(&path, vec![0u8; PS + 10]);
    assert!(matches!(
        PageFile::open(&vfs, &path, OPTS, stats),
        Err(Error::Corruption { .. })
    ));
}

#[test]
fn bit_flips_and_bad_references_are_corruption() {
    let (mem, vfs, path, stats) = setup();
    let pf = PageFile::create(&vfs, &path, OPTS, stats.clone()).unwrap();
    let ids: Vec<_> = (0..4).map(|_| pf.allocate()).collect();
    for &id in &ids {
        write_data(&pf, id, id as u8);
    }
    pf.commit(b"").unwrap();
    let mut bytes = mem.file_bytes(&path).unwrap();
    bytes[4 * PS + 3000] ^= 0x10; // page 4
    mem.set_file_bytes(&path, bytes);
    let mut b = PageBuf::new(PS);
    let e = pf.read_page(4, &mut b).unwrap_err();
    assert_eq!(corruption_offset(&e), 4 * PS as u64);
    assert!(e.to_string().contains("page 4: checksum mismatch"), "{e}");
    assert_eq!(read_tag(&pf, 3), 3);
    // Outside the file, or a meta slot.
    assert!(matches!(
        pf.read_page(6, &mut b),
        Err(Error::Corruption { .. })
    ));
    assert!(matches!(
        pf.read_page(1, &mut b),
        Err(Error::Corruption { .. })
    ));
    let e = pf.read_page(u64::MAX, &mut b).unwrap_err();
    assert_eq!(
        corruption_offset(&e),
        u64::MAX,
        "a wild id must not overflow"
    );
    // Allocated but never written: truncated.
    let n = pf.allocate();
    let e = pf.read_page(n, &mut b).unwrap_err();
    assert!(e.to_string().contains("truncated page"), "{e}");
    assert_eq!(corruption_offset(&e), n * PS as u64);
}

#[test]
fn damaged_free_list_is_corruption_with_its_offset() {
    let (mem, vfs, path, stats) = setup();
    let pf = PageFile::create(&vfs, &path, OPTS, stats.clone()).unwrap();
    let ids: Vec<_> = (0..20).map(|_| pf.allocate()).collect();
    for &id in &ids {
        write_data(&pf, id, 1);
    }
    pf.commit(b"").unwrap();
    for &id in &ids[..10] {
        pf.free(id, 1);
    }
    pf.commit(b"").unwrap();
    let head = *pf.state.lock().chain.first().unwrap();
    drop(pf);
    let good = mem.file_bytes(&path).unwrap();
    let off = head as usize * PS;

    // Bit flip in the chain page.
    let mut bytes = good.clone();
    bytes[off + 200] ^= 4;
    mem.set_file_bytes(&path, bytes);
    let e = PageFile::open(&vfs, &path, OPTS, stats.clone()).unwrap_err();
    assert_eq!(corruption_offset(&e), off as u64);

    // A duplicate id, re-checksummed so only the structure check can catch it.
    let mut bytes = good.clone();
    let (a, b) = (off + OFF_FL_IDS, off + OFF_FL_IDS + 8);
    let first: [u8; 8] = bytes[a..a + 8].try_into().unwrap();
    bytes[b..b + 8].copy_from_slice(&first);
    stamp_checksum(&mut bytes[off..off + PS], head);
    mem.set_file_bytes(&path, bytes);
    let e = PageFile::open(&vfs, &path, OPTS, stats.clone()).unwrap_err();
    assert_eq!(corruption_offset(&e), off as u64);
    assert!(e.to_string().contains("twice"), "{e}");

    // An id beyond the page count.
    let mut bytes = good.clone();
    bytes[a..a + 8].copy_from_slice(&1_000_000u64.to_le_bytes());
    stamp_checksum(&mut bytes[off..off + PS], head);
    mem.set_file_bytes(&path, bytes);
    let e = PageFile::open(&vfs, &path, OPTS, stats.clone()).unwrap_err();
    assert_eq!(corruption_offset(&e), off as u64);

    mem.set_file_bytes(&path, good);
    let pf = PageFile::open(&vfs, &path, OPTS, stats).unwrap();
    assert_eq!(pf.check().unwrap(), 10);
}

#[test]
fn works_on_real_files_with_and_without_o_direct() {
    use crate::storage::std_vfs::StdVfs;
    let dir = tempfile::tempdir().unwrap();
    let vfs: Arc<dyn Vfs> = Arc::new(StdVfs::new());
    let stats = Arc::new(IoStats::new());
    for direct in [false, true] {
        let path = dir.path().join(format!("direct-{direct}.pages"));
        let opts = PageFileOptions {
            page_size: 8192,
            direct,
        };
        let pf = match PageFile::create(&vfs, &path, opts, stats.clone()) {
            Ok(pf) => pf,
            Err(Error::InvalidArgument(msg)) if direct => {
                assert!(msg.contains("O_DIRECT"), "{msg}");
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        let ids: Vec<_> = (0..10).map(|_| pf.allocate()).collect();
        for &id in &ids {
            write_data(&pf, id, id as u8);
        }
        pf.commit(b"real").unwrap();
        pf.free(ids[0], 1);
        pf.commit(b"real2").unwrap();
        drop(pf);
        let pf = PageFile::open(&vfs, &path, opts, stats.clone()).unwrap();
        assert_eq!(pf.user_root(), b"real2");
        for &id in &ids[1..] {
            assert_eq!(read_tag(&pf, id), id as u8);
        }
        assert_eq!(pf.check().unwrap(), 1);
    }
}

/// Pages of 1 MiB and 4 MiB: create, allocate, write whole pages, commit (with a free-list page), reopen,
/// read back; damage anywhere in a page (its last byte included) is a checksum mismatch at its offset.
#[test]
fn large_pages_round_trip_and_detect_damage() {
    // A page body that differs in every 8-byte word and between pages, up to the last byte.
    fn fill(b: &mut [u8], tag: u64) {
        for (i, w) in b[PAGE_HEADER_LEN..].chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&((tag << 40) | i as u64).to_le_bytes());
        }
    }
    for ps in [1 << 20, page::MAX_PAGE_SIZE] {
        let (mem, vfs, path, stats) = setup();
        let opts = PageFileOptions {
            page_size: ps,
            direct: false,
        };
        let pf = PageFile::create(&vfs, &path, opts, stats.clone()).unwrap();
        assert_eq!(pf.page_size(), ps);
        let ids: Vec<PageId> = (0..4).map(|_| pf.allocate()).collect();
        assert_eq!(ids, vec![2, 3, 4, 5]);
        let mut b = PageBuf::new(ps);
        for &id in &ids {
            b.clear();
            set_page_type(&mut b, PageType::BeLeaf);
            set_page_epoch(&mut b, pf.epoch());
            fill(&mut b, id);
            pf.write_page(id, &mut b).unwrap();
        }
        pf.commit(b"big-1").unwrap();
        // Free a committed page: the next commit writes a free-list page of `ps` bytes.
        pf.free(ids[1], 1);
        pf.commit(b"big-2").unwrap();
        assert_eq!(pf.check().unwrap(), 1);
        assert_eq!(free_list_capacity(ps), (ps - OFF_FL_IDS) / 8);
        drop(pf);
        assert_eq!(mem.file_bytes(&path).unwrap().len(), 7 * ps);

        let pf = PageFile::open(&vfs, &path, opts, stats.clone()).unwrap();
        assert_eq!(pf.user_root(), b"big-2");
        assert_eq!(pf.committed_epoch(), 2);
        assert_eq!(pf.unreachable_pages(), vec![ids[1], 6]);
        let mut want = PageBuf::new(ps);
        for &id in [ids[0], ids[2], ids[3]].iter() {
            pf.read_page(id, &mut b).unwrap();
            want.clear();
            fill(&mut want, id);
            assert_eq!(&b[PAGE_HEADER_LEN..], &want[PAGE_HEADER_LEN..]);
            assert_eq!(page_epoch(&b), 1);
        }
        assert_eq!(
            pf.allocate(),
            ids[1],
            "the freed page is reused after reopening"
        );
        drop(pf);

        // Another page size is refused with both sizes named.
        let small = PageFileOptions {
            page_size: 65536,
            direct: false,
        };
        match PageFile::open(&vfs, &path, small, stats.clone()) {
            Err(Error::Incompatible(msg)) => {
                assert!(
                    msg.contains(&ps.to_string()) && msg.contains("65536"),
                    "{msg}"
                )
            }
            other => panic!("expected Incompatible, got {other:?}"),
        }

        // Damage to the last byte of page 4 and to the middle of page 3.
        let good = mem.file_bytes(&path).unwrap();
        for at in [5 * ps - 1, 2 * ps + ps / 2] {
            let mut bytes = good.clone();
            bytes[at] ^= 0x40;
            mem.set_file_bytes(&path, bytes);
            let pf = PageFile::open(&vfs, &path, opts, stats.clone()).unwrap();
            let id = (at / ps) as PageId;
            let e = pf.read_page(id, &mut b).unwrap_err();
            assert_eq!(corruption_offset(&e), id * ps as u64);
            assert!(e.to_string().contains("checksum mismatch"), "{e}");
            pf.read_page(5, &mut b).unwrap();
        }
        // A damaged newest meta slot falls back to the other one.
        let mut bytes = good;
        bytes[ps - 1] ^= 1; // slot 0 holds epoch 2
        mem.set_file_bytes(&path, bytes);
        let pf = PageFile::open(&vfs, &path, opts, stats).unwrap();
        assert_eq!(pf.user_root(), b"big-1");
    }
}

#[test]
fn large_free_list_spans_many_pages() {
    let (_mem, vfs, path, stats) = setup();
    let pf = PageFile::create(&vfs, &path, OPTS, stats.clone()).unwrap();
    let cap = free_list_capacity(PS);
    let n = cap * 3 + 17;
    for _ in 0..n {
        pf.allocate();
    }
    for id in 2..2 + n as u64 {
        pf.free(id, pf.epoch());
    }
    pf.commit(b"x").unwrap();
    // Chain pages came out of the free set, so no growth.
    assert_eq!(pf.page_count(), 2 + n as u64);
    let chain_len = pf.state.lock().chain.len();
    assert_eq!(chain_len, (n - chain_len).div_ceil(cap));
    assert_eq!(pf.unreachable_pages().len(), n);
    drop(pf);
    let pf = PageFile::open(&vfs, &path, OPTS, stats).unwrap();
    assert_eq!(pf.unreachable_pages().len(), n);
    assert_eq!(pf.free_count(), n - chain_len);
    assert_eq!(pf.check().unwrap(), (n - chain_len) as u64);
}

/// Found by the `page_file` fuzz target: a checksummed meta slot claiming epoch 2^64 − 1 made the working
/// epoch overflow. Such a slot is invalid, so open falls back to the other slot.
#[test]
fn meta_slot_with_the_last_epoch_is_invalid() {
    let (mem, vfs, path, stats) = setup();
    let pf = PageFile::create(&vfs, &path, OPTS, stats.clone()).unwrap();
    pf.commit(b"root").unwrap();
    assert_eq!(pf.committed_epoch(), 1);
    drop(pf);
    let mut bytes = mem.file_bytes(&path).unwrap();
    let slot = &mut bytes[PS..2 * PS];
    slot[OFF_EPOCH..OFF_EPOCH + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    set_page_epoch(slot, u64::MAX);
    stamp_checksum(slot, 1);
    mem.set_file_bytes(&path, bytes);
    let pf = PageFile::open(&vfs, &path, OPTS, stats).unwrap();
    assert_eq!(pf.committed_epoch(), 0);
    assert_eq!(pf.epoch(), 1);
}

/// Writes past the end reserve the blocks ahead of them ([`VfsFile::allocate_ahead`]) in steps, so pages
/// are not written into sparse space (module doc); the file's length and contents are what they were.
#[test]
fn writes_reserve_blocks_ahead_in_steps() {
    let (mem, vfs, path, stats) = setup();
    let pf = PageFile::create(&vfs, &path, OPTS, stats).unwrap();
    let step_pages = (RESERVE_STEP / PS as u64) as usize;
    for i in 0..3 * step_pages {
        let id = pf.allocate();
        write_data(&pf, id, i as u8);
        let end = (id + 1) * PS as u64;
        let ahead = mem.allocated_ahead(&path).unwrap();
        assert!(
            ahead >= end,
            "page {id} written past the reserved {ahead} bytes"
        );
        assert!(
            ahead <= end + end / 8 + 2 * RESERVE_STEP,
            "{ahead} bytes reserved for {end}"
        );
    }
    assert_eq!(
        mem.file_bytes(&path).unwrap().len() as u64,
        pf.page_count() * PS as u64,
        "the reservation changed the file's length"
    );
    assert_eq!(read_tag(&pf, 5), 3);
}
