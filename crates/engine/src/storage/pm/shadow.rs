//! [`ShadowPm`]: the crash model for tests.
//!
//! Two images of the region live side by side: the **working** image (what loads return) and the **durable**
//! image (what PM holds for certain). Each 64 B line is in one of three states:
//!
//! * **clean**: the working line equals what is durable or pending for it;
//! * **dirty**: written since it was last flushed — it sits in the CPU cache, which may or may not have
//!   evicted it to PM by the time of a crash;
//! * **pending**: flushed (or written non-temporally) with the contents it had at that moment, awaiting a
//!   fence. A line can be pending and dirty again at once.
//!
//! `flush` moves dirty lines to pending (snapshotting their contents); `fence` copies every pending snapshot
//! to the durable image and counts one **persist point**.
//!
//! **ADR crash image** ([`ShadowPm::crash_image`]): the durable image, plus each pending snapshot with
//! probability `evict_probability` (the flush may have completed), plus each dirty line's working contents
//! with probability `evict_probability` (the cache may have evicted it). With `tear`, a line that is added
//! is added word by word: each aligned 8 B word independently takes the new contents or keeps the old, so
//! an aligned 8 B store is all-or-nothing and never torn. Limitation: a line written several times between
//! persist points contributes only its last contents (and mixes of it with older ones at 8 B granularity),
//! never an intermediate value.
//!
//! **eADR crash image**: the working image (the caches are persistent); with `tear`, the last write since the
//! last fence may be cut at 8 B granularity (it was in flight). `evict_probability` is ignored.
//!
//! **Crash at persist point k**: [`ShadowPm::arm_crash`] captures a crash image just before the k-th fence
//! (counting from 1) takes effect; [`ShadowPm::take_crash_image`] returns it. Running a workload for
//! k = 1, 2, … plus one crash image after the last fence covers every persist point.

use std::collections::{BTreeMap, BTreeSet};

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{
    CACHE_LINE, PersistMode, Pm, WORD, XPLINE, check_range, check_word, check_xplines,
    lines_covering, to_usize,
};
use crate::error::{Error, Result};

/// When and how [`ShadowPm::arm_crash`] takes its crash image.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrashPlan {
    /// The fence (1-based) just before which the image is taken.
    pub at_fence: u64,
    /// Probability that each pending or dirty line reached PM (ADR only).
    pub evict_probability: f64,
    /// Whether lines (ADR) or the in-flight write (eADR) may be torn at 8 B granularity.
    pub tear: bool,
    /// Seed of the random choices.
    pub seed: u64,
}

#[derive(Debug)]
struct State {
    working: Vec<u8>,
    durable: Vec<u8>,
    dirty: BTreeSet<u64>,
    pending: BTreeMap<u64, [u8; CACHE_LINE as usize]>,
    fences: u64,
    /// eADR: offset and previous contents of the last write since the last fence.
    last_write: Option<(usize, Vec<u8>)>,
    plan: Option<CrashPlan>,
    captured: Option<Vec<u8>>,
}

/// A PM region in memory that tracks what a crash could leave behind (module docs). For tests.
#[derive(Debug)]
pub struct ShadowPm {
    len: u64,
    mode: PersistMode,
    state: Mutex<State>,
}

fn check_probability(p: f64) -> Result<()> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "eviction probability {p} is not in [0, 1]"
        )))
    }
}

impl ShadowPm {
    /// A zeroed region of `len` bytes (a non-zero multiple of 256).
    pub fn new(len: u64, mode: PersistMode) -> Result<Self> {
        if len == 0 || !len.is_multiple_of(XPLINE) {
            return Err(Error::invalid(format!(
                "shadow PM length {len} is not a non-zero multiple of {XPLINE}"
            )));
        }
        Self::from_image(vec![0; to_usize(len)?], mode)
    }

    /// A region whose working and durable images are both `image` (e.g. a crash image to recover from).
    pub fn from_image(image: Vec<u8>, mode: PersistMode) -> Result<Self> {
        let len = image.len() as u64;
        if len == 0 || !len.is_multiple_of(XPLINE) {
            return Err(Error::invalid(format!(
                "shadow PM image of {len} bytes is not a non-zero multiple of {XPLINE}"
            )));
        }
        Ok(ShadowPm {
            len,
            mode,
            state: Mutex::new(State {
                durable: image.clone(),
                working: image,
                dirty: BTreeSet::new(),
                pending: BTreeMap::new(),
                fences: 0,
                last_write: None,
                plan: None,
                captured: None,
            }),
        })
    }

    /// What loads return now.
    pub fn working_image(&self) -> Vec<u8> {
        self.state.lock().working.clone()
    }

    /// What is certainly durable: flushed-and-fenced data under ADR, the working image under eADR.
    pub fn durable_image(&self) -> Vec<u8> {
        let s = self.state.lock();
        match self.mode {
            PersistMode::Adr => s.durable.clone(),
            PersistMode::Eadr => s.working.clone(),
        }
    }

    /// Fences so far: the number of persist points passed.
    pub fn persist_points(&self) -> u64 {
        self.state.lock().fences
    }

    /// Line numbers (offset ÷ 64) written and not flushed since.
    pub fn dirty_lines(&self) -> Vec<u64> {
        self.state.lock().dirty.iter().copied().collect()
    }

    /// Line numbers flushed (or written non-temporally) and awaiting a fence.
    pub fn pending_lines(&self) -> Vec<u64> {
        self.state.lock().pending.keys().copied().collect()
    }

    /// A possible content of PM if power failed now (module docs); `evict_probability` in [0, 1].
    pub fn crash_image<R: Rng + ?Sized>(
        &self,
        rng: &mut R,
        evict_probability: f64,
        tear: bool,
    ) -> Result<Vec<u8>> {
        check_probability(evict_probability)?;
        Ok(self
            .state
            .lock()
            .crash_image(self.mode, rng, evict_probability, tear))
    }

    /// [`crash_image`](Self::crash_image) with a seeded generator.
    pub fn crash_image_seeded(
        &self,
        seed: u64,
        evict_probability: f64,
        tear: bool,
    ) -> Result<Vec<u8>> {
        self.crash_image(&mut StdRng::seed_from_u64(seed), evict_probability, tear)
    }

    /// Takes a crash image just before fence `plan.at_fence` takes effect (replacing any earlier plan and
    /// captured image). Fences already passed are not revisited: a plan for one of them never fires.
    pub fn arm_crash(&self, plan: CrashPlan) -> Result<()> {
        check_probability(plan.evict_probability)?;
        let mut s = self.state.lock();
        s.plan = Some(plan);
        s.captured = None;
        Ok(())
    }

    /// The image captured by the armed plan, once its fence was reached.
    pub fn take_crash_image(&self) -> Option<Vec<u8>> {
        self.state.lock().captured.take()
    }
}

impl State {
    fn line(&self, line: u64) -> [u8; CACHE_LINE as usize] {
        let start = (line * CACHE_LINE) as usize;
        let mut out = [0u8; CACHE_LINE as usize];
        out.copy_from_slice(&self.working[start..start + CACHE_LINE as usize]);
        out
    }

    fn write(&mut self, mode: PersistMode, off: usize, data: &[u8]) {
        let range = off..off + data.len();
        if mode == PersistMode::Eadr {
            self.last_write = Some((off, self.working[range.clone()].to_vec()));
        }
        self.working[range].copy_from_slice(data);
        self.dirty
            .extend(lines_covering(off as u64, data.len() as u64));
    }

    fn flush(&mut self, off: u64, len: u64) {
        for line in lines_covering(off, len) {
            if self.dirty.remove(&line) {
                let contents = self.line(line);
                self.pending.insert(line, contents);
            }
        }
    }

    fn fence(&mut self, mode: PersistMode) {
        self.fences += 1;
        if let Some(plan) = self.plan
            && plan.at_fence == self.fences
        {
            let mut rng = StdRng::seed_from_u64(plan.seed);
            let image = self.crash_image(mode, &mut rng, plan.evict_probability, plan.tear);
            self.captured = Some(image);
            self.plan = None;
        }
        for (line, contents) in std::mem::take(&mut self.pending) {
            let start = (line * CACHE_LINE) as usize;
            self.durable[start..start + CACHE_LINE as usize].copy_from_slice(&contents);
        }
        self.last_write = None;
    }

    fn crash_image<R: Rng + ?Sized>(
        &self,
        mode: PersistMode,
        rng: &mut R,
        p: f64,
        tear: bool,
    ) -> Vec<u8> {
        match mode {
            PersistMode::Eadr => {
                let mut image = self.working.clone();
                if let (true, Some((off, old))) = (tear, &self.last_write) {
                    // Restore the old bytes of a random subset of the aligned words the write touched.
                    let mut pos = 0;
                    while pos < old.len() {
                        let at = off + pos;
                        let take = (WORD as usize - at % WORD as usize).min(old.len() - pos);
                        if rng.random::<bool>() {
                            image[at..at + take].copy_from_slice(&old[pos..pos + take]);
                        }
                        pos += take;
                    }
                }
                image
            }
            PersistMode::Adr => {
                let mut image = self.durable.clone();
                for (&line, contents) in &self.pending {
                    if rng.random_bool(p) {
                        put_line(&mut image, line, contents, tear, rng);
                    }
                }
                for &line in &self.dirty {
                    if rng.random_bool(p) {
                        put_line(&mut image, line, &self.line(line), tear, rng);
                    }
                }
                image
            }
        }
    }
}

/// Copies `contents` over line `line` of `image`, whole or (with `tear`) a random subset of its 8 B words.
fn put_line<R: Rng + ?Sized>(
    image: &mut [u8],
    line: u64,
    contents: &[u8],
    tear: bool,
    rng: &mut R,
) {
    let start = (line * CACHE_LINE) as usize;
    for (i, word) in contents.chunks_exact(WORD as usize).enumerate() {
        if !tear || rng.random::<bool>() {
            let at = start + i * WORD as usize;
            image[at..at + WORD as usize].copy_from_slice(word);
        }
    }
}

impl Pm for ShadowPm {
    fn len(&self) -> u64 {
        self.len
    }

    fn mode(&self) -> PersistMode {
        self.mode
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        check_range(self.len, off, buf.len() as u64)?;
        let s = self.state.lock();
        let off = off as usize;
        buf.copy_from_slice(&s.working[off..off + buf.len()]);
        Ok(())
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        check_range(self.len, off, data.len() as u64)?;
        self.state.lock().write(self.mode, off as usize, data);
        Ok(())
    }

    fn load_u64_atomic(&self, off: u64) -> Result<u64> {
        check_word(self.len, off)?;
        self.read_u64(off)
    }

    fn store_u64_atomic(&self, off: u64, value: u64) -> Result<()> {
        check_word(self.len, off)?;
        self.state
            .lock()
            .write(self.mode, off as usize, &value.to_le_bytes());
        Ok(())
    }

    fn compare_exchange_u64(
        &self,
        off: u64,
        current: u64,
        new: u64,
    ) -> Result<std::result::Result<u64, u64>> {
        check_word(self.len, off)?;
        let mut s = self.state.lock();
        let at = off as usize;
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&s.working[at..at + 8]);
        let found = u64::from_le_bytes(bytes);
        if found != current {
            return Ok(Err(found));
        }
        s.write(self.mode, at, &new.to_le_bytes());
        Ok(Ok(found))
    }

    fn flush(&self, off: u64, len: u64) -> Result<()> {
        check_range(self.len, off, len)?;
        self.state.lock().flush(off, len);
        Ok(())
    }

    fn fence(&self) {
        self.state.lock().fence(self.mode);
    }

    fn write_nt(&self, off: u64, data: &[u8]) -> Result<()> {
        check_xplines(self.len, off, data.len() as u64)?;
        let mut s = self.state.lock();
        s.write(self.mode, off as usize, data);
        // Non-temporal stores bypass the cache: the lines await the next fence, they are not dirty.
        for line in lines_covering(off, data.len() as u64) {
            s.dirty.remove(&line);
            let contents = s.line(line);
            s.pending.insert(line, contents);
        }
        Ok(())
    }
}
