//! The background maintenance thread: compacts and splits groups while foreground threads read and write.
//!
//! It holds only a weak reference, so dropping the last handle to the index ends it; dropping the
//! [`Maintainer`] stops it and waits for it. Cost: one pass over the groups' buffer sizes per period.

use super::core::LearnedIndex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// A running maintenance thread.
pub struct Maintainer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
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
                while !flag.load(Ordering::Acquire) {
                    let Some(ix) = weak.upgrade() else { return };
                    let worked = ix.maintain();
                    drop(ix);
                    if worked == 0 {
                        std::thread::park_timeout(period);
                    }
                }
            })
            .ok();
        Maintainer { stop, thread }
    }
}

impl Drop for Maintainer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
