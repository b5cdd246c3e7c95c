//! Page layouts of B+-tree nodes: leaves, inner nodes and overflow pages.
//!
//! Pages are the buffer pool's bytes (`&[u8]` / `&mut [u8]` of exactly `page_size`), starting with the common
//! 24-byte page header of `storage::page` (checksum, type, reserved, epoch). The functions here never touch
//! the checksum (bytes 0..8) or the epoch (16..24); `*_init` sets the type byte and zeroes the owner-reserved
//! bytes 9..16 (unused by these layouts) and everything from byte 24 on. Integers are little endian.
//!
//! # Formats
//!
//! A [`Layout`] is fixed when a tree is created from the page size and the key / value widths (`Some(w)`:
//! every item is exactly `w` bytes, 1 ≤ w ≤ 64; `None`: variable length). It picks, per node kind:
//!
//! | node  | key width | value width          | format (module)                          |
//! |-------|-----------|----------------------|------------------------------------------|
//! | leaf  | `Some`    | `Some`               | packed (`fixed`): parallel arrays        |
//! | leaf  | `None`    | any                  | slotted (`slotted`): slots + cells       |
//! | leaf  | `Some`    | `None`               | slotted                                  |
//! | inner | `Some`    | any                  | packed: parallel arrays                  |
//! | inner | `None`    | any                  | slotted                                  |
//!
//! Keys compare by plain byte-wise order (`<[u8] as Ord>`), so fixed-width keys must be encoded big endian
//! (as `types` does). Every node format starts with the same 8-byte node header, bytes 24..32:
//!
//! | bytes  | field                                                              |
//! |--------|--------------------------------------------------------------------|
//! | 24..26 | entry count `n` (u16): leaf entries, or inner children             |
//! | 26..28 | slotted only: fragmented bytes (dead bytes inside the cell area)   |
//! | 28..30 | slotted only: cell-area length (cells occupy its last bytes)      |
//! | 30     | inner only: level (≥ 1; 1 = children are leaves)                   |
//! | 31     | zero                                                               |
//!
//! ## Packed leaf (fixed keys and values, `kw`/`vw` bytes; capacity `C = (page_size − 32) / (kw + vw)`)
//!
//! | bytes                     | content                                   |
//! |---------------------------|-------------------------------------------|
//! | 32 .. 32 + C·kw           | keys 0..n, ascending, packed              |
//! | 32 + C·kw .. + C·vw       | values 0..n, packed (value i ↔ key i)     |
//!
//! ## Packed inner node (fixed keys; capacity `C = (page_size − 32 + kw) / (16 + kw)` children)
//!
//! | bytes                              | content                                          |
//! |------------------------------------|--------------------------------------------------|
//! | 32 .. 32 + (C−1)·kw                | separators 1..n (separator i at slot i − 1)       |
//! | then C × u64                       | child page ids 0..n                              |
//! | then C × u64                       | subtree record counts 0..n                       |
//!
//! ## Slotted nodes (variable-length keys or values)
//!
//! A slot array grows from byte 32 (slot i = entry i, in key order), 8 bytes a slot: the **head** of the entry's
//! key (its first 6 bytes, zero-padded; child 0 of an inner node has an empty key and head 0) and the cell
//! offset (u16). Cells grow down from the end of the page. Searches compare heads and read a cell only where
//! heads tie (heads order like keys; equal heads decide nothing). Removing or shrinking a cell leaves dead bytes (counted in the header); when an
//! insertion does not find enough contiguous space between the slots and the cells, the page is compacted in
//! place (through a stack scratch buffer, no heap allocation).
//!
//! | cell          | layout                                                                              |
//! |---------------|-------------------------------------------------------------------------------------|
//! | leaf, inline  | key len u16, value len u16 (< 0xFFFF), key, value                                  |
//! | leaf, overflow| key len u16, 0xFFFF, key, total value len u32, first overflow page u64              |
//! | inner         | key len u16, child page u64, subtree count u64, separator key (len 0 for child 0)   |
//!
//! ## Overflow page (capacity `page_size − 36` payload bytes)
//!
//! | bytes     | content                          |
//! |-----------|----------------------------------|
//! | 24..32    | next page of the chain (0 = end) |
//! | 32..36    | payload length (u32)             |
//! | 36..      | payload, then zeroes             |
//!
//! # Invariants
//!
//! Let `usable = page_size − 32` and, for slotted nodes, `budget = usable / 4`; an entry's *size* is its cell
//! plus its 8-byte slot.
//! 1. **Every slotted entry is at most `budget` bytes.** `max_key_len` (variable keys) is the largest key for
//!    which the worst entry that must be accepted fits the budget: an inner entry (26 bytes + key), a leaf
//!    entry with an overflow reference (24 bytes + key), or with a fixed-width value (12 + vw bytes + key);
//!    capped at `types::MAX_KEY_LEN`. `value_fits_inline` is exactly "the inline entry fits the budget".
//!    Hence after a split of a node that had no room for an entry, the entry fits in either half: a full node
//!    holds more than `usable − budget ≥ 3·budget` bytes, so it has at least 4 entries (inner: 3 separators
//!    besides child 0); the split point is chosen among those leaving ≥ 2 entries on each side to minimise the
//!    larger half, which is then at most `max(usable/2 + budget/2, 2·budget) = 5/8·usable`, leaving
//!    `3/8·usable ≥ budget` free. Packed nodes split at the middle entry and hold ≥ 31 entries.
//! 2. **Splits leave at least 2 entries in each half** (leaves: entries; inner nodes: children), for any node on
//!    which `*_has_room` was false (see 1). Packed capacities for 4 KiB pages with 8-byte keys and values:
//!    254 leaf entries, 169 inner children; the slotted `max_key_len` is 990 bytes for 4 KiB pages, 4062 for
//!    16 KiB pages and 4096 from 32 KiB on. (4096 is out of reach for 16 KiB pages: four 4096-byte keys do
//!    not fit in one, so a full leaf of them could not be split 2 + 2.)
//! 3. **No heap allocation** except the separator returned by [`Layout::inner_split`]; compaction and
//!    `validate` use stack buffers (≤ 64 KiB and 8 KiB): pages are at most [`MAX_BTREE_PAGE_SIZE`] = 64 KiB,
//!    below the page file's limit, which [`Layout::try_new`] (and so `BTree::create` / `BTree::open`) enforces.
//! 4. **Everything read from a page is checked by [`Layout::validate`]**: entry counts against capacity, slot
//!    offsets and cell extents inside the cell area, cells pairwise disjoint, the dead-byte count exact, key
//!    lengths (≤ `max_key_len`, or = the fixed width), value lengths, entry sizes ≤ budget, strictly increasing
//!    keys, slot heads equal to their keys' heads, inner level ≥ 1 and ≥ 1 child, counts summing without
//!    overflow, overflow lengths. On a page it accepts, every accessor and every mutation (within its
//!    documented preconditions) stays in bounds.
//!    Preconditions (`*_has_room` before an insert, valid indices, item widths) are checked with `assert!`:
//!    a violation is a bug in the caller and panics instead of corrupting the page.
//!
//! # Cost model (n entries per node)
//!
//! * Packed: search = binary search over the contiguous key array (8-byte keys compare as big-endian u64),
//!   O(log n) with no indirection; insert / remove = `copy_within` of the array tails, O(n·width);
//!   split = three `memcpy`s. Accessors are O(1) offset arithmetic.
//! * Slotted: search = binary search over the heads in the slot array (a few adjacent cache lines), plus one
//!   cell read per probe whose head ties the key's (none when keys differ in their first 6 bytes) and the
//!   match's cell; insert / remove =
//!   a shift of the slot array, O(n), plus occasionally an O(page) compaction (only when dead bytes are needed
//!   to fit the entry); split = O(page) (copy of the upper cells and compaction of the left page).
//! * `validate`: O(page) for every format.

mod fixed;
mod slotted;
#[cfg(test)]
mod tests;

use crate::error::Error;
use crate::storage::page::{self, MIN_PAGE_SIZE, PAGE_HEADER_LEN, PageId, PageType};
use crate::types::MAX_KEY_LEN;
use fixed::{FixedInner, FixedLeaf};
use slotted::{SlottedInner, SlottedLeaf};
use std::cmp::Ordering;

/// Length of the page header plus the node header: where the entries of a node start.
pub const NODE_HEADER_LEN: usize = 32;
/// Offset of the payload of an overflow page.
pub const OVERFLOW_HEADER_LEN: usize = 36;
/// Largest fixed key or value width a layout accepts.
pub const MAX_FIXED_WIDTH: usize = 64;
/// Largest page size the B+-tree supports (64 KiB), below the page file's limit: slotted nodes store entry
/// counts, cell offsets and cell-area lengths in u16 fields, and compaction and `validate` use stack buffers
/// of this size.
pub const MAX_BTREE_PAGE_SIZE: usize = 64 << 10;

const COUNT_AT: usize = 24;
const FRAG_AT: usize = 26;
const CELL_BYTES_AT: usize = 28;
const LEVEL_AT: usize = 30;
const OVERFLOW_NEXT_AT: usize = 24;
const OVERFLOW_LEN_AT: usize = 32;

/// Where a leaf entry's value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueRef<'a> {
    /// Stored in the leaf.
    Inline(&'a [u8]),
    /// Stored in a chain of overflow pages starting at `first_page`, `len` bytes in all.
    Overflow { len: u32, first_page: PageId },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeafFormat {
    Fixed(FixedLeaf),
    Slotted(SlottedLeaf),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InnerFormat {
    Fixed(FixedInner),
    Slotted(SlottedInner),
}

/// Node layout parameters, fixed when the tree is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    page_size: usize,
    key_width: Option<usize>,
    value_width: Option<usize>,
    max_key_len: usize,
    leaf: LeafFormat,
    inner: InnerFormat,
}

impl Layout {
    /// A layout for pages of `page_size` bytes (a power of two from 4096 to [`MAX_BTREE_PAGE_SIZE`]) and keys
    /// / values of the given fixed width (1..=64 bytes) or of variable length (`None`). Other parameters are
    /// `Error::InvalidArgument`.
    pub fn try_new(
        page_size: usize,
        key_width: Option<usize>,
        value_width: Option<usize>,
    ) -> crate::Result<Layout> {
        if !page_size.is_power_of_two()
            || !(MIN_PAGE_SIZE..=MAX_BTREE_PAGE_SIZE).contains(&page_size)
        {
            return Err(Error::invalid(format!(
                "the B+-tree supports pages up to 64 KiB: page size {page_size} must be a power of two from \
                 {MIN_PAGE_SIZE} to {MAX_BTREE_PAGE_SIZE}"
            )));
        }
        for w in [key_width, value_width].into_iter().flatten() {
            if !(1..=MAX_FIXED_WIDTH).contains(&w) {
                return Err(Error::invalid(format!(
                    "the B+-tree's fixed key and value widths are 1..={MAX_FIXED_WIDTH} bytes, not {w}"
                )));
            }
        }
        Ok(Self::build(page_size, key_width, value_width))
    }

    /// [`try_new`](Self::try_new) for parameters known to be valid (tests, tools): panics on others.
    pub fn new(page_size: usize, key_width: Option<usize>, value_width: Option<usize>) -> Layout {
        match Self::try_new(page_size, key_width, value_width) {
            Ok(layout) => layout,
            Err(e) => panic!("{e}"),
        }
    }

    /// The layout for parameters checked by `try_new`.
    fn build(page_size: usize, key_width: Option<usize>, value_width: Option<usize>) -> Layout {
        let budget = (page_size - NODE_HEADER_LEN) / 4;
        let max_key_len = match key_width {
            Some(w) => w,
            None => {
                let leaf_extra = slotted::leaf_entry_overhead(value_width);
                let inner_extra = slotted::INNER_ENTRY_OVERHEAD;
                MAX_KEY_LEN.min(budget - leaf_extra.max(inner_extra))
            }
        };
        let leaf = match (key_width, value_width) {
            (Some(kw), Some(vw)) => LeafFormat::Fixed(FixedLeaf::new(page_size, kw, vw)),
            _ => LeafFormat::Slotted(SlottedLeaf::new(
                key_width,
                value_width,
                max_key_len,
                budget,
            )),
        };
        let inner = match key_width {
            Some(kw) => InnerFormat::Fixed(FixedInner::new(page_size, kw)),
            None => InnerFormat::Slotted(SlottedInner::new(max_key_len, budget)),
        };
        Layout {
            page_size,
            key_width,
            value_width,
            max_key_len,
            leaf,
            inner,
        }
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The fixed key width, or `None` for variable-length keys.
    pub fn key_width(&self) -> Option<usize> {
        self.key_width
    }

    /// The fixed value width, or `None` for variable-length values.
    pub fn value_width(&self) -> Option<usize> {
        self.value_width
    }

    /// Longest key the tree accepts: the fixed width, or the largest variable key for which the node
    /// invariants hold (at most `types::MAX_KEY_LEN`).
    pub fn max_key_len(&self) -> usize {
        self.max_key_len
    }

    /// Whether a value of `value_len` bytes is stored in the leaf next to a key of `key_len` bytes; if not, the
    /// caller stores it in overflow pages and inserts a `ValueRef::Overflow`. Fixed-width values: exactly
    /// when `value_len` is the width.
    pub fn value_fits_inline(&self, key_len: usize, value_len: usize) -> bool {
        match (self.value_width, self.leaf) {
            (Some(w), _) => value_len == w,
            (None, LeafFormat::Slotted(s)) => s.inline_fits(key_len, value_len),
            (None, LeafFormat::Fixed(_)) => unreachable!("packed leaves have fixed-width values"),
        }
    }

    /// Entries per leaf if leaves use the packed format (fixed keys and values), else `None` (slotted).
    pub fn packed_leaf_capacity(&self) -> Option<usize> {
        match &self.leaf {
            LeafFormat::Fixed(f) => Some(f.capacity()),
            LeafFormat::Slotted(_) => None,
        }
    }

    /// Children per inner node if inner nodes use the packed format (fixed keys), else `None` (slotted).
    pub fn packed_inner_capacity(&self) -> Option<usize> {
        match &self.inner {
            InnerFormat::Fixed(f) => Some(f.capacity()),
            InnerFormat::Slotted(_) => None,
        }
    }

    /// Payload bytes per overflow page.
    pub fn overflow_capacity(&self) -> usize {
        self.page_size - OVERFLOW_HEADER_LEN
    }

    /// Structural check of a leaf, inner or overflow page image read from disk (checksum already verified).
    /// On `Ok`, no method of this layout panics or reads out of bounds on the page (see the module doc).
    pub fn validate(&self, page: &[u8]) -> Result<(), String> {
        if page.len() != self.page_size {
            return Err(format!(
                "page is {} bytes, expected {}",
                page.len(),
                self.page_size
            ));
        }
        match PageType::from_u8(page::page_type(page)) {
            Some(PageType::BTreeLeaf) => match &self.leaf {
                LeafFormat::Fixed(f) => f.validate(page),
                LeafFormat::Slotted(s) => s.validate(page),
            },
            Some(PageType::BTreeInner) => match &self.inner {
                InnerFormat::Fixed(f) => f.validate(page),
                InnerFormat::Slotted(s) => s.validate(page),
            },
            Some(PageType::Overflow) => {
                let len = get_u32(page, OVERFLOW_LEN_AT);
                if len > self.overflow_capacity() {
                    return Err(format!(
                        "overflow page: payload length {len} exceeds capacity {}",
                        self.overflow_capacity()
                    ));
                }
                Ok(())
            }
            Some(other) => Err(format!("page type {other:?} is not a B+-tree page")),
            None => Err(format!("unknown page type byte {}", page::page_type(page))),
        }
    }

    // ---- leaves ----

    /// Makes `page` an empty leaf.
    pub fn leaf_init(&self, page: &mut [u8]) {
        init_node(page, PageType::BTreeLeaf);
    }

    /// Number of entries.
    #[inline]
    pub fn leaf_len(&self, page: &[u8]) -> usize {
        entry_count(page)
    }

    /// Key of entry `i` (< len).
    #[inline]
    pub fn leaf_key<'a>(&self, page: &'a [u8], i: usize) -> &'a [u8] {
        match &self.leaf {
            LeafFormat::Fixed(f) => f.key(page, i),
            LeafFormat::Slotted(s) => s.key(page, i),
        }
    }

    /// Value of entry `i` (< len). Always `Inline` for fixed-width values.
    #[inline]
    pub fn leaf_value<'a>(&self, page: &'a [u8], i: usize) -> ValueRef<'a> {
        match &self.leaf {
            LeafFormat::Fixed(f) => ValueRef::Inline(f.value(page, i)),
            LeafFormat::Slotted(s) => s.value(page, i),
        }
    }

    /// Binary search for `key`, like `slice::binary_search`: `Ok(i)` if entry i has the key, else `Err(i)`
    /// with i the position where it would be inserted.
    #[inline]
    /// Asks the CPU for the cache lines a [`leaf_search`](Self::leaf_search) of this leaf probes (its slot
    /// array or packed keys; reading the header for their number), so that a batch of lookups can overlap
    /// their misses. Only a hint: no effect on results.
    pub fn prefetch_leaf_search(&self, page: &[u8]) {
        match &self.leaf {
            LeafFormat::Fixed(f) => f.prefetch_search(page),
            LeafFormat::Slotted(_) => slotted::prefetch_search(page, 0),
        }
    }

    /// Asks the CPU for the entry a [`leaf_search`](Self::leaf_search) for `key` reads last (its cell),
    /// located from the slot array alone: call after [`prefetch_leaf_search`](Self::prefetch_leaf_search)
    /// has brought that in. Only a hint.
    pub fn prefetch_leaf_entry(&self, page: &[u8], key: &[u8]) {
        if let LeafFormat::Slotted(_) = &self.leaf {
            slotted::prefetch_candidate(page, 0, key);
        }
    }

    /// [`prefetch_leaf_search`](Self::prefetch_leaf_search) for an inner node's
    /// [`inner_search`](Self::inner_search).
    pub fn prefetch_inner_search(&self, page: &[u8]) {
        match &self.inner {
            InnerFormat::Fixed(f) => f.prefetch_search(page),
            InnerFormat::Slotted(_) => slotted::prefetch_search(page, 1),
        }
    }

    pub fn leaf_search(&self, page: &[u8], key: &[u8]) -> Result<usize, usize> {
        match &self.leaf {
            LeafFormat::Fixed(f) => f.search(page, key),
            LeafFormat::Slotted(s) => s.search(page, key),
        }
    }

    /// Whether a new entry with a key of `key_len` bytes and `value` fits (possibly after compaction).
    pub fn leaf_has_room(&self, page: &[u8], key_len: usize, value: ValueRef<'_>) -> bool {
        match &self.leaf {
            LeafFormat::Fixed(f) => f.has_room(page),
            LeafFormat::Slotted(s) => s.has_room(page, key_len, value),
        }
    }

    /// Inserts an entry at position `i` (≤ len), which must keep the keys strictly increasing.
    /// Precondition: `leaf_has_room`.
    pub fn leaf_insert(&self, page: &mut [u8], i: usize, key: &[u8], value: ValueRef<'_>) {
        match &self.leaf {
            LeafFormat::Fixed(f) => f.insert(page, i, key, inline_value(value)),
            LeafFormat::Slotted(s) => s.insert(page, i, key, value),
        }
    }

    /// Whether the value of entry `i` can be replaced by `value` (possibly after compaction).
    pub fn leaf_can_replace(&self, page: &[u8], i: usize, value: ValueRef<'_>) -> bool {
        match &self.leaf {
            LeafFormat::Fixed(_) => true,
            LeafFormat::Slotted(s) => s.can_replace(page, i, value),
        }
    }

    /// Replaces the value of entry `i`. Precondition: `leaf_can_replace`.
    pub fn leaf_replace(&self, page: &mut [u8], i: usize, value: ValueRef<'_>) {
        match &self.leaf {
            LeafFormat::Fixed(f) => f.replace(page, i, inline_value(value)),
            LeafFormat::Slotted(s) => s.replace(page, i, value),
        }
    }

    /// Removes entry `i` (< len).
    pub fn leaf_remove(&self, page: &mut [u8], i: usize) {
        match &self.leaf {
            LeafFormat::Fixed(f) => f.remove(page, i),
            LeafFormat::Slotted(s) => s.remove(page, i),
        }
    }

    /// Moves the upper entries of `left` to `right` (initialised here as a leaf; only its checksum and epoch
    /// bytes are kept) so that both hold about half of the bytes; returns the number of entries left in `left`.
    pub fn leaf_split(&self, left: &mut [u8], right: &mut [u8]) -> usize {
        match &self.leaf {
            LeafFormat::Fixed(f) => f.split(left, right),
            LeafFormat::Slotted(s) => s.split(left, right),
        }
    }

    // ---- inner nodes ----

    /// Makes `page` an inner node of `level` (≥ 1) with one child.
    pub fn inner_init(&self, page: &mut [u8], level: u8, first_child: PageId, first_count: u64) {
        assert!(level >= 1, "inner nodes have level >= 1");
        match &self.inner {
            InnerFormat::Fixed(f) => f.init(page, level, first_child, first_count),
            InnerFormat::Slotted(s) => s.init(page, level, first_child, first_count),
        }
    }

    /// Level of the node (1 = children are leaves).
    #[inline]
    pub fn inner_level(&self, page: &[u8]) -> u8 {
        page[LEVEL_AT]
    }

    /// Number of children (≥ 1).
    #[inline]
    pub fn inner_len(&self, page: &[u8]) -> usize {
        entry_count(page)
    }

    /// Page id of child `i` (< len).
    #[inline]
    pub fn inner_child(&self, page: &[u8], i: usize) -> PageId {
        match &self.inner {
            InnerFormat::Fixed(f) => f.child(page, i),
            InnerFormat::Slotted(s) => s.child(page, i),
        }
    }

    pub fn inner_set_child(&self, page: &mut [u8], i: usize, child: PageId) {
        match &self.inner {
            InnerFormat::Fixed(f) => f.set_child(page, i, child),
            InnerFormat::Slotted(s) => s.set_child(page, i, child),
        }
    }

    /// Number of records in the subtree of child `i` (< len).
    #[inline]
    pub fn inner_count(&self, page: &[u8], i: usize) -> u64 {
        match &self.inner {
            InnerFormat::Fixed(f) => f.count(page, i),
            InnerFormat::Slotted(s) => s.count(page, i),
        }
    }

    pub fn inner_set_count(&self, page: &mut [u8], i: usize, count: u64) {
        match &self.inner {
            InnerFormat::Fixed(f) => f.set_count(page, i, count),
            InnerFormat::Slotted(s) => s.set_count(page, i, count),
        }
    }

    /// Separator before child `i` (1 ≤ i < len): keys of child i−1 < key(i) ≤ keys of child i.
    #[inline]
    pub fn inner_key<'a>(&self, page: &'a [u8], i: usize) -> &'a [u8] {
        match &self.inner {
            InnerFormat::Fixed(f) => f.key(page, i),
            InnerFormat::Slotted(s) => s.key(page, i),
        }
    }

    /// The child whose key range contains `key`: the largest i ≥ 1 with key(i) ≤ key, else 0.
    #[inline]
    pub fn inner_search(&self, page: &[u8], key: &[u8]) -> usize {
        match &self.inner {
            InnerFormat::Fixed(f) => f.search(page, key),
            InnerFormat::Slotted(s) => s.search(page, key),
        }
    }

    /// Whether one more (separator of `key_len` bytes, child, count) entry fits (possibly after compaction).
    pub fn inner_has_room(&self, page: &[u8], key_len: usize) -> bool {
        match &self.inner {
            InnerFormat::Fixed(f) => f.has_room(page),
            InnerFormat::Slotted(s) => s.has_room(page, key_len),
        }
    }

    /// Inserts `child` as child `i` (1 ≤ i ≤ len) with separator `sep` before it; children i.. shift right.
    /// Precondition: `inner_has_room`, and `sep` keeps the separators strictly increasing.
    pub fn inner_insert(&self, page: &mut [u8], i: usize, sep: &[u8], child: PageId, count: u64) {
        match &self.inner {
            InnerFormat::Fixed(f) => f.insert(page, i, sep, child, count),
            InnerFormat::Slotted(s) => s.insert(page, i, sep, child, count),
        }
    }

    /// Removes child `i` and separator `i` (i ≥ 1); for i = 0 removes child 0 and separator 1, so that the old
    /// child 1 becomes child 0 (requires len ≥ 2).
    pub fn inner_remove(&self, page: &mut [u8], i: usize) {
        match &self.inner {
            InnerFormat::Fixed(f) => f.remove(page, i),
            InnerFormat::Slotted(s) => s.remove(page, i),
        }
    }

    /// Moves the upper children of `left` (≥ 2 children) to `right` (initialised here with the same level),
    /// returning the separator between them, which is then stored in neither node.
    pub fn inner_split(&self, left: &mut [u8], right: &mut [u8]) -> Vec<u8> {
        match &self.inner {
            InnerFormat::Fixed(f) => f.split(left, right),
            InnerFormat::Slotted(s) => s.split(left, right),
        }
    }

    /// Sum of the subtree counts (wrapping; `validate` rejects pages whose sum overflows).
    pub fn inner_total(&self, page: &[u8]) -> u64 {
        (0..self.inner_len(page)).fold(0u64, |acc, i| acc.wrapping_add(self.inner_count(page, i)))
    }

    // ---- overflow pages ----

    /// Makes `page` an overflow page holding `data` (≤ `overflow_capacity` bytes) followed by page `next`
    /// (0 = end of the chain).
    pub fn overflow_init(&self, page: &mut [u8], next: PageId, data: &[u8]) {
        assert!(
            data.len() <= self.overflow_capacity(),
            "overflow payload of {} bytes exceeds capacity {}",
            data.len(),
            self.overflow_capacity()
        );
        page::set_page_type(page, PageType::Overflow);
        page[9..PAGE_HEADER_LEN - 8].fill(0);
        put_u64(page, OVERFLOW_NEXT_AT, next);
        put_u32(page, OVERFLOW_LEN_AT, data.len());
        let end = OVERFLOW_HEADER_LEN + data.len();
        page[OVERFLOW_HEADER_LEN..end].copy_from_slice(data);
        page[end..].fill(0);
    }

    pub fn overflow_next(&self, page: &[u8]) -> PageId {
        get_u64(page, OVERFLOW_NEXT_AT)
    }

    pub fn overflow_data<'a>(&self, page: &'a [u8]) -> &'a [u8] {
        let len = get_u32(page, OVERFLOW_LEN_AT);
        &page[OVERFLOW_HEADER_LEN..OVERFLOW_HEADER_LEN + len]
    }
}

// ---- helpers shared by the formats ----

/// The bytes of an inline value; packed leaves cannot hold overflow references.
fn inline_value<'a>(value: ValueRef<'a>) -> &'a [u8] {
    match value {
        ValueRef::Inline(v) => v,
        ValueRef::Overflow { .. } => panic!("fixed-width values are always stored inline"),
    }
}

/// Sets the type byte and zeroes the reserved header bytes and the whole node body.
fn init_node(page: &mut [u8], t: PageType) {
    page::set_page_type(page, t);
    page[9..PAGE_HEADER_LEN - 8].fill(0);
    page[PAGE_HEADER_LEN..].fill(0);
}

/// Asks the CPU for every cache line of `page[from..to]` (clamped to the page), so their misses overlap.
#[inline]
fn prefetch_bytes(page: &[u8], from: usize, to: usize) {
    for at in (from..to.min(page.len())).step_by(64) {
        crate::algo::prefetch_line(&page[at]);
    }
}

#[inline]
fn entry_count(page: &[u8]) -> usize {
    get_u16(page, COUNT_AT)
}

#[inline]
fn set_entry_count(page: &mut [u8], n: usize) {
    put_u16(page, COUNT_AT, n);
}

#[inline]
fn get_u16(page: &[u8], at: usize) -> usize {
    u16::from_le_bytes([page[at], page[at + 1]]) as usize
}

#[inline]
fn put_u16(page: &mut [u8], at: usize, v: usize) {
    debug_assert!(v <= u16::MAX as usize);
    page[at..at + 2].copy_from_slice(&(v as u16).to_le_bytes());
}

#[inline]
fn get_u32(page: &[u8], at: usize) -> usize {
    u32::from_le_bytes(page[at..at + 4].try_into().expect("4 bytes")) as usize
}

#[inline]
fn put_u32(page: &mut [u8], at: usize, v: usize) {
    debug_assert!(v <= u32::MAX as usize);
    page[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes());
}

#[inline]
fn get_u64(page: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(page[at..at + 8].try_into().expect("8 bytes"))
}

#[inline]
fn put_u64(page: &mut [u8], at: usize, v: u64) {
    page[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Binary search over positions 0..n with `cmp(i)` = order of item i relative to the target, like
/// `slice::binary_search_by`.
#[inline]
fn binary_search_by(n: usize, mut cmp: impl FnMut(usize) -> Ordering) -> Result<usize, usize> {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match cmp(mid) {
            Ordering::Less => lo = mid + 1,
            Ordering::Greater => hi = mid,
            Ordering::Equal => return Ok(mid),
        }
    }
    Err(lo)
}

/// Split point for a node of `n` entries whose entry `i` weighs `size(i)` bytes: the `k` (entries 0..k stay)
/// among those leaving ≥ 2 entries on each side (≥ 1 if n < 4) that minimises the larger half, where the
/// right half weighs `total − prefix(k) − discount(k)`.
fn balanced_split_point(
    n: usize,
    size: impl Fn(usize) -> usize,
    discount: impl Fn(usize) -> usize,
) -> usize {
    let margin = if n >= 4 { 2 } else { n.min(2) / 2 };
    let (lo, hi) = (margin, n - margin);
    let total: usize = (0..n).map(&size).sum();
    let (mut best, mut best_cost) = (lo, usize::MAX);
    let mut prefix = 0;
    for k in 0..=hi {
        if k >= lo {
            let right = total - prefix - if k < n { discount(k) } else { 0 };
            let cost = prefix.max(right);
            if cost < best_cost {
                (best, best_cost) = (k, cost);
            }
        }
        if k < n {
            prefix += size(k);
        }
    }
    best
}

/// Error unless `key(first..n)` are strictly increasing; `what(i)` names entry i in the message.
fn check_increasing<'a>(
    n: usize,
    first: usize,
    key: impl Fn(usize) -> &'a [u8],
    what: impl Fn(usize) -> String,
) -> Result<(), String> {
    for i in first + 1..n {
        if key(i - 1) >= key(i) {
            return Err(format!(
                "{}: key is not greater than the key before it",
                what(i)
            ));
        }
    }
    Ok(())
}
