//! Tests of the traffic model (`CountingPm` over `XpBuffer`) on hand-computed sequences.

use std::collections::BTreeSet;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;

fn counting(len: u64, mode: PersistMode, config: TrafficConfig) -> CountingPm<MmapRegion> {
    CountingPm::with_config(MmapRegion::anonymous(len, mode).unwrap(), config).unwrap()
}

fn one_dimm() -> TrafficConfig {
    TrafficConfig {
        dimms: 1,
        ..TrafficConfig::default()
    }
}

#[test]
fn full_xpline_write_costs_one_media_write_and_no_read() {
    // Through the cache: four dirty lines written back by one persist.
    let pm = counting(1 << 16, PersistMode::Adr, TrafficConfig::default());
    pm.write(512, &[7; 256]).unwrap();
    pm.persist(512, 256).unwrap();
    pm.drain();
    let t = pm.snapshot();
    assert_eq!((t.cpu_write_bytes, t.cpu_read_bytes), (256, 0));
    assert_eq!(
        (t.media_write_bytes, t.media_read_bytes, t.rmw_xplines),
        (256, 0, 0)
    );
    assert_eq!((t.requested_write_bytes, t.flushes, t.fences), (256, 1, 1));

    // Non-temporally: same media cost, nothing left dirty.
    let pm = counting(1 << 16, PersistMode::Adr, TrafficConfig::default());
    pm.write(1024, &[1; 8]).unwrap(); // A dirty line that the NT write overwrites whole.
    pm.write_nt(1024, &[7; 256]).unwrap();
    pm.fence();
    assert_eq!(pm.dirty_lines(), 0);
    pm.drain();
    let t = pm.snapshot();
    assert_eq!(
        (t.cpu_write_bytes, t.media_write_bytes, t.media_read_bytes),
        (256, 256, 0)
    );
}

#[test]
fn partial_writes_to_four_xplines_cost_read_modify_write_when_evicted() {
    // Forced out by capacity: one DIMM, 64 buffered XPLines; 64 later full XPLines push the four out.
    let pm = counting(1 << 16, PersistMode::Adr, one_dimm());
    for k in 0..4u64 {
        pm.write_u64(k * 256, k + 1).unwrap();
        pm.persist(k * 256, 8).unwrap();
    }
    let t = pm.snapshot();
    assert_eq!(
        (t.cpu_write_bytes, t.media_write_bytes),
        (4 * 64, 0),
        "still buffered"
    );
    for k in 0..64u64 {
        pm.write_nt(4096 + k * 256, &[0; 256]).unwrap();
    }
    let t = pm.snapshot();
    assert_eq!(t.media_read_bytes, 4 * 256);
    assert_eq!(t.media_write_bytes, 4 * 256);
    assert_eq!(t.rmw_xplines, 4);

    // Forced out by draining, with the default 6-DIMM interleave.
    let pm = counting(1 << 16, PersistMode::Adr, TrafficConfig::default());
    for k in 0..4u64 {
        pm.write_u64(k * 4096 + 8, k).unwrap();
        pm.persist(k * 4096 + 8, 8).unwrap();
    }
    pm.drain();
    let t = pm.snapshot();
    assert_eq!(
        (t.media_read_bytes, t.media_write_bytes),
        (4 * 256, 4 * 256)
    );
}

#[test]
fn sequential_4k_read_is_16_misses_and_a_reread_hits() {
    let pm = counting(1 << 16, PersistMode::Adr, TrafficConfig::default());
    let mut buf = vec![0u8; 4096];
    pm.read(8192, &mut buf).unwrap();
    let first = pm.snapshot();
    assert_eq!(first.media_read_bytes, 4096);
    assert_eq!(first.xpbuffer_read_misses, 16);
    assert_eq!(first.xpbuffer_read_hits, 48);
    assert_eq!(
        (first.cpu_read_bytes, first.requested_read_bytes),
        (4096, 4096)
    );
    pm.read(8192, &mut buf).unwrap();
    let second = pm.snapshot() - first;
    assert_eq!(second.media_read_bytes, 0);
    assert_eq!(second.xpbuffer_read_hits, 64);
    assert_eq!(
        second.cpu_read_bytes, 4096,
        "no clean-line CPU cache is modelled"
    );
    pm.drain();
    assert_eq!(
        pm.snapshot().media_write_bytes,
        0,
        "reads never cause media writes"
    );
}

#[test]
fn a_flush_writes_a_dirty_line_back_once() {
    let pm = counting(4096, PersistMode::Adr, TrafficConfig::default());
    pm.write_u64(0, 1).unwrap();
    pm.store_u64_atomic(8, 2).unwrap(); // Same line.
    assert_eq!(pm.read_u64(0).unwrap(), 1);
    assert_eq!(
        pm.snapshot().cpu_read_bytes,
        0,
        "a dirty line is a cache hit"
    );
    pm.flush(0, 16).unwrap();
    pm.flush(0, 16).unwrap(); // Clean now: free.
    pm.fence();
    let t = pm.snapshot();
    assert_eq!((t.cpu_write_bytes, t.flushes, t.fences), (64, 2, 1));
    // A write spanning a line boundary dirties two lines.
    pm.write(60, &[1; 8]).unwrap();
    assert_eq!(pm.dirty_lines(), 2);
    pm.persist(60, 8).unwrap();
    assert_eq!(pm.snapshot().cpu_write_bytes, 64 * 3);
    // A failed compare-exchange reads but does not dirty.
    assert!(pm.compare_exchange_u64(2048, 5, 6).unwrap().is_err());
    assert_eq!(pm.dirty_lines(), 0);
    assert!(pm.compare_exchange_u64(2048, 0, 6).unwrap().is_ok());
    assert_eq!(pm.dirty_lines(), 1);
}

#[test]
fn eadr_lines_reach_media_by_eviction_and_coalesce() {
    let config = TrafficConfig {
        cpu_dirty_lines: 4,
        ..TrafficConfig::default()
    };
    let pm = counting(1 << 16, PersistMode::Eadr, config);
    // eADR persist is a fence only: nothing is written back by it.
    for rep in 0..100u64 {
        pm.write_u64(0, rep).unwrap();
        pm.persist(0, 8).unwrap();
    }
    assert_eq!(pm.snapshot().cpu_write_bytes, 0);
    assert_eq!(pm.snapshot().flushes, 0);
    // Eight more lines: the least recently written five (line 0 first) are evicted.
    for line in 1..=8u64 {
        pm.write_u64(line * 64, line).unwrap();
    }
    assert_eq!(pm.dirty_lines(), 4);
    assert_eq!(pm.snapshot().cpu_write_bytes, 5 * 64);
    pm.drain();
    let t = pm.snapshot();
    assert_eq!(
        t.cpu_write_bytes,
        9 * 64,
        "100 writes of line 0 cost one write-back"
    );
    // Lines 0..=8 cover XPLines 0, 1 (lines 0-3, 4-7) fully and XPLine 2 partly (line 8).
    assert_eq!((t.media_write_bytes, t.media_read_bytes), (3 * 256, 256));
}

#[test]
fn write_through_counts_every_written_line() {
    let config = TrafficConfig {
        cpu_dirty_lines: 0,
        ..TrafficConfig::default()
    };
    let pm = counting(4096, PersistMode::Eadr, config);
    for _ in 0..3 {
        pm.write(0, &[1; 100]).unwrap(); // Lines 0 and 1.
    }
    assert_eq!(pm.dirty_lines(), 0);
    assert_eq!(pm.snapshot().cpu_write_bytes, 3 * 2 * 64);
}

#[test]
fn xpbuffers_are_per_dimm() {
    let tiny = |dimms| TrafficConfig {
        dimms,
        xpbuffer_lines: 1,
        ..TrafficConfig::default()
    };
    // Six DIMMs: offsets 0 and 4096 are on different DIMMs, so XPLine 0 stays buffered.
    let pm = counting(1 << 16, PersistMode::Adr, tiny(6));
    pm.read_u64(0).unwrap();
    pm.read_u64(4096).unwrap();
    pm.read_u64(0).unwrap();
    assert_eq!(pm.snapshot().media_read_bytes, 512);
    // One DIMM: the second read evicts XPLine 0, so the third misses again.
    let pm = counting(1 << 16, PersistMode::Adr, tiny(1));
    pm.read_u64(0).unwrap();
    pm.read_u64(4096).unwrap();
    pm.read_u64(0).unwrap();
    assert_eq!(pm.snapshot().media_read_bytes, 768);
}

#[test]
fn snapshots_subtract_and_give_amplification() {
    let pm = counting(1 << 16, PersistMode::Adr, TrafficConfig::default());
    assert_eq!(pm.snapshot().amplification(), None);
    let start = pm.snapshot();
    for i in 0..16u64 {
        // 16 B records, one per XPLine: each costs a 256 B read-modify-write.
        pm.write(i * 256, &[i as u8; 16]).unwrap();
        pm.persist(i * 256, 16).unwrap();
        pm.record_logical(16);
    }
    pm.drain();
    let t = pm.snapshot().since(&start);
    assert_eq!(t.logical_bytes, 256);
    assert_eq!(
        (t.media_write_bytes, t.media_read_bytes),
        (16 * 256, 16 * 256)
    );
    assert_eq!(t.write_amplification(), Some(16.0));
    assert_eq!(t.read_amplification(), Some(16.0));
    assert_eq!(t.amplification(), Some(32.0));
    assert_eq!(Traffic::per_op(t.media_write_bytes, 16), Some(256.0));
    assert_eq!(Traffic::per_op(1, 0), None);
    assert_eq!(start - t, Traffic::default(), "subtraction saturates");
    let json = serde_json::to_value(t).unwrap();
    assert_eq!(json["media_write_bytes"], 4096);
}

#[test]
fn refused_accesses_and_bad_configs() {
    let pm = counting(1024, PersistMode::Adr, TrafficConfig::default());
    assert!(pm.write(1020, &[0; 8]).is_err());
    assert!(pm.read(2000, &mut [0; 1]).is_err());
    assert!(pm.flush(0, 2048).is_err());
    assert_eq!(
        pm.snapshot(),
        Traffic::default(),
        "refused accesses are not counted"
    );
    for bad in [
        TrafficConfig {
            dimms: 0,
            ..TrafficConfig::default()
        },
        TrafficConfig {
            xpbuffer_lines: 0,
            ..TrafficConfig::default()
        },
        TrafficConfig {
            interleave_bytes: 1000,
            ..TrafficConfig::default()
        },
        TrafficConfig {
            write_bandwidth: (1 << 40) + 1,
            ..TrafficConfig::default()
        },
    ] {
        let r = CountingPm::with_config(MmapRegion::anonymous(256, PersistMode::Adr).unwrap(), bad);
        assert!(r.is_err());
    }
    assert_eq!(pm.config(), &TrafficConfig::default());
    assert_eq!(pm.inner().len(), 1024);
    assert_eq!(pm.into_inner().len(), 1024);
}

#[test]
fn read_miss_latency_is_emulated() {
    let config = TrafficConfig {
        read_miss_latency_ns: 2_000_000,
        ..TrafficConfig::default()
    };
    let pm = counting(4096, PersistMode::Adr, config);
    let four_misses = std::time::Duration::from_millis(8);
    let start = std::time::Instant::now();
    pm.read(0, &mut [0; 1024]).unwrap();
    assert!(start.elapsed() >= four_misses);
    let start = std::time::Instant::now();
    pm.read(0, &mut [0; 1024]).unwrap(); // Hits: no wait.
    assert!(start.elapsed() < four_misses);
    assert_eq!(pm.snapshot().xpbuffer_read_misses, 4);
}

/// Write pacing: each media write is charged to the token bucket (its transfer time is exact whatever the
/// clock), and the writer really waits: 60 XPLines at 256 MB/s (1 µs each) beyond a 4-XPLine burst take at
/// least 56 µs. Writes still buffered and paid by `drain` are not charged; no limit, no charge.
#[test]
fn media_writes_are_paced_at_the_write_bandwidth() {
    let config = TrafficConfig {
        dimms: 1,
        xpbuffer_lines: 4,
        write_bandwidth: 256_000_000,
        write_burst_bytes: 1024,
        ..TrafficConfig::default()
    };
    let pm = counting(1 << 20, PersistMode::Adr, config);
    let start = std::time::Instant::now();
    for i in 0..64u64 {
        pm.write_nt(i * 256, &[1; 256]).unwrap();
    }
    let elapsed = start.elapsed();
    let t = pm.snapshot();
    // Four XPLines are still in the XPBuffer: 60 reached the media.
    assert_eq!(t.media_write_bytes, 60 * 256);
    assert_eq!(t.write_busy_ns, 60_000);
    assert!(
        elapsed >= std::time::Duration::from_micros(56),
        "{elapsed:?}"
    );
    assert!(t.stall_ns <= elapsed.as_nanos() as u64, "{t:?} {elapsed:?}");
    pm.drain();
    let t = pm.snapshot();
    assert_eq!((t.media_write_bytes, t.write_busy_ns), (64 * 256, 60_000));

    let free = counting(1 << 20, PersistMode::Adr, one_dimm());
    for i in 0..64u64 {
        free.write_nt(i * 256, &[1; 256]).unwrap();
    }
    free.drain();
    let t = free.snapshot();
    assert_eq!(
        (t.media_write_bytes, t.write_busy_ns, t.stall_ns),
        (64 * 256, 0, 0)
    );
}

#[test]
fn counts_are_exact_under_threads() {
    let pm = Arc::new(counting(
        1 << 20,
        PersistMode::Adr,
        TrafficConfig::default(),
    ));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let pm = Arc::clone(&pm);
            std::thread::spawn(move || {
                for i in 0..256u64 {
                    pm.write_nt((t * 256 + i) * 256, &[t as u8; 256]).unwrap();
                    pm.record_logical(16);
                }
                pm.fence();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    pm.drain();
    let t = pm.snapshot();
    assert_eq!(t.media_write_bytes, 1024 * 256);
    assert_eq!((t.media_read_bytes, t.cpu_write_bytes), (0, 1024 * 256));
    assert_eq!((t.logical_bytes, t.fences), (1024 * 16, 4));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Without capacity evictions, drained totals follow from the writes alone: a line is written back once
    /// per flush that finds it dirty plus once at the drain if still dirty, each written XPLine costs one
    /// 256 B media write, and exactly the partly written ones cost a 256 B read.
    #[test]
    fn drained_totals_follow_from_written_lines(
        writes in proptest::collection::vec((0u64..4000, 1u64..100, any::<bool>()), 1..60)
    ) {
        let config = TrafficConfig {
            cpu_dirty_lines: 1 << 20,
            xpbuffer_lines: 1 << 10,
            ..TrafficConfig::default()
        };
        let pm = counting(4096, PersistMode::Adr, config);
        let mut lines = BTreeSet::new();
        let mut dirty = BTreeSet::new();
        let mut write_backs = 0u64;
        for &(off, len, flush) in &writes {
            let len = len.min(4096 - off);
            pm.write(off, &vec![1; len as usize]).unwrap();
            lines.extend(lines_covering(off, len));
            dirty.extend(lines_covering(off, len));
            if flush {
                pm.persist(off, len).unwrap();
                for line in lines_covering(off, len) {
                    write_backs += u64::from(dirty.remove(&line));
                }
            }
        }
        prop_assert_eq!(pm.dirty_lines(), dirty.len());
        write_backs += dirty.len() as u64;
        pm.drain();
        let t = pm.snapshot();
        let mut per_xpline = std::collections::BTreeMap::<u64, u32>::new();
        for line in &lines {
            *per_xpline.entry(line / 4).or_default() += 1;
        }
        let partial = per_xpline.values().filter(|&&n| n < 4).count() as u64;
        prop_assert_eq!(t.cpu_write_bytes, 64 * write_backs);
        prop_assert_eq!(t.media_write_bytes, 256 * per_xpline.len() as u64);
        prop_assert_eq!(t.media_read_bytes, 256 * partial);
        prop_assert_eq!(t.cpu_read_bytes, 0);
    }
}
