//! Tests of `shard_file`.

use super::*;
use crate::storage::MemVfs;

fn run(n: u64, tombs: u64, weighted: bool) -> SortedRun {
    SortedRun {
        records: (0..n)
            .map(|i| Record {
                key: i * 3,
                value: i,
                weight: if weighted { (i % 7) as f64 * 0.1 } else { 1.0 },
            })
            .collect(),
        tombstones: (0..tombs).map(|j| j * 5 + 1).collect(),
    }
}

fn filters(r: &SortedRun) -> (BloomFilter, Option<BloomFilter>) {
    super::super::version::filters_for_run(r, 0.01).unwrap()
}

#[test]
fn written_files_read_back_whole_and_by_summary() {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let stats = Arc::new(IoStats::new());
    for (n, t, weighted) in [
        (0, 0, false),
        (1, 0, true),
        (700, 3, false),
        (5000, 1200, true),
    ] {
        let r = run(n, t, weighted);
        let (kf, tf) = filters(&r);
        let (path, w) = write_test_shard(&vfs, &stats, 7, &r, weighted);
        let f = ShardFile::open(&vfs, &path, 7, 4096, false, stats.clone()).unwrap();
        assert_eq!(w.bytes, f.header.total_pages() * 4096);
        let (sum, kf2, tf2) = f.read_summary().unwrap();
        assert_eq!(sum, w.summary);
        assert_eq!(kf2.to_bytes(), kf.to_bytes());
        assert_eq!(tf2.map(|f| f.to_bytes()), tf.map(|f| f.to_bytes()));
        let all = f.read_all().unwrap();
        assert_eq!(all.run, r);
        assert_eq!(f.verify_all().unwrap(), n);
    }
}

#[test]
fn damage_is_reported_with_its_offset() {
    let mem = Arc::new(MemVfs::new());
    let vfs: Arc<dyn Vfs> = mem.clone();
    let stats = Arc::new(IoStats::new());
    let r = run(2000, 10, false);
    let (path, _) = write_test_shard(&vfs, &stats, 3, &r, false);
    let mut bytes = mem.file_bytes(&path).unwrap();
    bytes[2 * 4096 + 100] ^= 1;
    mem.set_file_bytes(&path, bytes);
    let f = ShardFile::open(&vfs, &path, 3, 4096, false, stats.clone()).unwrap();
    let e = f.read_all().err().unwrap();
    assert!(
        matches!(e, Error::Corruption { offset, .. } if offset == 2 * 4096),
        "{e}"
    );
    // The wrong id is refused at the header.
    assert!(ShardFile::open(&vfs, &path, 4, 4096, false, stats).is_err());
}

/// Pages of 1 MiB and 4 MiB: several record and tombstone pages written in batches of at most 4 MiB, read
/// back whole and by summary; a damaged page is corruption at its offset.
#[test]
fn large_pages_round_trip_in_bounded_batches() {
    assert_eq!(
        [4096, 65536, 128 << 10, 1 << 20, 4 << 20].map(batch_pages),
        [64, 64, 32, 4, 1]
    );
    let mem = Arc::new(MemVfs::new());
    let vfs: Arc<dyn Vfs> = mem.clone();
    let stats = Arc::new(IoStats::new());
    let path = Path::new("/d").join(shard_file_name(11));
    for (ps, n, t, weighted) in [
        (1 << 20, 300_000, 140_000, false),
        (1 << 20, 100_000, 0, true),
        (4 << 20, 200_000, 10, true),
    ] {
        let r = run(n, t, weighted);
        let (kf, tf) = filters(&r);
        let before = stats.snapshot();
        let w = write_run_file(
            &vfs,
            &path,
            &stats,
            11,
            &r,
            (&kf, tf.as_ref()),
            weighted,
            ps,
            false,
        )
        .unwrap();
        let io = (stats.snapshot() - before).kind(FileKind::Shards);
        let f = ShardFile::open(&vfs, &path, 11, ps, false, stats.clone()).unwrap();
        let h = f.header.clone();
        assert_eq!(h.per_page(), (ps - TRAILER) / record_size(weighted));
        assert!(h.record_pages >= 2, "{h:?}");
        assert_eq!(h.record_pages, n.div_ceil(h.per_page() as u64));
        assert_eq!(h.tomb_pages, t.div_ceil(h.tombs_per_page() as u64));
        assert_eq!(w.bytes, h.total_pages() * ps as u64);
        // Pages 1.. in batches of at most 4 MiB, then the header.
        let batch = batch_pages(ps) as u64;
        assert_eq!(io.writes, (h.total_pages() - 1).div_ceil(batch) + 1);
        assert_eq!(io.bytes_written, w.bytes);
        let (sum, kf2, tf2) = f.read_summary().unwrap();
        assert_eq!(sum, w.summary);
        assert_eq!(kf2.to_bytes(), kf.to_bytes());
        assert_eq!(tf2.map(|f| f.to_bytes()), tf.map(|f| f.to_bytes()));
        assert_eq!(f.read_all().unwrap().run, r);
        assert_eq!(f.verify_all().unwrap(), n);

        // Damage in the middle of record page 2.
        let mut bytes = mem.file_bytes(&path).unwrap();
        bytes[2 * ps + ps / 2] ^= 1;
        mem.set_file_bytes(&path, bytes);
        let f = ShardFile::open(&vfs, &path, 11, ps, false, stats.clone()).unwrap();
        let e = f.read_all().err().unwrap();
        assert!(
            matches!(e, Error::Corruption { offset, .. } if offset == 2 * ps as u64),
            "{e}"
        );
        // Opened with another page size: refused at the header.
        assert!(ShardFile::open(&vfs, &path, 11, ps / 2, false, stats.clone()).is_err());
    }
}

#[test]
fn out_of_order_input_is_refused() {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let stats = Arc::new(IoStats::new());
    let mut w = ShardWriter::create(&vfs, Path::new("/d/x"), stats, 1, 4096, false, false).unwrap();
    let rec = |key| Record {
        key,
        value: 0,
        weight: 1.0,
    };
    w.push_record(&rec(5)).unwrap();
    assert!(w.push_record(&rec(5)).is_err());
    w.push_tombstone(9).unwrap();
    assert!(w.push_tombstone(2).is_err());
}
