//! Tests of `log`.

use super::*;
use crate::storage::fault_vfs::FaultVfs;
use crate::storage::mem_vfs::MemVfs;

fn payload(i: usize) -> Vec<u8> {
    (0..(i * 37) % 300).map(|j| (i + j) as u8 | 1).collect()
}

const HEADER: LogHeader = LogHeader {
    number: 7,
    base_seqno: 40,
    follows_unsynced: false,
};

/// Payloads with their frame offsets.
type Records = Vec<(Vec<u8>, u64)>;

fn recover(vfs: &Arc<dyn Vfs>, path: &Path, mode: RecoverMode) -> Result<(Records, LogRecovery)> {
    let mut got = Vec::new();
    let r = recover_log(vfs, path, Arc::new(IoStats::new()), mode, &mut |p, off| {
        got.push((p.to_vec(), off));
        Ok(())
    })?;
    Ok((got, r))
}

fn recover_all(vfs: &Arc<dyn Vfs>, path: &Path) -> (Records, LogRecovery) {
    recover(vfs, path, RecoverMode::Strict).unwrap()
}

fn setup() -> (Arc<MemVfs>, Arc<dyn Vfs>, PathBuf, Arc<IoStats>) {
    let mem = Arc::new(MemVfs::new());
    let vfs: Arc<dyn Vfs> = mem.clone();
    (mem, vfs, PathBuf::from("/db/wal"), Arc::new(IoStats::new()))
}

/// Writes `n` records; returns the frame offsets and the offset after the last frame.
fn write_records(
    vfs: &Arc<dyn Vfs>,
    path: &Path,
    stats: &Arc<IoStats>,
    n: usize,
) -> (Vec<u64>, u64) {
    let mut w = LogWriter::create(vfs, path, HEADER, stats.clone()).unwrap();
    assert!(w.is_empty());
    let mut offs = Vec::new();
    for i in 0..n {
        offs.push(LOG_DATA_START + w.len());
        w.append(&payload(i)).unwrap();
        if i % 3 == 0 {
            w.flush().unwrap();
        }
    }
    w.sync().unwrap();
    (offs, LOG_DATA_START + w.len())
}

fn corruption_offset(e: &Error) -> u64 {
    match e {
        Error::Corruption { offset, .. } => *offset,
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn roundtrip_header_and_counters() {
    let (mem, vfs, path, stats) = setup();
    let mut w = LogWriter::create(&vfs, &path, HEADER, stats.clone()).unwrap();
    assert_eq!(w.path(), path.as_path());
    assert_eq!(w.header(), HEADER);
    assert_eq!(
        mem.durable_bytes(&path).unwrap().len() as u64,
        LOG_GROWTH,
        "created preallocated and synced"
    );
    let before = stats.snapshot().kind(FileKind::Wal);
    w.append(b"one").unwrap();
    w.append(b"").unwrap();
    w.append(b"three").unwrap();
    assert_eq!(w.buffered_bytes(), 3 * 12 + 3 + 5);
    assert_eq!(w.len(), 44);
    assert_eq!(
        stats.snapshot().kind(FileKind::Wal).writes,
        before.writes,
        "append does no I/O"
    );
    w.sync().unwrap();
    assert_eq!(w.buffered_bytes(), 0);
    assert_eq!(w.len(), 44);
    let c = stats.snapshot().kind(FileKind::Wal);
    assert_eq!(
        (
            c.writes - before.writes,
            c.bytes_written - before.bytes_written,
            c.syncs - before.syncs
        ),
        (1, 44, 1)
    );
    w.flush().unwrap();
    assert_eq!(
        stats.snapshot().kind(FileKind::Wal).writes,
        before.writes + 1,
        "empty flush writes nothing"
    );
    drop(w);
    assert_eq!(read_log_header(&vfs, &path, &stats).unwrap(), HEADER);

    let (got, r) = recover_all(&vfs, &path);
    assert_eq!(
        got,
        vec![
            (b"one".to_vec(), 1024),
            (b"".to_vec(), 1039),
            (b"three".to_vec(), 1051)
        ]
    );
    assert_eq!(
        r,
        LogRecovery {
            header: HEADER,
            records: 3,
            valid_end: 1068,
            torn: None,
            salvaged: None,
            spare_slot_damage: None,
        }
    );
}

/// The `follows_unsynced` flag survives a growth's header rewrite; an unknown flag bit is refused.
#[test]
fn the_follows_unsynced_flag_round_trips_and_unknown_flags_are_refused() {
    let (mem, vfs, path, stats) = setup();
    let header = LogHeader {
        follows_unsynced: true,
        ..HEADER
    };
    let mut w = LogWriter::create_unsynced(&vfs, &path, header, stats.clone()).unwrap();
    w.append(&vec![7u8; 6000]).unwrap();
    w.flush().unwrap();
    drop(w);
    assert_eq!(read_log_header(&vfs, &path, &stats).unwrap(), header);
    let mut bytes = mem.file_bytes(&path).unwrap();
    for slot in [0usize, 512] {
        // The flags word of each slot (after magic and version), with its checksum recomputed.
        bytes[slot + 12] |= 2;
        let sum = xxh3_64(&bytes[slot..slot + SLOT_BODY]);
        bytes[slot + SLOT_BODY..slot + SLOT_LEN].copy_from_slice(&sum.to_le_bytes());
    }
    mem.set_file_bytes(&path, bytes);
    let e = read_log_header(&vfs, &path, &stats).unwrap_err();
    assert!(e.to_string().contains("unknown header flags"), "{e}");
}

#[test]
fn the_file_grows_in_steps_and_a_large_record_is_recovered() {
    let (mem, vfs, path, stats) = setup();
    let mut w = LogWriter::create(&vfs, &path, HEADER, stats.clone()).unwrap();
    let big: Vec<u8> = (0..3 * RECOVERY_CHUNK + 5)
        .map(|i| (i % 253) as u8)
        .collect();
    let mut expect = Vec::new();
    for i in 0..20_000 {
        let p = if i == 7000 { big.clone() } else { payload(i) };
        w.append(&p).unwrap();
        expect.push(p);
        if i % 1000 == 0 {
            w.flush().unwrap();
        }
    }
    w.sync().unwrap();
    let file_len = mem.file_bytes(&path).unwrap().len() as u64;
    assert_eq!(file_len % LOG_GROWTH, 0);
    assert!(file_len >= LOG_DATA_START + w.len());
    // The last growth at most doubled the file, by at most one step.
    assert!(file_len < LOG_DATA_START + w.len() + LOG_MAX_GROWTH_STEP);
    assert!(file_len < 2 * (LOG_DATA_START + w.len()) + LOG_GROWTH);
    let before = stats.snapshot().kind(FileKind::Wal).reads;
    let mut n = 0;
    let r = recover_log(
        &vfs,
        &path,
        stats.clone(),
        RecoverMode::Strict,
        &mut |p, _| {
            assert_eq!(p, &expect[n][..]);
            n += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(r.records, 20_000);
    assert_eq!(r.valid_end, LOG_DATA_START + w.len());
    assert_eq!((r.torn, r.salvaged), (None, None));
    let reads = stats.snapshot().kind(FileKind::Wal).reads - before;
    assert!(
        reads <= 2 * (file_len / RECOVERY_CHUNK as u64) + 4,
        "{reads} reads for {file_len} bytes"
    );
    assert!(matches!(
        w.append(&vec![0u8; MAX_LOG_RECORD + 1]),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_torn_tail_is_reported_and_earlier_records_recovered() {
    let (mem, vfs, path, stats) = setup();
    let mut w = LogWriter::create(&vfs, &path, HEADER, stats.clone()).unwrap();
    let mut offs = Vec::new();
    for i in 0..40 {
        offs.push(LOG_DATA_START + w.len());
        // Records of 600–900 bytes, so the last ones span sector boundaries.
        w.append(&vec![(i as u8) | 1; 600 + i * 7]).unwrap();
    }
    w.sync().unwrap();
    let end = (LOG_DATA_START + w.len()) as usize;
    let full = mem.file_bytes(&path).unwrap();
    let last = offs[39] as usize;
    // Every sector boundary inside the last record (and inside the one before it, with the last record's
    // sectors lost too): the sectors from there on were never written.
    for &from in &[offs[38] as usize, last] {
        let mut cut = from.div_ceil(512) * 512;
        if cut == from {
            cut += 512;
        }
        while cut < end {
            let mut bytes = full.clone();
            bytes[cut..].fill(0);
            mem.set_file_bytes(&path, bytes);
            let (got, r) = recover_all(&vfs, &path);
            let kept = if cut <= last { 38 } else { 39 };
            assert_eq!(got.len(), kept, "zeros from {cut}");
            assert_eq!(r.valid_end, offs[kept]);
            assert_eq!(r.torn, Some((offs[kept], full.len() as u64 - offs[kept])));
            assert_eq!(r.salvaged, None);
            cut += 512;
        }
    }
    // The header of the last frame cut at a sector boundary.
    let mut bytes = full.clone();
    let cut = (last + 4).div_ceil(512) * 512;
    if cut < last + 8 {
        bytes[cut..].fill(0);
        mem.set_file_bytes(&path, bytes);
        assert_eq!(
            recover_all(&vfs, &path).1.torn.map(|t| t.0),
            Some(last as u64)
        );
    }
}

#[test]
fn damage_is_corruption_with_its_offset_and_salvage_reports_it() {
    let (mem, vfs, path, stats) = setup();
    let (offs, end) = write_records(&vfs, &path, &stats, 9);
    let full = mem.file_bytes(&path).unwrap();
    let check = |bytes: Vec<u8>, at: u64, kept: usize, later: u64| {
        mem.set_file_bytes(&path, bytes);
        let e = recover(&vfs, &path, RecoverMode::Strict).unwrap_err();
        assert_eq!(corruption_offset(&e), at, "{e}");
        let (got, r) = recover(&vfs, &path, RecoverMode::Salvage).unwrap();
        assert_eq!(got.len(), kept);
        let s = r.salvaged.expect("salvaged");
        assert_eq!((s.offset, s.later_frames), (at, later), "{}", s.detail);
        assert_eq!(r.valid_end, at);
    };
    // A flipped payload byte in the middle record, in the last record, a flipped length, a flipped sum.
    for (rec, delta, later) in [(4usize, 8 + 3, 4u64), (8, 8 + 1, 0), (2, 0, 6), (8, 1, 0)] {
        let mut bytes = full.clone();
        bytes[offs[rec] as usize + delta] ^= 0x20;
        check(bytes, offs[rec], rec, later);
    }
    // The last record's payload sum overwritten (the frame's last byte).
    let mut bytes = full.clone();
    bytes[end as usize - 1] ^= 0xff;
    check(bytes, offs[8], 8, 0);
    // Garbage in the preallocated space after the last record.
    let mut bytes = full.clone();
    assert!(
        bytes.len() > end as usize + 700,
        "the file has zeros after the records"
    );
    bytes[end as usize + 700] = 7;
    check(bytes, end, 9, 0);
    // A length over the maximum with a matching head sum is damage too.
    let mut bytes = full.clone();
    let len = (MAX_LOG_RECORD as u32 + 1).to_le_bytes();
    let at = offs[2] as usize;
    bytes[at..at + 4].copy_from_slice(&len);
    bytes[at + 4..at + 8].copy_from_slice(&head_sum(len).to_le_bytes());
    check(bytes, offs[2], 2, 6);
}

#[test]
fn truncation_and_header_damage_are_corruption() {
    let (mem, vfs, path, stats) = setup();
    let (offs, end) = write_records(&vfs, &path, &stats, 9);
    let full = mem.file_bytes(&path).unwrap();
    for cut in [
        0usize,
        500,
        1023,
        offs[5] as usize,
        end as usize,
        full.len() - 1,
    ] {
        mem.set_file_bytes(&path, full[..cut].to_vec());
        let e = recover(&vfs, &path, RecoverMode::Strict).unwrap_err();
        assert!(matches!(e, Error::Corruption { .. }), "cut at {cut}: {e}");
    }
    // Salvage keeps what a truncated file still holds.
    mem.set_file_bytes(&path, full[..offs[5] as usize].to_vec());
    let (got, r) = recover(&vfs, &path, RecoverMode::Salvage).unwrap();
    assert_eq!(got.len(), 5);
    assert!(r.salvaged.unwrap().detail.contains("truncated"));
    // One damaged header slot: the other serves, the damage is reported.
    for slot in [0usize, 512] {
        let mut bytes = full.clone();
        bytes[slot + 30] ^= 1;
        mem.set_file_bytes(&path, bytes);
        let (got, r) = recover_all(&vfs, &path);
        assert_eq!(got.len(), 9);
        assert_eq!(r.header, HEADER);
        assert_eq!(r.spare_slot_damage.map(|d| d.0), Some(slot as u64));
    }
    // Both damaged: corruption at offset 0.
    let mut bytes = full.clone();
    bytes[30] ^= 1;
    bytes[512 + 30] ^= 1;
    mem.set_file_bytes(&path, bytes);
    let e = recover(&vfs, &path, RecoverMode::Strict).unwrap_err();
    assert_eq!(corruption_offset(&e), 0);
    assert!(read_log_header(&vfs, &path, &stats).is_err());
}

#[test]
fn a_lost_growth_is_a_torn_tail() {
    // The file grew (set_len + header slot) and a record was written across the old end, but the power
    // loss kept only the old length and header.
    let (mem, vfs, path, stats) = setup();
    let mut w = LogWriter::create(&vfs, &path, HEADER, stats.clone()).unwrap();
    w.append(&vec![5u8; LOG_GROWTH as usize - 2000]).unwrap();
    w.sync().unwrap();
    let durable = mem.file_bytes(&path).unwrap();
    w.append(&vec![6u8; 5000]).unwrap();
    w.flush().unwrap();
    let grown = mem.file_bytes(&path).unwrap();
    assert_eq!(grown.len() as u64, 2 * LOG_GROWTH);
    let mut bytes = grown[..LOG_GROWTH as usize].to_vec();
    bytes[..1024].copy_from_slice(&durable[..1024]);
    mem.set_file_bytes(&path, bytes);
    let (got, r) = recover_all(&vfs, &path);
    assert_eq!(got.len(), 1);
    assert!(r.torn.is_some());
    // With the growth durable, both records come back.
    mem.set_file_bytes(&path, grown);
    let (got, r) = recover_all(&vfs, &path);
    assert_eq!((got.len(), r.torn), (2, None));
    assert_eq!(r.spare_slot_damage, None);
}

#[test]
fn callback_error_aborts_and_missing_file_is_not_found() {
    let (mem, vfs, path, stats) = setup();
    write_records(&vfs, &path, &stats, 5);
    let before = mem.file_bytes(&path).unwrap();
    let mut seen = 0;
    let e = recover_log(
        &vfs,
        &path,
        stats.clone(),
        RecoverMode::Strict,
        &mut |_, _| {
            seen += 1;
            if seen == 3 {
                Err(Error::invalid("stop"))
            } else {
                Ok(())
            }
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(m) if m == "stop"));
    assert_eq!(
        mem.file_bytes(&path).unwrap(),
        before,
        "recovery never writes"
    );
    let e = recover_log(
        &vfs,
        Path::new("/db/nope"),
        stats,
        RecoverMode::Strict,
        &mut |_, _| Ok(()),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound));
}

#[test]
fn failed_write_keeps_the_buffer() {
    let mem = Arc::new(MemVfs::new());
    let fault = FaultVfs::new(mem.clone());
    let vfs: Arc<dyn Vfs> = Arc::new(fault.clone());
    let path = PathBuf::from("/wal");
    let stats = Arc::new(IoStats::new());
    let mut w = LogWriter::create(&vfs, &path, HEADER, stats.clone()).unwrap();
    w.append(b"a").unwrap();
    w.sync().unwrap();
    w.append(b"bb").unwrap();
    w.append(b"ccc").unwrap();
    fault.fail_after(0);
    assert!(w.flush().is_err());
    assert!(w.sync().is_err());
    assert_eq!(w.buffered_bytes(), 12 + 2 + 12 + 3);
    assert_eq!(w.len(), 13 + 29);
    fault.disarm();
    w.sync().unwrap();
    assert_eq!(w.buffered_bytes(), 0);
    // Write succeeded but sync failed: the data is written, the buffer is empty, a retry syncs.
    w.append(b"dddd").unwrap();
    fault.fail_after(1);
    assert!(w.sync().is_err());
    assert_eq!(w.buffered_bytes(), 0);
    fault.disarm();
    w.sync().unwrap();
    // A growth that fails part-way is retried whole.
    w.append(&vec![9u8; LOG_GROWTH as usize]).unwrap();
    fault.fail_after(1);
    assert!(w.flush().is_err());
    fault.disarm();
    w.sync().unwrap();
    drop(w);
    fault.crash();
    let (got, r) = recover_all(&vfs, &path);
    let got: Vec<Vec<u8>> = got.into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        got,
        vec![
            b"a".to_vec(),
            b"bb".to_vec(),
            b"ccc".to_vec(),
            b"dddd".to_vec(),
            vec![9u8; LOG_GROWTH as usize]
        ]
    );
    assert_eq!((r.torn, r.salvaged), (None, None));
}

/// A log written without syncs hands its written bytes to the device's writeback in steps of about
/// `WRITEBACK_STEP` (so a later sync has at most that much left to write), never bytes already synced, and
/// the records are unchanged by it.
#[test]
fn unsynced_writes_are_handed_to_writeback_in_steps() {
    let (mem, vfs, path, stats) = setup();
    let mut w = LogWriter::create(&vfs, &path, HEADER, stats).unwrap();
    let record = vec![7u8; 64 << 10];
    let mut flushed = 0u64;
    let mut max_pending = 0u64;
    for _ in 0..200 {
        w.append(&record).unwrap();
        w.flush().unwrap();
        flushed += (record.len() + LOG_FRAME_OVERHEAD) as u64;
        let hinted = mem.writeback_hinted(&path).unwrap();
        assert!(
            hinted <= flushed,
            "hinted {hinted} of {flushed} written bytes"
        );
        max_pending = max_pending.max(flushed - hinted);
    }
    assert!(
        max_pending < WRITEBACK_STEP + (64 << 10) + LOG_FRAME_OVERHEAD as u64,
        "{max_pending} written bytes were left for the next sync"
    );
    assert!(mem.writeback_hinted(&path).unwrap() >= flushed - WRITEBACK_STEP);
    // After a sync nothing already synced is handed back again.
    w.sync().unwrap();
    let at_sync = mem.writeback_hinted(&path).unwrap();
    w.append(&record).unwrap();
    w.flush().unwrap();
    assert_eq!(mem.writeback_hinted(&path).unwrap(), at_sync);
    drop(w);
    let (got, _) = recover_all(&vfs, &path);
    assert_eq!(got.len(), 201);
    assert!(got.iter().all(|(p, _)| *p == record));
}

/// Growth is geometric up to a step: 8 MiB written in 4 KiB flushes grows the file 15 times (4 KiB doubling
/// to 1 MiB, then 1 MiB steps), not once per 4 KiB — and every record comes back.
#[test]
fn the_file_grows_geometrically_up_to_a_step() {
    let (mem, vfs, path, stats) = setup();
    let mut w = LogWriter::create(&vfs, &path, HEADER, stats.clone()).unwrap();
    let before = stats.snapshot().kind(FileKind::Wal).writes;
    let record = vec![7u8; 4096 - LOG_FRAME_OVERHEAD];
    let flushes = 2048;
    for _ in 0..flushes {
        w.append(&record).unwrap();
        w.flush().unwrap();
    }
    let writes = stats.snapshot().kind(FileKind::Wal).writes - before;
    // Each flush is one write; each growth adds one header write.
    let growths = writes - flushes;
    assert!((8..=16).contains(&growths), "{growths} growths");
    let len = mem.file_bytes(&path).unwrap().len() as u64;
    assert_eq!(len % LOG_GROWTH, 0);
    assert!(
        len >= LOG_DATA_START + w.len() && len <= LOG_DATA_START + w.len() + LOG_MAX_GROWTH_STEP
    );
    w.sync().unwrap();
    drop(w);
    let (got, r) = recover_all(&vfs, &path);
    assert_eq!(got.len(), flushes as usize);
    assert!(got.iter().all(|(p, _)| *p == record));
    assert_eq!((r.torn, r.salvaged), (None, None));
}

/// The file is created and grows through `allocate` (blocks allocated at growth, `fallocate` on a real file
/// system), never by a sparse `set_len`: an append into sparse space would have to allocate its blocks,
/// and on ext4 wait for the block mapping while the write-back of earlier pages holds it.
#[test]
fn the_file_is_created_and_grown_with_its_blocks_allocated() {
    let (mem, vfs, path, stats) = setup();
    let mut w = LogWriter::create(&vfs, &path, HEADER, stats).unwrap();
    assert_eq!(mem.allocated(&path), Some(LOG_GROWTH));
    let record = vec![9u8; 3000];
    for _ in 0..1000 {
        w.append(&record).unwrap();
        w.flush().unwrap();
        let len = mem.file_bytes(&path).unwrap().len() as u64;
        assert_eq!(mem.allocated(&path), Some(len), "grown without allocating");
    }
    assert!(
        mem.file_bytes(&path).unwrap().len() > 2 << 20,
        "the file grew"
    );
}

/// A record encoded in place that turns out too long is refused and leaves nothing behind: the records
/// around it recover as written.
#[test]
fn oversized_record_encoded_in_place_is_refused_whole() {
    let (_mem, vfs, path, stats) = setup();
    let mut w = LogWriter::create(&vfs, &path, HEADER, stats).unwrap();
    w.append(&payload(1)).unwrap();
    let before = w.len();
    let e = w
        .append_with(|b| b.resize(b.len() + MAX_LOG_RECORD + 1, 7))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert_eq!(w.len(), before);
    w.append_with(|b| b.extend_from_slice(&payload(2))).unwrap();
    w.sync().unwrap();
    let (got, _) = recover_all(&vfs, &path);
    let payloads: Vec<Vec<u8>> = got.into_iter().map(|(p, _)| p).collect();
    assert_eq!(payloads, vec![payload(1), payload(2)]);
}
