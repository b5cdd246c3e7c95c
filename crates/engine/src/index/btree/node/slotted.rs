//! Slotted node formats for variable-length keys or values: a slot array after the node header, cells growing
//! down from the page end, dead bytes counted and reclaimed by compaction. Byte layouts and invariants: see the
//! parent module.
//!
//! **Prefix and heads.** A node records a prefix of up to [`MAX_PREFIX`] bytes that every key in it starts
//! with (length in byte 31; its first [`HEADER_PREFIX`] bytes in the page header's owner bytes 9..16, the rest
//! read from the node's first key, which starts with it), and each slot holds the **head** of its entry's key:
//! the [`HEAD_LEN`] bytes after the prefix, zero-padded, beside the cell offset. Heads order like the keys'
//! remainders (a smaller head means a smaller key; equal heads say nothing), so a search checks the prefix,
//! compares heads in the contiguous slot array and reads a cell only where heads tie: keys of a node that
//! differ within 6 bytes after their common prefix are found with one cell read — the match — instead of one
//! per probe, each of which is a cache miss on a page that is not hot. A prefix longer than the header holds
//! costs one more cell read (the first key's) only when the key is not found (a found key's cell has the
//! prefix); it is what keeps heads distinct for keys that share long starts, such as `user:000000012345`
//! (node format 3: format 2 capped the prefix at 7 bytes, so such keys tied on every head and a search read
//! a cell per probe). The slot array's lines are prefetched together before the search. The prefix shrinks
//! when a key without it is inserted (every head is then recomputed) and is set to the longest common one at
//! splits; removals keep it.

use super::{
    CELL_BYTES_AT, FRAG_AT, LEVEL_AT, MAX_BTREE_PAGE_SIZE, NODE_HEADER_LEN, PageId, PageType,
    ValueRef, balanced_split_point, binary_search_by, entry_count, get_u16, get_u32, get_u64,
    init_node, prefetch_bytes, put_u16, put_u32, put_u64, set_entry_count,
};
use crate::types::MAX_KEY_LEN;
use std::ops::Range;

/// Bytes per slot: the key's head (big endian), then the cell offset (u16).
const SLOT: usize = 8;
/// Bytes of a key (after the node's prefix) kept in its slot.
pub(super) const HEAD_LEN: usize = 6;
/// Longest node prefix (its length is one byte).
pub(super) const MAX_PREFIX: usize = 255;
/// Prefix bytes kept in the page header's owner bytes; the rest of a longer prefix is read from the first key.
pub(super) const HEADER_PREFIX: usize = 7;
/// Where the prefix bytes are (page header bytes 9..16).
pub(super) const PREFIX_AT: usize = 9;
/// Where the prefix length is (node header byte 31).
pub(super) const PREFIX_LEN_AT: usize = 31;
/// Leaf cell header: key length u16, value length u16 (or `OVERFLOW_TAG`).
const LEAF_CELL_HEADER: usize = 4;
/// Payload of an overflow reference: total length u32, first page u64.
const OVERFLOW_REF_LEN: usize = 12;
/// Value-length tag of a cell whose value lives in overflow pages.
const OVERFLOW_TAG: usize = 0xFFFF;
/// Inner cell header: key length u16, child u64, count u64.
const INNER_CELL_HEADER: usize = 18;
/// Size of an inner entry (slot + cell) beyond its separator.
pub(super) const INNER_ENTRY_OVERHEAD: usize = SLOT + INNER_CELL_HEADER;

/// Size of the largest leaf entry (slot + cell) beyond its key that must always fit: an overflow reference,
/// or a value of the fixed width.
pub(super) fn leaf_entry_overhead(value_width: Option<usize>) -> usize {
    SLOT + LEAF_CELL_HEADER + value_width.unwrap_or(OVERFLOW_REF_LEN)
}

/// Length of the cell at `off`, from its header.
type CellLen = fn(&[u8], usize) -> usize;

// ---- slot array and cell area, shared by leaves and inner nodes ----

#[inline]
fn slot_at(i: usize) -> usize {
    NODE_HEADER_LEN + SLOT * i
}

/// Cell offset of entry `i`.
#[inline]
fn slot(page: &[u8], i: usize) -> usize {
    get_u16(page, slot_at(i) + HEAD_LEN)
}

/// Moves entry `i`'s cell offset (its head stays).
#[inline]
fn set_slot(page: &mut [u8], i: usize, off: usize) {
    put_u16(page, slot_at(i) + HEAD_LEN, off);
}

/// The head of a key: its first `HEAD_LEN` bytes, zero-padded, as a big-endian number.
#[inline]
fn head_of(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(HEAD_LEN);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b) >> (8 * (8 - HEAD_LEN))
}

/// The head stored in entry `i`'s slot.
#[inline]
fn head(page: &[u8], i: usize) -> u64 {
    let at = slot_at(i);
    let mut b = [0u8; 8];
    b[8 - HEAD_LEN..].copy_from_slice(&page[at..at + HEAD_LEN]);
    u64::from_be_bytes(b)
}

/// Writes entry `i`'s head.
#[inline]
fn set_head(page: &mut [u8], i: usize, head: u64) {
    let at = slot_at(i);
    page[at..at + HEAD_LEN].copy_from_slice(&head.to_be_bytes()[8 - HEAD_LEN..]);
}

/// Length of the node's key prefix.
#[inline]
fn prefix_len(page: &[u8]) -> usize {
    page[PREFIX_LEN_AT] as usize
}

/// The node's key prefix in two parts: the bytes kept in the header, then the rest (empty unless the prefix is
/// longer than [`HEADER_PREFIX`]) from the key of entry `first`, which every key of the node starts with. A
/// node without entries from `first` on has no key to read the rest from: its rest is empty (searches of such
/// a node need no prefix, and inserts set a new one).
#[inline]
fn prefix(page: &[u8], first: usize, key_at: KeyAt) -> (&[u8], &[u8]) {
    let len = prefix_len(page);
    let header = header_prefix(page);
    if len == header.len() || entry_count(page) <= first {
        return (header, &[]);
    }
    (header, &key_at(page, first)[header.len()..len])
}

/// The prefix bytes kept in the header: the first `min(prefix length, HEADER_PREFIX)`.
#[inline]
fn header_prefix(page: &[u8]) -> &[u8] {
    &page[PREFIX_AT..PREFIX_AT + prefix_len(page).min(HEADER_PREFIX)]
}

/// How `key` compares with the prefix `header ++ rest`: `Less` if it sorts before every key that has the prefix
/// (including when it is a proper start of the prefix), `Greater` if after all of them, `Equal` if it has it.
#[inline]
fn cmp_with_prefix(key: &[u8], header: &[u8], rest: &[u8]) -> std::cmp::Ordering {
    use std::cmp::Ordering::{Equal, Less};
    let mut key = key;
    for part in [header, rest] {
        let k = &key[..key.len().min(part.len())];
        match k.cmp(part) {
            Equal if k.len() == part.len() => key = &key[k.len()..],
            Equal => return Less,
            o => return o,
        }
    }
    Equal
}

/// The key of entry `i`, read from its cell.
type KeyAt = for<'a> fn(&'a [u8], usize) -> &'a [u8];

/// Sets the prefix to `p` (≤ `MAX_PREFIX` bytes, shared by the keys of entries `first..`) and recomputes every
/// head.
fn set_prefix(page: &mut [u8], first: usize, p: &[u8], key_at: KeyAt) {
    let stored = p.len().min(HEADER_PREFIX);
    let mut bytes = [0u8; HEADER_PREFIX];
    bytes[..stored].copy_from_slice(&p[..stored]);
    page[PREFIX_AT..PREFIX_AT + HEADER_PREFIX].copy_from_slice(&bytes);
    page[PREFIX_LEN_AT] = p.len() as u8;
    for i in first..entry_count(page) {
        let h = head_of(&key_at(page, i)[p.len()..]);
        set_head(page, i, h);
    }
}

/// Length of the common prefix of `a` and `b`.
fn common_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Makes the prefix one that `key` (about to be inserted) shares: on an empty node, as much of `key` as fits;
/// otherwise the common part of the prefix and `key`. Returns the head of `key`.
fn admit_key(page: &mut [u8], first: usize, key: &[u8], key_at: KeyAt) -> u64 {
    let empty = entry_count(page) == first;
    let old_len = prefix_len(page);
    let keep = if empty {
        key.len().min(MAX_PREFIX)
    } else {
        let (header, rest) = prefix(page, first, key_at);
        let shared = common_len(header, key);
        if shared == header.len() {
            shared + common_len(rest, &key[shared..])
        } else {
            shared
        }
    };
    if empty || keep != old_len {
        set_prefix(page, first, &key[..keep], key_at);
    }
    head_of(&key[keep..])
}

/// Sets the prefix to the longest one (up to `MAX_PREFIX`) shared by entries `first..` (after a split).
fn reset_prefix(page: &mut [u8], first: usize, key_at: KeyAt) {
    let n = entry_count(page);
    let mut p = [0u8; MAX_PREFIX];
    let len = if n > first {
        let (lo, hi) = (key_at(page, first), key_at(page, n - 1));
        let len = common_len(lo, hi).min(MAX_PREFIX);
        p[..len].copy_from_slice(&lo[..len]);
        len
    } else {
        0
    };
    set_prefix(page, first, &p[..len], key_at);
}

/// Asks for the cache lines of the slot array (from entry `first`) that a search probes.
pub(super) fn prefetch_search(page: &[u8], first: usize) {
    prefetch_bytes(page, slot_at(first), slot_at(entry_count(page)));
}

/// Bytes of a candidate cell asked for: a key and a short value (the cell header, a 16-byte key and a
/// 100-byte value take two lines).
const CANDIDATE_BYTES: usize = 128;

/// Asks for the first cache lines of the cell a search for `key` reads, found by heads alone from the slot
/// array (which should be in cache: [`prefetch_search`] first): the first entry from `first` whose head is
/// not below `key`'s, where heads tie when `key` is there. Reads no cell; only a hint.
pub(super) fn prefetch_candidate(page: &[u8], first: usize, key: &[u8]) {
    let n = entry_count(page);
    let len = prefix_len(page);
    if n <= first || key.len() < len {
        return;
    }
    let qh = head_of(&key[len..]);
    let (mut lo, mut hi) = (first, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if head(page, mid) < qh {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let at = slot(page, lo.min(n - 1));
    prefetch_bytes(page, at, at + CANDIDATE_BYTES);
}

/// Binary search over entries `first..n` by key: the prefix, then heads, the cell's key only when heads tie.
///
/// Of a prefix longer than the header holds, the rest is checked only where it matters: a search that finds
/// `key` read the matching cell, whose key has the prefix, so `key` has it too; a search that does not find
/// it then compares `key` with the prefix (one cell read, the first key). A key without the prefix gives the
/// head search a meaningless head, but that search still returns some position, which the check replaces.
#[inline]
fn search_by_head(page: &[u8], first: usize, key: &[u8], key_at: KeyAt) -> Result<usize, usize> {
    use std::cmp::Ordering::{Equal, Less};
    let n = entry_count(page);
    if n == first {
        return Err(0);
    }
    let len = prefix_len(page);
    let header = header_prefix(page);
    let outside = |o| if o == Less { Err(0) } else { Err(n - first) };
    match cmp_with_prefix(key, header, &[]) {
        Equal => {}
        o => return outside(o),
    }
    let with_rest = || cmp_with_prefix(key, header, prefix(page, first, key_at).1);
    if key.len() < len {
        return outside(with_rest());
    }
    let qh = head_of(&key[len..]);
    // The probes land anywhere in the slot array: ask for all of its cache lines at once, so that their
    // misses overlap instead of costing one dependent miss per probe on a page that is not hot.
    prefetch_bytes(page, slot_at(first), slot_at(n));
    let found = binary_search_by(n - first, |j| {
        let i = first + j;
        head(page, i)
            .cmp(&qh)
            .then_with(|| key_at(page, i).cmp(key))
    });
    match found {
        Err(_) if len > header.len() => match with_rest() {
            Equal => found,
            o => outside(o),
        },
        _ => found,
    }
}

#[inline]
fn cell_bytes(page: &[u8]) -> usize {
    get_u16(page, CELL_BYTES_AT)
}

#[inline]
fn frag(page: &[u8]) -> usize {
    get_u16(page, FRAG_AT)
}

fn add_frag(page: &mut [u8], bytes: usize) {
    let f = frag(page) + bytes;
    put_u16(page, FRAG_AT, f);
}

/// Free bytes between the slot array and the cells.
#[inline]
fn contiguous_free(page: &[u8]) -> usize {
    page.len() - cell_bytes(page) - slot_at(entry_count(page))
}

/// Free bytes after a compaction.
#[inline]
fn total_free(page: &[u8]) -> usize {
    contiguous_free(page) + frag(page)
}

/// Rewrites the live cells contiguously at the page end, in slot order, dropping the dead bytes.
fn compact(page: &mut [u8], cell_len: CellLen) {
    // A scratch buffer of the page's size on the stack (zeroing 64 KiB for a 4 KiB page would dominate).
    match page.len() {
        4096 => compact_with(page, cell_len, &mut [0u8; 4096]),
        8192 => compact_with(page, cell_len, &mut [0u8; 8192]),
        16384 => compact_with(page, cell_len, &mut [0u8; 16384]),
        32768 => compact_with(page, cell_len, &mut [0u8; 32768]),
        _ => compact_with(page, cell_len, &mut [0u8; MAX_BTREE_PAGE_SIZE]),
    }
}

fn compact_with(page: &mut [u8], cell_len: CellLen, scratch: &mut [u8]) {
    let ps = page.len();
    let start = ps - cell_bytes(page);
    let scratch = &mut scratch[..ps];
    scratch[start..].copy_from_slice(&page[start..]);
    let mut end = ps;
    for i in 0..entry_count(page) {
        let off = slot(page, i);
        let len = cell_len(scratch, off);
        end -= len;
        page[end..end + len].copy_from_slice(&scratch[off..off + len]);
        set_slot(page, i, end);
    }
    put_u16(page, CELL_BYTES_AT, ps - end);
    put_u16(page, FRAG_AT, 0);
}

/// Allocates a cell of `size` bytes (compacting if needed) with room for one more slot; returns its offset.
fn reserve(page: &mut [u8], size: usize, cell_len: CellLen) -> usize {
    if contiguous_free(page) < size + SLOT && frag(page) > 0 {
        compact(page, cell_len);
    }
    assert!(
        contiguous_free(page) >= size + SLOT,
        "node has no room for a cell of {size} bytes"
    );
    let cb = cell_bytes(page) + size;
    put_u16(page, CELL_BYTES_AT, cb);
    page.len() - cb
}

/// Inserts slot `i` pointing at `off`, with `head`; slots i.. shift right.
fn insert_slot(page: &mut [u8], i: usize, off: usize, head: u64) {
    let n = entry_count(page);
    page.copy_within(slot_at(i)..slot_at(n), slot_at(i + 1));
    set_head(page, i, head);
    set_slot(page, i, off);
    set_entry_count(page, n + 1);
}

/// Removes entry `i`: its cell becomes dead bytes (or is given back if it is the lowest cell).
fn remove_slot(page: &mut [u8], i: usize, cell_len: CellLen) {
    let n = entry_count(page);
    let off = slot(page, i);
    let len = cell_len(page, off);
    let cb = cell_bytes(page);
    if n == 1 {
        put_u16(page, CELL_BYTES_AT, 0);
        put_u16(page, FRAG_AT, 0);
    } else if off == page.len() - cb {
        put_u16(page, CELL_BYTES_AT, cb - len);
    } else {
        add_frag(page, len);
    }
    page.copy_within(slot_at(i + 1)..slot_at(n), slot_at(i));
    set_entry_count(page, n - 1);
}

/// Appends copies of the cells of `src`'s entries `range` to `dst`, a node with room for them. Their heads
/// are copied as they are: the caller resets `dst`'s prefix (and so every head) afterwards.
fn copy_cells(src: &[u8], range: Range<usize>, dst: &mut [u8], cell_len: CellLen) {
    for j in range {
        let off = slot(src, j);
        let len = cell_len(src, off);
        let at = reserve(dst, len, cell_len);
        dst[at..at + len].copy_from_slice(&src[off..off + len]);
        insert_slot(dst, entry_count(dst), at, head(src, j));
    }
}

/// Bitmap of the page bytes claimed by cells, to detect overlapping cells without allocating.
struct Claims([u64; MAX_BTREE_PAGE_SIZE / 64]);

impl Claims {
    /// Marks bytes `a..b`; false if any of them was already marked.
    fn claim(&mut self, a: usize, b: usize) -> bool {
        let mut fresh = true;
        let mut i = a;
        while i < b {
            let bit = i % 64;
            let span = (64 - bit).min(b - i);
            let mask = if span == 64 {
                u64::MAX
            } else {
                ((1u64 << span) - 1) << bit
            };
            fresh &= self.0[i / 64] & mask == 0;
            self.0[i / 64] |= mask;
            i += span;
        }
        fresh
    }
}

/// Checks the header and the extent of every cell (inside the cell area, pairwise disjoint, with the dead
/// byte count exact), then calls `check(i, off, len)` for each entry in slot order.
fn validate_cells(
    page: &[u8],
    what: &str,
    header_len: usize,
    cell_len: CellLen,
    mut check: impl FnMut(usize, usize, usize) -> Result<(), String>,
) -> Result<(), String> {
    let ps = page.len();
    let n = entry_count(page);
    let cb = cell_bytes(page);
    let fr = frag(page);
    if slot_at(n) + cb > ps {
        return Err(format!(
            "{what}: {n} slots and {cb} bytes of cells exceed the page size {ps}"
        ));
    }
    if fr > cb {
        return Err(format!(
            "{what}: {fr} fragmented bytes but only {cb} bytes of cells"
        ));
    }
    let start = ps - cb;
    let mut claims = Claims([0; MAX_BTREE_PAGE_SIZE / 64]);
    let mut live = 0;
    for i in 0..n {
        let off = slot(page, i);
        if off < start || off + header_len > ps {
            return Err(format!(
                "{what} entry {i}: cell offset {off} outside the cell area {start}..{ps}"
            ));
        }
        let len = cell_len(page, off);
        if off + len > ps {
            return Err(format!(
                "{what} entry {i}: cell of {len} bytes at offset {off} runs past the page end"
            ));
        }
        if !claims.claim(off, off + len) {
            return Err(format!(
                "{what} entry {i}: cell at offset {off} overlaps another cell"
            ));
        }
        live += len;
        check(i, off, len)?;
    }
    if live + fr != cb {
        return Err(format!(
            "{what}: {cb} bytes of cells, but {live} live and {fr} fragmented"
        ));
    }
    Ok(())
}

/// Checks that `key` (entry `i`'s) starts with the node's prefix — its header bytes, and the rest as the node's
/// first key `first_key` has it — and that its slot holds its head.
fn check_head(page: &[u8], i: usize, key: &[u8], first_key: &[u8]) -> Result<(), String> {
    let len = prefix_len(page);
    let stored = len.min(HEADER_PREFIX);
    if key.len() < len
        || first_key.len() < len
        || key[..stored] != page[PREFIX_AT..PREFIX_AT + stored]
        || key[stored..len] != first_key[stored..len]
    {
        return Err(format!(
            "key does not start with the node's {len}-byte prefix"
        ));
    }
    if head(page, i) != head_of(&key[len..]) {
        return Err("slot head does not match the key".into());
    }
    Ok(())
}

/// Checks the prefix fields of the header: zeros after the prefix bytes it keeps.
fn validate_prefix(page: &[u8], what: &str) -> Result<(), String> {
    let len = prefix_len(page);
    if page[PREFIX_AT + len.min(HEADER_PREFIX)..PREFIX_AT + HEADER_PREFIX]
        .iter()
        .any(|&b| b != 0)
    {
        return Err(format!("{what}: nonzero bytes after the {len}-byte prefix"));
    }
    Ok(())
}

// ---- leaves ----

fn leaf_key(page: &[u8], i: usize) -> &[u8] {
    let off = slot(page, i);
    let klen = get_u16(page, off);
    &page[off + LEAF_CELL_HEADER..off + LEAF_CELL_HEADER + klen]
}

fn leaf_cell_len(page: &[u8], off: usize) -> usize {
    let klen = get_u16(page, off);
    let tag = get_u16(page, off + 2);
    LEAF_CELL_HEADER
        + klen
        + if tag == OVERFLOW_TAG {
            OVERFLOW_REF_LEN
        } else {
            tag
        }
}

fn payload_len(value: ValueRef<'_>) -> usize {
    match value {
        ValueRef::Inline(v) => v.len(),
        ValueRef::Overflow { .. } => OVERFLOW_REF_LEN,
    }
}

/// Writes the value-length tag and the value part of the leaf cell at `off` with a key of `klen` bytes.
fn write_value(page: &mut [u8], off: usize, klen: usize, value: ValueRef<'_>) {
    let at = off + LEAF_CELL_HEADER + klen;
    match value {
        ValueRef::Inline(v) => {
            put_u16(page, off + 2, v.len());
            page[at..at + v.len()].copy_from_slice(v);
        }
        ValueRef::Overflow { len, first_page } => {
            put_u16(page, off + 2, OVERFLOW_TAG);
            put_u32(page, at, len as usize);
            put_u64(page, at + 4, first_page);
        }
    }
}

/// Slotted leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SlottedLeaf {
    key_width: Option<usize>,
    value_width: Option<usize>,
    max_key_len: usize,
    /// Largest entry (slot + cell).
    budget: usize,
}

impl SlottedLeaf {
    pub(super) fn new(
        key_width: Option<usize>,
        value_width: Option<usize>,
        max_key_len: usize,
        budget: usize,
    ) -> SlottedLeaf {
        SlottedLeaf {
            key_width,
            value_width,
            max_key_len,
            budget,
        }
    }

    /// Whether an entry with an inline value fits the per-entry budget.
    pub(super) fn inline_fits(&self, key_len: usize, value_len: usize) -> bool {
        SLOT + LEAF_CELL_HEADER + key_len + value_len <= self.budget
    }

    #[inline]
    pub(super) fn key<'a>(&self, page: &'a [u8], i: usize) -> &'a [u8] {
        leaf_key(page, i)
    }

    pub(super) fn value<'a>(&self, page: &'a [u8], i: usize) -> ValueRef<'a> {
        let off = slot(page, i);
        let klen = get_u16(page, off);
        let tag = get_u16(page, off + 2);
        let at = off + LEAF_CELL_HEADER + klen;
        if tag == OVERFLOW_TAG {
            ValueRef::Overflow {
                len: get_u32(page, at) as u32,
                first_page: get_u64(page, at + 4),
            }
        } else {
            ValueRef::Inline(&page[at..at + tag])
        }
    }

    #[inline]
    pub(super) fn search(&self, page: &[u8], key: &[u8]) -> Result<usize, usize> {
        search_by_head(page, 0, key, leaf_key)
    }

    pub(super) fn has_room(&self, page: &[u8], key_len: usize, value: ValueRef<'_>) -> bool {
        SLOT + LEAF_CELL_HEADER + key_len + payload_len(value) <= total_free(page)
    }

    /// Panics unless the value has the layout's width and stays within the per-entry budget with a key of
    /// `klen` bytes.
    fn check_value(&self, klen: usize, value: ValueRef<'_>) {
        match value {
            ValueRef::Inline(v) => {
                if let Some(w) = self.value_width {
                    assert_eq!(v.len(), w, "value width");
                }
                assert!(
                    self.inline_fits(klen, v.len()),
                    "inline value of {} bytes with a {klen}-byte key exceeds the entry budget",
                    v.len()
                );
            }
            ValueRef::Overflow { len, .. } => {
                assert!(
                    self.value_width.is_none(),
                    "fixed-width values are always stored inline"
                );
                assert!(len > 0, "overflow values are not empty");
            }
        }
    }

    pub(super) fn insert(&self, page: &mut [u8], i: usize, key: &[u8], value: ValueRef<'_>) {
        match self.key_width {
            Some(w) => assert_eq!(key.len(), w, "key width"),
            None => assert!(
                key.len() <= self.max_key_len,
                "key of {} bytes is too long",
                key.len()
            ),
        }
        self.check_value(key.len(), value);
        let n = entry_count(page);
        assert!(i <= n, "leaf_insert at {i} beyond {n} entries");
        let size = LEAF_CELL_HEADER + key.len() + payload_len(value);
        assert!(
            SLOT + size <= total_free(page),
            "leaf_insert into a leaf without room"
        );
        let head = admit_key(page, 0, key, leaf_key);
        let off = reserve(page, size, leaf_cell_len);
        put_u16(page, off, key.len());
        page[off + LEAF_CELL_HEADER..off + LEAF_CELL_HEADER + key.len()].copy_from_slice(key);
        write_value(page, off, key.len(), value);
        insert_slot(page, i, off, head);
    }

    pub(super) fn can_replace(&self, page: &[u8], i: usize, value: ValueRef<'_>) -> bool {
        let off = slot(page, i);
        let new = LEAF_CELL_HEADER + get_u16(page, off) + payload_len(value);
        new <= leaf_cell_len(page, off) + total_free(page)
    }

    pub(super) fn replace(&self, page: &mut [u8], i: usize, value: ValueRef<'_>) {
        assert!(
            i < entry_count(page),
            "leaf_replace of entry {i} beyond the end"
        );
        let off = slot(page, i);
        let klen = get_u16(page, off);
        self.check_value(klen, value);
        let old = leaf_cell_len(page, off);
        let new = LEAF_CELL_HEADER + klen + payload_len(value);
        if new <= old {
            write_value(page, off, klen, value);
            add_frag(page, old - new);
        } else if contiguous_free(page) >= new {
            let cb = cell_bytes(page) + new;
            put_u16(page, CELL_BYTES_AT, cb);
            let to = page.len() - cb;
            page.copy_within(off..off + LEAF_CELL_HEADER + klen, to);
            write_value(page, to, klen, value);
            set_slot(page, i, to);
            add_frag(page, old);
        } else {
            assert!(
                new <= old + total_free(page),
                "leaf_replace in a leaf without room"
            );
            let mut key = [0u8; MAX_KEY_LEN];
            key[..klen]
                .copy_from_slice(&page[off + LEAF_CELL_HEADER..off + LEAF_CELL_HEADER + klen]);
            self.remove(page, i);
            self.insert(page, i, &key[..klen], value);
        }
    }

    pub(super) fn remove(&self, page: &mut [u8], i: usize) {
        assert!(
            i < entry_count(page),
            "leaf_remove of entry {i} beyond the end"
        );
        remove_slot(page, i, leaf_cell_len);
    }

    pub(super) fn split(&self, left: &mut [u8], right: &mut [u8]) -> usize {
        let n = entry_count(left);
        let page: &[u8] = left;
        let k = balanced_split_point(n, |i| SLOT + leaf_cell_len(page, slot(page, i)), |_| 0);
        init_node(right, PageType::BTreeLeaf);
        copy_cells(left, k..n, right, leaf_cell_len);
        set_entry_count(left, k);
        compact(left, leaf_cell_len);
        reset_prefix(left, 0, leaf_key);
        reset_prefix(right, 0, leaf_key);
        k
    }

    pub(super) fn validate(&self, page: &[u8]) -> Result<(), String> {
        validate_prefix(page, "leaf")?;
        let mut prev: Option<Range<usize>> = None;
        let mut first: Option<Range<usize>> = None;
        validate_cells(
            page,
            "leaf",
            LEAF_CELL_HEADER,
            leaf_cell_len,
            |i, off, len| {
                let klen = get_u16(page, off);
                let tag = get_u16(page, off + 2);
                match self.key_width {
                    Some(w) if klen != w => {
                        return Err(format!("leaf entry {i}: key length {klen}, expected {w}"));
                    }
                    None if klen > self.max_key_len => {
                        return Err(format!(
                            "leaf entry {i}: key length {klen} exceeds {}",
                            self.max_key_len
                        ));
                    }
                    _ => {}
                }
                if tag == OVERFLOW_TAG {
                    if let Some(w) = self.value_width {
                        return Err(format!(
                            "leaf entry {i}: overflow value in a tree of {w}-byte values"
                        ));
                    }
                    if get_u32(page, off + LEAF_CELL_HEADER + klen) == 0 {
                        return Err(format!("leaf entry {i}: overflow value of length 0"));
                    }
                } else if let Some(w) = self.value_width
                    && tag != w
                {
                    return Err(format!("leaf entry {i}: value length {tag}, expected {w}"));
                }
                if SLOT + len > self.budget {
                    return Err(format!(
                        "leaf entry {i}: entry of {} bytes exceeds the per-entry limit {}",
                        SLOT + len,
                        self.budget
                    ));
                }
                let key = off + LEAF_CELL_HEADER..off + LEAF_CELL_HEADER + klen;
                let first_key = first.get_or_insert_with(|| key.clone()).clone();
                check_head(page, i, &page[key.clone()], &page[first_key])
                    .map_err(|e| format!("leaf entry {i}: {e}"))?;
                if let Some(p) = prev.take()
                    && page[p] >= page[key.clone()]
                {
                    return Err(format!(
                        "leaf entry {i}: key is not greater than the key before it"
                    ));
                }
                prev = Some(key);
                Ok(())
            },
        )
    }
}

// ---- inner nodes ----

fn inner_key(page: &[u8], i: usize) -> &[u8] {
    let off = slot(page, i);
    let klen = get_u16(page, off);
    &page[off + INNER_CELL_HEADER..off + INNER_CELL_HEADER + klen]
}

fn inner_cell_len(page: &[u8], off: usize) -> usize {
    INNER_CELL_HEADER + get_u16(page, off)
}

/// Slotted inner node. Child 0's cell has an empty key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SlottedInner {
    max_key_len: usize,
    /// Largest entry (slot + cell).
    budget: usize,
}

impl SlottedInner {
    pub(super) fn new(max_key_len: usize, budget: usize) -> SlottedInner {
        SlottedInner {
            max_key_len,
            budget,
        }
    }

    fn write_cell(page: &mut [u8], off: usize, sep: &[u8], child: PageId, count: u64) {
        put_u16(page, off, sep.len());
        put_u64(page, off + 2, child);
        put_u64(page, off + 10, count);
        page[off + INNER_CELL_HEADER..off + INNER_CELL_HEADER + sep.len()].copy_from_slice(sep);
    }

    pub(super) fn init(&self, page: &mut [u8], level: u8, child: PageId, count: u64) {
        init_node(page, PageType::BTreeInner);
        page[LEVEL_AT] = level;
        let off = reserve(page, INNER_CELL_HEADER, inner_cell_len);
        Self::write_cell(page, off, &[], child, count);
        insert_slot(page, 0, off, head_of(&[]));
    }

    #[inline]
    pub(super) fn child(&self, page: &[u8], i: usize) -> PageId {
        debug_assert!(i < entry_count(page));
        get_u64(page, slot(page, i) + 2)
    }

    pub(super) fn set_child(&self, page: &mut [u8], i: usize, child: PageId) {
        assert!(
            i < entry_count(page),
            "inner_set_child of child {i} beyond the end"
        );
        let off = slot(page, i);
        put_u64(page, off + 2, child);
    }

    #[inline]
    pub(super) fn count(&self, page: &[u8], i: usize) -> u64 {
        debug_assert!(i < entry_count(page));
        get_u64(page, slot(page, i) + 10)
    }

    pub(super) fn set_count(&self, page: &mut [u8], i: usize, count: u64) {
        assert!(
            i < entry_count(page),
            "inner_set_count of child {i} beyond the end"
        );
        let off = slot(page, i);
        put_u64(page, off + 10, count);
    }

    #[inline]
    pub(super) fn key<'a>(&self, page: &'a [u8], i: usize) -> &'a [u8] {
        debug_assert!(i >= 1, "child 0 has no separator");
        inner_key(page, i)
    }

    #[inline]
    pub(super) fn search(&self, page: &[u8], key: &[u8]) -> usize {
        match search_by_head(page, 1, key, inner_key) {
            Ok(j) => j + 1,
            Err(j) => j,
        }
    }

    pub(super) fn has_room(&self, page: &[u8], key_len: usize) -> bool {
        INNER_ENTRY_OVERHEAD + key_len <= total_free(page)
    }

    pub(super) fn insert(&self, page: &mut [u8], i: usize, sep: &[u8], child: PageId, count: u64) {
        let n = entry_count(page);
        assert!((1..=n).contains(&i), "inner_insert at {i} outside 1..={n}");
        assert!(
            sep.len() <= self.max_key_len,
            "separator of {} bytes is too long",
            sep.len()
        );
        let size = INNER_CELL_HEADER + sep.len();
        assert!(
            SLOT + size <= total_free(page),
            "inner_insert into a node without room"
        );
        let head = admit_key(page, 1, sep, inner_key);
        let off = reserve(page, size, inner_cell_len);
        Self::write_cell(page, off, sep, child, count);
        insert_slot(page, i, off, head);
    }

    pub(super) fn remove(&self, page: &mut [u8], i: usize) {
        let n = entry_count(page);
        let i = if i == 0 {
            assert!(n >= 2, "inner_remove(0) needs two children");
            let (child, count) = (self.child(page, 1), self.count(page, 1));
            self.set_child(page, 0, child);
            self.set_count(page, 0, count);
            1
        } else {
            assert!(i < n, "inner_remove of child {i} beyond {n} children");
            i
        };
        remove_slot(page, i, inner_cell_len);
    }

    pub(super) fn split(&self, left: &mut [u8], right: &mut [u8]) -> Vec<u8> {
        let n = entry_count(left);
        assert!(n >= 2, "inner_split needs two children");
        let page: &[u8] = left;
        // Child k becomes right's child 0 and loses its separator.
        let k = balanced_split_point(
            n,
            |i| SLOT + inner_cell_len(page, slot(page, i)),
            |k| get_u16(page, slot(page, k)),
        );
        let sep = self.key(left, k).to_vec();
        self.init(
            right,
            left[LEVEL_AT],
            self.child(left, k),
            self.count(left, k),
        );
        copy_cells(left, k + 1..n, right, inner_cell_len);
        set_entry_count(left, k);
        compact(left, inner_cell_len);
        reset_prefix(left, 1, inner_key);
        reset_prefix(right, 1, inner_key);
        sep
    }

    pub(super) fn validate(&self, page: &[u8]) -> Result<(), String> {
        if page[LEVEL_AT] == 0 {
            return Err("inner node: level 0".into());
        }
        if entry_count(page) == 0 {
            return Err("inner node without children".into());
        }
        validate_prefix(page, "inner node")?;
        let mut prev: Option<Range<usize>> = None;
        let mut first: Option<Range<usize>> = None;
        let mut total = Some(0u64);
        validate_cells(
            page,
            "inner node",
            INNER_CELL_HEADER,
            inner_cell_len,
            |i, off, len| {
                let klen = get_u16(page, off);
                if i == 0 && klen != 0 {
                    return Err(format!(
                        "inner node: child 0 has a separator of {klen} bytes"
                    ));
                }
                if klen > self.max_key_len {
                    return Err(format!(
                        "inner separator {i}: key length {klen} exceeds {}",
                        self.max_key_len
                    ));
                }
                if SLOT + len > self.budget {
                    return Err(format!(
                        "inner entry {i}: entry of {} bytes exceeds the per-entry limit {}",
                        SLOT + len,
                        self.budget
                    ));
                }
                total = total.and_then(|t| t.checked_add(get_u64(page, off + 10)));
                let key = off + INNER_CELL_HEADER..off + INNER_CELL_HEADER + klen;
                if i == 0 {
                    if head(page, 0) != 0 {
                        return Err("inner entry 0: slot head of the empty key is not 0".into());
                    }
                } else {
                    let first_key = first.get_or_insert_with(|| key.clone()).clone();
                    check_head(page, i, &page[key.clone()], &page[first_key])
                        .map_err(|e| format!("inner entry {i}: {e}"))?;
                }
                if let Some(p) = prev.take()
                    && page[p] >= page[key.clone()]
                {
                    return Err(format!(
                        "inner separator {i}: key is not greater than the key before it"
                    ));
                }
                if i >= 1 {
                    prev = Some(key);
                }
                Ok(())
            },
        )?;
        if total.is_none() {
            return Err("inner node: subtree counts overflow u64".into());
        }
        Ok(())
    }
}
