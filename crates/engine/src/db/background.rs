//! Checkpoints that finish on the shell's checkpoint thread while writes go on, and the WAL rotation that
//! goes with them, with no `fdatasync` on the writer's path.
//!
//! ## Protocol (families whose [`OrderedIndex::begin_checkpoint`](crate::index::OrderedIndex::begin_checkpoint) seals)
//! On the writer, when the live WAL `N` grows past the checkpoint size (everything here is in memory or a
//! plain write to the OS; nothing waits for the device):
//! 1. a checkpoint intent for `S` (the last seqno) is appended to WAL `N` and written, not synced;
//! 2. the index seals its state at `S` (`begin_checkpoint`: quickly, overwriting nothing the last durable
//!    checkpoint references);
//! 3. WAL `N + 1`, based on `S` and flagged [`follows_unsynced`](crate::storage::LogHeader::follows_unsynced),
//!    is created (header written, not synced, directory not synced) and becomes the live one; WAL `N` is left
//!    to the checkpoint thread. Writes at durability `none` and `flush` go on into `N + 1` at once, written
//!    to the OS as usual (a `flush` write at once, `none` every 1 MiB).
//!
//! On the checkpoint thread:
//! 4. WAL `N` is synced (its records up to `S` and the intent), then WAL `N + 1` (its header) and the
//!    directory (its entry). From here on the state on disk is the one the synchronous protocol
//!    (`recovery`) leaves after its step "WAL `N + 1` created and synced".
//! 5. the index writes the checkpoint (`finish_checkpoint`), then WAL `N` is removed.
//!
//! ## Why a crash at any point recovers
//! * **No sync of WAL `N + 1` precedes step 4**: a write with durability `sync`, [`RawDb::flush`](super::RawDb::flush)
//!   and a checkpoint intent wait for step 4 first ([`DbInner::sync_live_wal`]). So a synced record of
//!   `N + 1` implies that `N` is durable through its intent: the chain recovery replays has no hole.
//! * A killed process (what `none` and `flush` promise to survive): the OS holds every write, so `N` ends
//!   with its intent and `N + 1` continues it.
//! * A power loss before step 4 completes: `N` has a durable prefix (a torn tail is what `none`/`flush`
//!   allow) and the index wrote nothing of the checkpoint yet (step 5 follows step 4: its spare slot is
//!   intact, its checkpoint below `S`). `N + 1` may be missing, empty, or hold any of its pages that the OS
//!   wrote back on its own, records included — records after a hole, since `N`'s tail may be lost. Recovery's
//!   rule: **when the WAL before a `follows_unsynced` WAL does not end with its checkpoint intent, step 4
//!   never completed, so nothing in the later WALs was ever synced (first bullet): they are dropped** and
//!   `N` is live again; [`RecoveryInfo::unsynced_wals_dropped`](super::RecoveryInfo::unsynced_wals_dropped)
//!   reports it. What survives is a prefix of the writes, as after a torn tail.
//! * After step 4: `N` is durable with its intent; whatever of `N + 1` survives continues it.
//!
//! The rule cannot hide damage that recovery reported before: a damaged record of `N` (anything but a torn
//! tail) is still `Error::Corruption`, and a WAL created with its predecessor durable (the synchronous
//! protocol, opening) has no flag, so a predecessor missing records there is still refused. It accepts
//! only what a lost tail of `N` would explain, which is exactly as detectable as a lost tail of the live
//! WAL (a device that loses synced data is not told apart from a torn tail in either).
//!
//! Options weighed for the writer's wait at `flush` (the first flushed write after a rotation waited for
//! two `fdatasync`s and a directory sync, 8.6–47 ms at 10M writes): creating and syncing the next WAL ahead
//! of time removes one `fdatasync` and the directory sync but not `N`'s; starting `N`'s write-back early
//! (`sync_file_range`) shortens its `fdatasync` but still leaves the writer waiting for the device (a
//! journal commit). Only the recovery rule above lets a `flush` writer not wait on the device at all.
//!
//! Cost on the writer: one `write` of the intent, the index's seal, one file create (`open`, `set_len`, one
//! 1 KiB write). The thread: three `fdatasync`s and a directory sync, then the checkpoint. The writer waits
//! only when the live WAL reaches twice the checkpoint size while a checkpoint is still finishing (the
//! backlog bound), or for step 4 at durability `sync` (the first write after a rotation waits for the syncs
//! the thread began at once); at `none` and `flush` never.

use super::{DbInner, Writer, wal, wal_path};
use crate::error::Result;
use crate::storage::log::sync_file;
use crate::storage::{LogHeader, LogWriter};
use std::sync::Arc;

/// A checkpoint that finishes on its own thread while writes go on.
#[derive(Default)]
pub(super) struct Background {
    /// A checkpoint is finishing.
    pub busy: bool,
    /// Step 4 has not completed: the retired WAL, the live WAL's header or its directory entry is not durable
    /// yet.
    pub wal_unsynced: bool,
    pub thread: Option<std::thread::JoinHandle<()>>,
}

impl DbInner {
    /// Starts a checkpoint of everything written so far that finishes on the checkpoint thread (see the
    /// module doc); families that cannot seal one checkpoint at once (their intent synced first), as
    /// [`checkpoint`](Self::checkpoint) does. A failure in the thread poisons the handle.
    pub(super) fn checkpoint_in_background(this: &Arc<DbInner>, w: &mut Writer) -> Result<()> {
        let seqno = w.next_seqno - 1;
        // 1. The intent, written (the thread syncs it before the checkpoint writes anything).
        let live = w.wal.as_mut().expect("a writable handle has a WAL");
        wal::encode_intent(seqno, &mut w.scratch);
        live.append(&w.scratch)?;
        live.flush()?;
        // 2. The seal.
        if !this.index.begin_checkpoint(seqno)? {
            // The family cannot: the synchronous protocol (the intent durable before the checkpoint writes).
            this.sync_live_wal(w)?;
            this.index.checkpoint(seqno)?;
            this.rotate_wal(w, seqno)?;
            w.dirty = false;
            return Ok(());
        }
        // 3. The next WAL, unsynced.
        let number = w.wal_number + 1;
        let next = LogWriter::create_unsynced(
            &this.vfs,
            &wal_path(&this.dir, number),
            LogHeader {
                number,
                base_seqno: seqno,
                follows_unsynced: true,
            },
            this.stats.clone(),
        )?;
        // The retired WAL's buffer is empty (the intent was written): the thread syncs it by its path.
        drop(w.wal.replace(next));
        let old = std::mem::replace(&mut w.wal_number, number);
        w.dirty = false;
        let mut bg = this.background.lock();
        bg.busy = true;
        bg.wal_unsynced = true;
        let inner = this.clone();
        let spawned = std::thread::Builder::new()
            .name("strata-checkpoint".into())
            .spawn(move || {
                let r = inner
                    .sync_rotation(old, number)
                    .and_then(|()| inner.index.finish_checkpoint())
                    .and_then(|()| inner.vfs.remove_file(&wal_path(&inner.dir, old)));
                if let Err(e) = r {
                    inner.poison(&e);
                }
                let mut bg = inner.background.lock();
                bg.busy = false;
                bg.wal_unsynced = false;
                inner.background_done.notify_all();
            });
        match spawned {
            Ok(t) => {
                bg.thread = Some(t);
                Ok(())
            }
            Err(_) => {
                // No thread to be had: finish here.
                bg.busy = false;
                drop(bg);
                this.sync_rotation(old, number)?;
                this.index.finish_checkpoint()?;
                this.vfs.remove_file(&wal_path(&this.dir, old))
            }
        }
    }

    /// Step 4: the retired WAL `old`, the live WAL `number` and the directory made durable; then writers
    /// that wait to sync the live WAL may go on. (On failure the flag stays set until the thread ends: the
    /// handle is poisoned by then.)
    fn sync_rotation(&self, old: u64, number: u64) -> Result<()> {
        sync_file(&self.vfs, &wal_path(&self.dir, old), &self.stats)?;
        sync_file(&self.vfs, &wal_path(&self.dir, number), &self.stats)?;
        self.vfs.sync_dir(&self.dir)?;
        self.background.lock().wal_unsynced = false;
        self.background_done.notify_all();
        Ok(())
    }

    /// Waits until step 4 of a rotation in the background, if one is under way, has completed (the live WAL
    /// may then be synced: its records follow a durable chain).
    fn wait_wal_durable(&self) {
        let mut bg = self.background.lock();
        while bg.wal_unsynced {
            self.background_done.wait(&mut bg);
        }
    }

    /// Makes the live WAL durable (every record appended so far), after the WAL it follows.
    pub(super) fn sync_live_wal(&self, w: &mut Writer) -> Result<()> {
        self.wait_wal_durable();
        self.check_poison()?;
        w.wal.as_mut().expect("a writable handle has a WAL").sync()
    }

    /// Waits until no checkpoint is finishing in the background.
    pub(super) fn wait_background(&self) {
        let mut bg = self.background.lock();
        while bg.busy {
            self.background_done.wait(&mut bg);
        }
        if let Some(t) = bg.thread.take()
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}
