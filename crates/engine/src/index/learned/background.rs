//! The background maintenance thread: compacts and splits groups while foreground threads read and write.
//!
//! It holds only a weak reference, so dropping the last handle to the index ends it; dropping the
//! [`Maintainer`] stops it and waits for it. A pass looks at every group's header (a cache miss each:
//! about a quarter of a millisecond at 10M keys, which every millisecond was 8.8 % of a read-only run's
//! CPU); only the writes change what a pass decides, so the thread passes after a write marked the index
//! dirty, and otherwise every [`IDLE_PASS_PERIOD`] only (a bound for a write whose mark raced a pass).
//! Cost: one pass per period while writes come, one per [`IDLE_PASS_PERIOD`] in a read-only phase.

use super::core::LearnedIndex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest time between two passes while no write comes (a pass also runs after any write).
pub const IDLE_PASS_PERIOD: Duration = Duration::from_millis(100);

/// A running maintenance thread.
pub struct Maintainer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    index: Weak<LearnedIndex>,
}

impl Maintainer {
    /// Starts maintaining `index` every `period` (sooner while there is work).
    pub fn start(index: &Arc<LearnedIndex>, period: Duration) -> Maintainer {
        let stop = Arc::new(AtomicBool::new(false));
        let weak: Weak<LearnedIndex> = Arc::downgrade(index);
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("learned-maintain".into())
            .spawn(move || {
                let mut last_pass = Instant::now();
                while !flag.load(Ordering::Acquire) {
                    let Some(ix) = weak.upgrade() else { return };
                    let worked = if ix.take_dirty() || last_pass.elapsed() >= IDLE_PASS_PERIOD {
                        last_pass = Instant::now();
                        ix.maintain()
                    } else {
                        ix.free_released();
                        0
                    };
                    drop(ix);
                    if worked == 0 {
                        std::thread::park_timeout(period);
                    }
                }
            })
            .ok();
        if let Some(t) = &thread {
            *index.maintainer.lock() = Some(t.thread().clone());
        }
        Maintainer {
            stop,
            thread,
            index: Arc::downgrade(index),
        }
    }
}

impl Drop for Maintainer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Writers compact by themselves again.
        if let Some(ix) = self.index.upgrade() {
            *ix.maintainer.lock() = None;
        }
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
