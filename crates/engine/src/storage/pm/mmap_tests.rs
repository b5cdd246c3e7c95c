//! Tests of `MmapRegion`, and the semantics every `Pm` backend shares.

use std::sync::Arc;

use super::*;
use crate::error::Error;

fn is_invalid<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument(_)))
}

/// The behaviour every backend must share: round trips at any alignment, little-endian words, atomics,
/// non-temporal writes, and bounds/alignment errors that change nothing.
fn check_semantics(pm: &dyn Pm) {
    let len = pm.len();
    assert_eq!(len, 1024);
    assert!(!pm.is_empty());

    // Bytes at an unaligned offset spanning words and a cache line boundary.
    let data: Vec<u8> = (1..=100).collect();
    pm.write(61, &data).unwrap();
    assert_eq!(pm.read_vec(61, 100).unwrap(), data);
    assert_eq!(pm.read_vec(60, 1).unwrap(), [0]);
    assert_eq!(pm.read_vec(161, 1).unwrap(), [0]);

    // Words: unaligned plain, aligned atomic, all little-endian.
    pm.write_u64(203, 0x1122_3344_5566_7788).unwrap();
    assert_eq!(pm.read_u64(203).unwrap(), 0x1122_3344_5566_7788);
    assert_eq!(pm.read_vec(203, 1).unwrap(), [0x88]);
    pm.store_u64_atomic(512, 42).unwrap();
    assert_eq!(pm.load_u64_atomic(512).unwrap(), 42);
    assert_eq!(pm.read_vec(512, 2).unwrap(), [42, 0]);
    assert_eq!(pm.compare_exchange_u64(512, 41, 7).unwrap(), Err(42));
    assert_eq!(pm.compare_exchange_u64(512, 42, 7).unwrap(), Ok(42));
    assert_eq!(pm.read_u64(512).unwrap(), 7);

    // Non-temporal XPLines.
    let block: Vec<u8> = (0..512).map(|i| (i % 251) as u8).collect();
    pm.write_nt(256, &block).unwrap();
    pm.fence();
    assert_eq!(pm.read_vec(256, 512).unwrap(), block);

    // Persist primitives accept any in-range span, including empty ones.
    pm.flush(0, len).unwrap();
    pm.flush(1023, 1).unwrap();
    pm.flush(len, 0).unwrap();
    pm.persist(3, 70).unwrap();
    pm.fence();

    // Errors: out of range (including offset overflow), misaligned atomics and non-temporal writes.
    let before = pm.read_vec(0, len as usize).unwrap();
    assert!(is_invalid(pm.write(1020, &[9; 8])));
    assert!(is_invalid(pm.read(1017, &mut [0; 8])));
    assert!(is_invalid(pm.read(u64::MAX, &mut [0; 2])));
    assert!(is_invalid(pm.write(u64::MAX - 1, &[1; 4])));
    assert!(is_invalid(pm.read_u64(1020)));
    assert!(is_invalid(pm.read_vec(1000, 100)));
    assert!(is_invalid(pm.store_u64_atomic(4, 1)));
    assert!(is_invalid(pm.store_u64_atomic(1024, 1)));
    assert!(is_invalid(pm.load_u64_atomic(12)));
    assert!(is_invalid(pm.compare_exchange_u64(1, 0, 1)));
    assert!(is_invalid(pm.write_nt(128, &[1; 256])));
    assert!(is_invalid(pm.write_nt(256, &[1; 128])));
    assert!(is_invalid(pm.write_nt(768, &[1; 512])));
    assert!(is_invalid(pm.flush(1000, 25)));
    assert!(is_invalid(pm.persist(1024, 1)));
    assert_eq!(
        pm.read_vec(0, len as usize).unwrap(),
        before,
        "a refused access changed bytes"
    );
}

#[test]
fn every_backend_has_the_same_semantics() {
    for mode in [PersistMode::Adr, PersistMode::Eadr] {
        check_semantics(&MmapRegion::anonymous(1024, mode).unwrap());
        check_semantics(&ShadowPm::new(1024, mode).unwrap());
        check_semantics(&CountingPm::new(MmapRegion::anonymous(1024, mode).unwrap()));
        let dir = tempfile::tempdir().unwrap();
        check_semantics(&MmapRegion::create(dir.path().join("pm"), 1024, mode).unwrap());
    }
}

#[test]
fn file_region_reopens_with_synced_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("region.pm");
    {
        let pm = MmapRegion::create(&path, 64 * 1024, PersistMode::Adr).unwrap();
        assert_eq!(pm.path(), Some(path.as_path()));
        assert_eq!(pm.len(), 64 * 1024);
        pm.write(100, b"hello, persistent world").unwrap();
        pm.store_u64_atomic(60 * 1024, 0xdead_beef).unwrap();
        pm.persist(100, 23).unwrap();
        pm.persist(60 * 1024, 8).unwrap();
        pm.sync_range(60 * 1024, 8).unwrap();
        pm.sync().unwrap();
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 * 1024);
    let pm = MmapRegion::open(&path, PersistMode::Eadr).unwrap();
    assert_eq!(pm.len(), 64 * 1024);
    assert_eq!(pm.mode(), PersistMode::Eadr);
    assert_eq!(pm.read_vec(100, 23).unwrap(), b"hello, persistent world");
    assert_eq!(pm.load_u64_atomic(60 * 1024).unwrap(), 0xdead_beef);
    assert_eq!(pm.read_u64(0).unwrap(), 0);
    // The bytes went to the file itself, not just to this process's mapping.
    let raw = std::fs::read(&path).unwrap();
    assert_eq!(&raw[100..123], b"hello, persistent world");

    // `create` never clobbers an existing file.
    let again = MmapRegion::create(&path, 1024, PersistMode::Adr);
    assert!(matches!(again, Err(Error::Io { .. })), "{again:?}");
    assert!(is_invalid(pm.sync_range(64 * 1024 - 8, 16)));
}

#[test]
fn region_lengths_must_be_whole_xplines() {
    let dir = tempfile::tempdir().unwrap();
    assert!(is_invalid(MmapRegion::create(
        dir.path().join("a"),
        0,
        PersistMode::Adr
    )));
    assert!(is_invalid(MmapRegion::create(
        dir.path().join("b"),
        300,
        PersistMode::Adr
    )));
    assert!(is_invalid(MmapRegion::anonymous(100, PersistMode::Adr)));
    let odd = dir.path().join("odd");
    std::fs::write(&odd, [0u8; 100]).unwrap();
    assert!(is_invalid(MmapRegion::open(&odd, PersistMode::Adr)));
    let missing = MmapRegion::open(dir.path().join("missing"), PersistMode::Adr);
    assert!(matches!(missing, Err(Error::Io { .. })));
    assert!(is_invalid(ShadowPm::new(100, PersistMode::Adr)));
    assert!(is_invalid(ShadowPm::from_image(
        Vec::new(),
        PersistMode::Adr
    )));
}

#[test]
fn concurrent_byte_writes_to_one_word_keep_each_other() {
    // Eight threads own one byte each of the same word and overwrite it repeatedly. A partial-word write that
    // did a plain load-merge-store would lose other threads' bytes; the compare-exchange merge must not.
    let pm = Arc::new(MmapRegion::anonymous(256, PersistMode::Adr).unwrap());
    let start = Arc::new(std::sync::Barrier::new(8));
    let threads: Vec<_> = (0..8u8)
        .map(|i| {
            let pm = Arc::clone(&pm);
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                for round in 0..50_000u32 {
                    pm.write(64 + u64::from(i), &[round as u8]).unwrap();
                }
                pm.write(64 + u64::from(i), &[0xa0 + i]).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let expect: Vec<u8> = (0..8).map(|i| 0xa0 + i).collect();
    assert_eq!(pm.read_vec(64, 8).unwrap(), expect);
}

#[test]
fn compare_exchange_is_atomic_across_threads() {
    let pm = Arc::new(MmapRegion::anonymous(256, PersistMode::Eadr).unwrap());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let pm = Arc::clone(&pm);
            std::thread::spawn(move || {
                for _ in 0..5_000 {
                    let mut cur = pm.load_u64_atomic(8).unwrap();
                    while let Err(seen) = pm.compare_exchange_u64(8, cur, cur + 1).unwrap() {
                        cur = seen;
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(pm.load_u64_atomic(8).unwrap(), 20_000);
}

#[test]
fn flush_instruction_is_detected() {
    let pm = MmapRegion::anonymous(256, PersistMode::Adr).unwrap();
    let instr = pm.flush_instruction();
    assert_eq!(instr, arch::flush_instr());
    #[cfg(target_arch = "x86_64")]
    assert!(matches!(
        instr,
        arch::FlushInstr::Clwb | arch::FlushInstr::Clflushopt | arch::FlushInstr::Clflush
    ));
    assert!(!instr.name().is_empty());
    assert_eq!(PersistMode::Eadr.name(), "eadr");
}
