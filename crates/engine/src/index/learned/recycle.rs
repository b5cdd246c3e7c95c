//! Memory of the delta buffers, handed from dropped buffers to growing ones without the global allocator.
//!
//! A writer that grows a buffer (a chunk of records, a table of twice the entries) used to `malloc` it, and
//! the maintenance thread, which frees replaced groups, `free`d it: with glibc, a block goes back to the arena
//! of the thread that allocated it, under that arena's lock. So the maintainer freeing a retired group's
//! buffers held the *writer's* arena lock again and again, and the writer's next `malloc` waited for it —
//! for as long as the maintainer was off the CPU when preempted inside `free` (the `write_stalls` probe at
//! 10M keys, durability `none`: waits of 3–74 ms with ~50 µs of the writer's CPU, each a futex wait in
//! `calloc` or `brk` under a buffer insert).
//!
//! Now a dropped buffer gives its record chunks (reset to locked empty records, on the dropping thread) and
//! its tables to a [`Recycler`] shared by the index's buffers, and a growing buffer takes them from it. Both
//! sides are lock-free bounded queues ([`ArrayQueue`]): no thread ever waits for another there. While the
//! index grows, dropped buffers do not give back as much as growing ones take, so the maintenance thread
//! also tops every size up to [`LOW_WATER`] blocks after its passes ([`Recycler::top_up`]), allocating
//! them in its own allocator arena: a writer allocates only when a size ran dry between two passes (and
//! its `malloc` then may grow the heap, a `brk` that waits for the address-space lock other threads' page
//! faults hold), and a dropped buffer frees only when its size holds [`KEEP`] blocks.
//!
//! Invariants: a chunk in the recycler holds locked empty records (`Slot::empty(true)`) that no thread can
//! reach; a table in it is reachable by no thread (its buffer was dropped after the epoch released it).
//! Cost: a queue push per block when a buffer drops (plus a reset per record of its chunks), a queue pop per
//! growth; memory: at most [`KEEP`] idle blocks per size (about 4.6 MB of chunks and 12 MB of tables at most).

use super::buffer::{FIRST_CAPACITY, FIRST_CHUNK, MAX_CHUNK, Table};
use super::slot::Slot;
use crossbeam_queue::ArrayQueue;

/// Idle blocks the recycler keeps per size; more are freed.
pub const KEEP: usize = 256;
/// Idle blocks per size the maintenance thread keeps ready ([`Recycler::top_up`]).
pub const LOW_WATER: usize = 16;
/// Sizes of record chunks: `FIRST_CHUNK << i` records for `i` below this (8 … 256).
const CHUNK_SIZES: usize = (MAX_CHUNK / FIRST_CHUNK).trailing_zeros() as usize + 1;
/// Sizes of tables kept: `FIRST_CAPACITY << i` entries for `i` below this (16 … 4,096; a buffer is
/// compacted by a writer itself once it holds twice `inline_compact_at` = 2,048 records by default while
/// the maintenance thread runs, see `compact_if_overfull`).
const TABLE_SIZES: usize = 9;

/// Record chunks and tables of dropped buffers (see the module doc).
pub struct Recycler {
    chunks: Vec<ArrayQueue<Box<[Slot]>>>,
    tables: Vec<ArrayQueue<Box<Table>>>,
}

impl Default for Recycler {
    fn default() -> Self {
        Recycler {
            chunks: (0..CHUNK_SIZES).map(|_| ArrayQueue::new(KEEP)).collect(),
            tables: (0..TABLE_SIZES).map(|_| ArrayQueue::new(KEEP)).collect(),
        }
    }
}

/// The size class of `len` among `first << i`, if it is one of the first `classes`.
fn class(len: usize, first: usize, classes: usize) -> Option<usize> {
    if len < first || !len.is_power_of_two() {
        return None;
    }
    let i = (len / first).trailing_zeros() as usize;
    (i < classes).then_some(i)
}

impl Recycler {
    /// A chunk of `size` locked empty records: a recycled one, else a new one.
    pub(super) fn chunk(&self, size: usize) -> Box<[Slot]> {
        class(size, FIRST_CHUNK, CHUNK_SIZES)
            .and_then(|i| self.chunks.get(i)?.pop())
            .unwrap_or_else(|| (0..size).map(|_| Slot::empty(true)).collect())
    }

    /// A table of `capacity` entries, boxed as the buffer publishes it (contents unspecified: a buffer
    /// reads only the entries it wrote): a recycled one, else a new one.
    pub(super) fn table(&self, capacity: usize) -> Box<Table> {
        class(capacity, FIRST_CAPACITY, TABLE_SIZES)
            .and_then(|i| self.tables.get(i)?.pop())
            .unwrap_or_else(|| Box::new(Table::with_capacity(capacity)))
    }

    /// Takes back a chunk no thread can reach: its records are reset to locked empty ones (dropping their
    /// version chains) and it is kept, unless its size is not kept or the recycler holds enough.
    pub(super) fn give_chunk(&self, mut chunk: Box<[Slot]>) {
        let Some(queue) =
            class(chunk.len(), FIRST_CHUNK, CHUNK_SIZES).and_then(|i| self.chunks.get(i))
        else {
            return;
        };
        if queue.is_full() {
            return;
        }
        for slot in chunk.iter_mut() {
            *slot = Slot::empty(true);
        }
        let _ = queue.push(chunk);
    }

    /// Takes back a table no thread can reach (kept unless its size is not kept or enough are).
    pub(super) fn give_table(&self, table: Box<Table>) {
        if let Some(queue) =
            class(table.capacity(), FIRST_CAPACITY, TABLE_SIZES).and_then(|i| self.tables.get(i))
        {
            let _ = queue.push(table);
        }
    }

    /// Makes at least [`LOW_WATER`] blocks of every size idle (the maintenance thread, after its passes).
    pub fn top_up(&self) {
        for (i, queue) in self.chunks.iter().enumerate() {
            while queue.len() < LOW_WATER {
                let chunk = (0..FIRST_CHUNK << i).map(|_| Slot::empty(true)).collect();
                if queue.push(chunk).is_err() {
                    break;
                }
            }
        }
        for (i, queue) in self.tables.iter().enumerate() {
            while queue.len() < LOW_WATER {
                if queue
                    .push(Box::new(Table::with_capacity(FIRST_CAPACITY << i)))
                    .is_err()
                {
                    break;
                }
            }
        }
    }

    /// Blocks kept: (chunks, tables).
    #[cfg(test)]
    pub fn idle(&self) -> (usize, usize) {
        (
            self.chunks.iter().map(ArrayQueue::len).sum(),
            self.tables.iter().map(ArrayQueue::len).sum(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes() {
        assert_eq!(class(8, FIRST_CHUNK, CHUNK_SIZES), Some(0));
        assert_eq!(class(256, FIRST_CHUNK, CHUNK_SIZES), Some(CHUNK_SIZES - 1));
        assert_eq!(class(512, FIRST_CHUNK, CHUNK_SIZES), None);
        assert_eq!(class(24, FIRST_CHUNK, CHUNK_SIZES), None);
        assert_eq!(class(4, FIRST_CHUNK, CHUNK_SIZES), None);
        assert_eq!(class(2048, FIRST_CAPACITY, TABLE_SIZES), Some(7));
        assert_eq!(class(4096, FIRST_CAPACITY, TABLE_SIZES), Some(8));
        assert_eq!(class(8192, FIRST_CAPACITY, TABLE_SIZES), None);
    }

    #[test]
    fn blocks_come_back_reset_and_the_bound_holds() {
        let r = Recycler::default();
        let chunk = r.chunk(16);
        // A used record: unlocked and written.
        chunk[3].unlock(&chunk[3]);
        r.give_chunk(chunk);
        assert_eq!(r.idle(), (1, 0));
        let again = r.chunk(16);
        assert_eq!(r.idle(), (0, 0));
        assert!(
            again
                .iter()
                .all(|s| s.status() == Slot::empty(true).status())
        );
        for _ in 0..KEEP + 10 {
            r.give_table(Box::new(Table::with_capacity(32)));
        }
        assert_eq!(r.idle(), (0, KEEP));
        // Odd sizes are not kept.
        r.give_table(Box::new(Table::with_capacity(48)));
        r.give_chunk((0..24).map(|_| Slot::empty(true)).collect());
        assert_eq!(r.idle(), (0, KEEP));
        r.top_up();
        assert_eq!(
            r.idle(),
            (
                CHUNK_SIZES * LOW_WATER,
                KEEP + (TABLE_SIZES - 1) * LOW_WATER
            )
        );
        let top = r.chunk(MAX_CHUNK);
        assert_eq!(top.len(), MAX_CHUNK);
        assert_eq!(r.table(FIRST_CAPACITY << 7).capacity(), 2048);
    }
}
