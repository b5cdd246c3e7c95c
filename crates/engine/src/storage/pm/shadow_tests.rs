//! Tests of the crash model (`ShadowPm`).

use proptest::prelude::*;

use super::*;

fn word(image: &[u8], off: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&image[off..off + 8]);
    u64::from_le_bytes(b)
}

#[test]
fn unflushed_write_is_absent_unless_evicted() {
    let pm = ShadowPm::new(1024, PersistMode::Adr).unwrap();
    pm.write_u64(64, 7).unwrap();
    pm.fence(); // A fence alone persists nothing that was not flushed.
    assert_eq!(word(&pm.durable_image(), 64), 0);
    assert_eq!(word(&pm.working_image(), 64), 7);
    assert_eq!(pm.dirty_lines(), vec![1]);
    for seed in 0..20 {
        assert_eq!(
            word(&pm.crash_image_seeded(seed, 0.0, true).unwrap(), 64),
            0
        );
        assert_eq!(
            word(&pm.crash_image_seeded(seed, 1.0, false).unwrap(), 64),
            7
        );
    }
    // With probability 1/2 both outcomes occur.
    let present = (0..200)
        .filter(|&s| word(&pm.crash_image_seeded(s, 0.5, false).unwrap(), 64) == 7)
        .count();
    assert!((40..160).contains(&present), "{present}");
}

#[test]
fn flushed_and_fenced_write_is_always_present() {
    let pm = ShadowPm::new(1024, PersistMode::Adr).unwrap();
    pm.write(100, &[9; 40]).unwrap();
    pm.flush(100, 40).unwrap();
    assert_eq!(pm.pending_lines(), vec![1, 2]);
    // Flushed but not fenced: in flight.
    assert_eq!(
        pm.crash_image_seeded(1, 0.0, false).unwrap()[100..140],
        [0; 40]
    );
    assert_eq!(
        pm.crash_image_seeded(1, 1.0, false).unwrap()[100..140],
        [9; 40]
    );
    pm.fence();
    assert!(pm.pending_lines().is_empty() && pm.dirty_lines().is_empty());
    assert_eq!(pm.durable_image()[100..140], [9; 40]);
    for seed in 0..50 {
        for p in [0.0, 0.5, 1.0] {
            assert_eq!(
                pm.crash_image_seeded(seed, p, true).unwrap()[100..140],
                [9; 40]
            );
        }
    }
}

#[test]
fn a_flush_persists_the_contents_it_saw() {
    let pm = ShadowPm::new(1024, PersistMode::Adr).unwrap();
    pm.write_u64(0, 1).unwrap();
    pm.flush(0, 8).unwrap();
    pm.write_u64(0, 2).unwrap(); // After the flush: dirty again, not covered by it.
    pm.fence();
    assert_eq!(word(&pm.durable_image(), 0), 1);
    assert_eq!(pm.dirty_lines(), vec![0]);
    assert_eq!(word(&pm.crash_image_seeded(0, 0.0, false).unwrap(), 0), 1);
    assert_eq!(word(&pm.crash_image_seeded(0, 1.0, false).unwrap(), 0), 2);
    assert_eq!(pm.persist_points(), 1);
}

#[test]
fn aligned_atomic_stores_never_tear_but_lines_do() {
    let pm = ShadowPm::new(1024, PersistMode::Adr).unwrap();
    let old = u64::from_le_bytes([0xaa; 8]);
    let new = u64::from_le_bytes([0x55; 8]);
    for w in 0..128u64 {
        pm.store_u64_atomic(w * 8, old).unwrap();
    }
    pm.persist(0, 1024).unwrap();
    for w in 0..128u64 {
        pm.store_u64_atomic(w * 8, new).unwrap();
    }
    let mut mixed_lines = 0;
    for seed in 0..50 {
        let image = pm.crash_image_seeded(seed, 0.5, true).unwrap();
        for w in 0..128 {
            let v = word(&image, w * 8);
            assert!(v == old || v == new, "word {w} torn: {v:#x}");
        }
        mixed_lines += image
            .chunks(64)
            .filter(|line| line[..8] != line[56..] || line[..8] != line[8..16])
            .count();
    }
    assert!(mixed_lines > 0, "tearing never mixed words within a line");
    // Without tearing a line is all old or all new.
    for seed in 0..50 {
        let image = pm.crash_image_seeded(seed, 0.5, false).unwrap();
        for line in image.chunks(64) {
            assert!(line.iter().all(|&b| b == line[0]));
        }
    }
}

#[test]
fn eadr_crash_image_is_the_working_image() {
    let pm = ShadowPm::new(1024, PersistMode::Eadr).unwrap();
    pm.write(0, &[1; 64]).unwrap();
    pm.write_u64(512, 5).unwrap(); // Never persisted: still durable under eADR.
    assert_eq!(pm.durable_image(), pm.working_image());
    for seed in 0..20 {
        assert_eq!(
            pm.crash_image_seeded(seed, 0.0, false).unwrap(),
            pm.working_image()
        );
    }
    // With tearing, only the last write since the last fence may be cut, word by word.
    pm.persist(0, 1024).unwrap();
    pm.write(128, &[2; 64]).unwrap();
    pm.write(256, &[3; 64]).unwrap();
    let mut cut = false;
    for seed in 0..50 {
        let image = pm.crash_image_seeded(seed, 0.0, true).unwrap();
        assert_eq!(image[128..192], [2; 64], "an earlier write was cut");
        assert_eq!(image[..64], [1; 64]);
        for w in image[256..320].chunks(8) {
            assert!(w == [3; 8] || w == [0; 8]);
        }
        cut |= image[256..320] != [3; 64];
    }
    assert!(cut, "the in-flight write was never cut");
    pm.fence(); // Completed: no longer in flight.
    for seed in 0..20 {
        assert_eq!(
            pm.crash_image_seeded(seed, 0.0, true).unwrap(),
            pm.working_image()
        );
    }
}

#[test]
fn non_temporal_lines_need_only_a_fence() {
    let pm = ShadowPm::new(1024, PersistMode::Adr).unwrap();
    pm.write(256, &[1; 8]).unwrap();
    pm.write_nt(256, &[4; 256]).unwrap();
    assert!(pm.dirty_lines().is_empty());
    assert_eq!(pm.pending_lines(), vec![4, 5, 6, 7]);
    assert_eq!(
        pm.crash_image_seeded(3, 0.0, false).unwrap()[256..512],
        [0; 256]
    );
    pm.fence();
    assert_eq!(pm.durable_image()[256..512], [4; 256]);
}

#[test]
fn crash_at_persist_point_k_sees_exactly_the_earlier_persists() {
    // Three records, each persisted, then a commit word persisted after each.
    let run = |pm: &ShadowPm| {
        for i in 0..3u64 {
            pm.write_u64(64 * (i + 1), 100 + i).unwrap();
            pm.persist(64 * (i + 1), 8).unwrap();
            pm.store_u64_atomic(0, i + 1).unwrap();
            pm.persist(0, 8).unwrap();
        }
    };
    for k in 1..=6u64 {
        let pm = ShadowPm::new(1024, PersistMode::Adr).unwrap();
        let plan = CrashPlan {
            at_fence: k,
            evict_probability: 0.0,
            tear: false,
            seed: k,
        };
        pm.arm_crash(plan).unwrap();
        run(&pm);
        assert_eq!(pm.persist_points(), 6);
        let image = pm.take_crash_image().expect("the plan fired");
        assert!(pm.take_crash_image().is_none());
        // Before fence k, fences 1..k-1 are durable: records ⌈(k-1)/2⌉ and commits ⌊(k-1)/2⌋.
        let done = k - 1;
        assert_eq!(word(&image, 0), done / 2, "commit word at k = {k}");
        for i in 0..3u64 {
            let expect = if i < done.div_ceil(2) { 100 + i } else { 0 };
            assert_eq!(
                word(&image, 64 * (i as usize + 1)),
                expect,
                "record {i} at k = {k}"
            );
        }
        // Recovery opens the crash image.
        let recovered = ShadowPm::from_image(image, PersistMode::Adr).unwrap();
        assert_eq!(recovered.durable_image(), recovered.working_image());
    }
    let pm = ShadowPm::new(1024, PersistMode::Adr).unwrap();
    let bad = CrashPlan {
        at_fence: 1,
        evict_probability: 1.5,
        tear: false,
        seed: 0,
    };
    assert!(pm.arm_crash(bad).is_err());
    assert!(pm.crash_image_seeded(0, f64::NAN, false).is_err());
}

/// One step of a random workload on a 1 KiB region (16 lines of 8 words).
#[derive(Debug, Clone)]
enum Op {
    /// Writes fresh stamps into `n` words from word `w` (clipped at the end).
    Write {
        w: usize,
        n: usize,
    },
    Store {
        w: usize,
    },
    Flush {
        line: u64,
        n: u64,
    },
    Fence,
    WriteNt {
        xpline: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..128, 1usize..12).prop_map(|(w, n)| Op::Write { w, n }),
        2 => (0usize..128).prop_map(|w| Op::Store { w }),
        3 => (0u64..16, 1u64..5).prop_map(|(line, n)| Op::Flush { line, n }),
        2 => Just(Op::Fence),
        1 => (0u64..4).prop_map(|xpline| Op::WriteNt { xpline }),
    ]
}

/// The test's own account: every state each line passed through, and the oldest one a crash may show.
struct History {
    states: Vec<Vec<[u8; 64]>>,
    flushed: Vec<Option<usize>>,
    floor: Vec<usize>,
}

impl History {
    fn record(&mut self, image: &[u8], lines: std::ops::Range<u64>) {
        for line in lines {
            let mut s = [0u8; 64];
            s.copy_from_slice(&image[line as usize * 64..][..64]);
            self.states[line as usize].push(s);
        }
    }

    /// Checks `image` line by line (`torn`: word by word) against the states since each line's floor.
    fn admits(&self, image: &[u8], torn: bool) -> std::result::Result<(), String> {
        for (line, states) in self.states.iter().enumerate() {
            let got = &image[line * 64..][..64];
            let allowed = &states[self.floor[line]..];
            let ok = if torn {
                (0..8).all(|w| allowed.iter().any(|s| s[w * 8..][..8] == got[w * 8..][..8]))
            } else {
                allowed.iter().any(|s| s[..] == got[..])
            };
            if !ok {
                return Err(format!(
                    "line {line} holds a state it never had since its last persist"
                ));
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever the sequence of writes, flushes and fences: the durable image is, line by line, exactly
    /// the state the line had at its last flush before the last fence, and every crash image is, line by
    /// line (or word by word when torn), a state the working image passed through no older than that.
    #[test]
    fn durable_and_crash_images_are_past_states_no_older_than_the_last_persist(
        ops in proptest::collection::vec(op(), 1..80),
        seed in any::<u64>(),
    ) {
        let pm = ShadowPm::new(1024, PersistMode::Adr).unwrap();
        let mut h = History { states: vec![vec![[0; 64]]; 16], flushed: vec![None; 16], floor: vec![0; 16] };
        let mut stamp = 0u64;
        for (i, op) in ops.iter().enumerate() {
            match *op {
                Op::Write { w, n } => {
                    let n = n.min(128 - w);
                    let data: Vec<u8> = (0..n).flat_map(|_| { stamp += 1; stamp.to_le_bytes() }).collect();
                    pm.write(w as u64 * 8, &data).unwrap();
                    h.record(&pm.working_image(), lines_covering(w as u64 * 8, data.len() as u64));
                }
                Op::Store { w } => {
                    stamp += 1;
                    pm.store_u64_atomic(w as u64 * 8, stamp).unwrap();
                    h.record(&pm.working_image(), lines_covering(w as u64 * 8, 8));
                }
                Op::Flush { line, n } => {
                    let n = n.min(16 - line);
                    pm.flush(line * 64, n * 64).unwrap();
                    for l in line..line + n {
                        h.flushed[l as usize] = Some(h.states[l as usize].len() - 1);
                    }
                }
                Op::Fence => {
                    pm.fence();
                    for l in 0..16 {
                        if let Some(at) = h.flushed[l].take() {
                            h.floor[l] = h.floor[l].max(at);
                        }
                    }
                }
                Op::WriteNt { xpline } => {
                    stamp += 1;
                    pm.write_nt(xpline * 256, &[stamp as u8; 256]).unwrap();
                    let lines = lines_covering(xpline * 256, 256);
                    h.record(&pm.working_image(), lines.clone());
                    for l in lines {
                        h.flushed[l as usize] = Some(h.states[l as usize].len() - 1);
                    }
                }
            }
            let durable = pm.durable_image();
            for l in 0..16 {
                prop_assert_eq!(&durable[l * 64..][..64], &h.states[l][h.floor[l]][..], "durable line {}", l);
            }
            let working = pm.working_image();
            for l in 0..16 {
                prop_assert_eq!(&working[l * 64..][..64], &h.states[l].last().unwrap()[..]);
            }
            let s = seed.wrapping_add(i as u64);
            h.admits(&pm.crash_image_seeded(s, 0.5, false).unwrap(), false).map_err(TestCaseError::fail)?;
            h.admits(&pm.crash_image_seeded(s, 0.5, true).unwrap(), true).map_err(TestCaseError::fail)?;
        }
    }
}
