//! Packed node formats for fixed-width keys (and, for leaves, fixed-width values): parallel arrays at fixed
//! offsets, no per-entry indirection. Byte layouts: see the parent module.

use super::{
    LEVEL_AT, NODE_HEADER_LEN, PageId, PageType, binary_search_by, check_increasing, entry_count,
    get_u64, init_node, prefetch_bytes, put_u64, set_entry_count,
};

/// Binary search for `key` in `keys`, a packed array of `w`-byte keys in ascending byte-wise order.
#[inline]
fn search_packed(keys: &[u8], w: usize, key: &[u8]) -> Result<usize, usize> {
    let n = keys.len() / w;
    if w == 8
        && let Ok(k) = <[u8; 8]>::try_from(key)
    {
        // Byte-wise order of 8 bytes = order of their big-endian u64.
        let k = u64::from_be_bytes(k);
        return binary_search_by(n, |i| {
            let at = i * 8;
            u64::from_be_bytes(keys[at..at + 8].try_into().expect("8 bytes")).cmp(&k)
        });
    }
    binary_search_by(n, |i| keys[i * w..(i + 1) * w].cmp(key))
}

/// Packed leaf: `cap` keys of `kw` bytes at 32, then `cap` values of `vw` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FixedLeaf {
    kw: usize,
    vw: usize,
    cap: usize,
    vals_at: usize,
}

impl FixedLeaf {
    pub(super) fn new(page_size: usize, kw: usize, vw: usize) -> FixedLeaf {
        let cap = (page_size - NODE_HEADER_LEN) / (kw + vw);
        FixedLeaf {
            kw,
            vw,
            cap,
            vals_at: NODE_HEADER_LEN + cap * kw,
        }
    }

    /// Maximum number of entries.
    pub(super) fn capacity(&self) -> usize {
        self.cap
    }

    #[inline]
    fn key_at(&self, i: usize) -> usize {
        NODE_HEADER_LEN + i * self.kw
    }

    #[inline]
    fn val_at(&self, i: usize) -> usize {
        self.vals_at + i * self.vw
    }

    #[inline]
    pub(super) fn key<'a>(&self, page: &'a [u8], i: usize) -> &'a [u8] {
        let at = self.key_at(i);
        &page[at..at + self.kw]
    }

    #[inline]
    pub(super) fn value<'a>(&self, page: &'a [u8], i: usize) -> &'a [u8] {
        let at = self.val_at(i);
        &page[at..at + self.vw]
    }

    /// Asks for the cache lines of the packed keys a search probes.
    pub(super) fn prefetch_search(&self, page: &[u8]) {
        prefetch_bytes(page, self.key_at(0), self.key_at(entry_count(page)));
    }

    #[inline]
    pub(super) fn search(&self, page: &[u8], key: &[u8]) -> Result<usize, usize> {
        let n = entry_count(page);
        search_packed(&page[self.key_at(0)..self.key_at(n)], self.kw, key)
    }

    pub(super) fn has_room(&self, page: &[u8]) -> bool {
        entry_count(page) < self.cap
    }

    pub(super) fn insert(&self, page: &mut [u8], i: usize, key: &[u8], value: &[u8]) {
        let n = entry_count(page);
        assert!(n < self.cap, "leaf_insert into a full leaf ({n} entries)");
        assert!(i <= n, "leaf_insert at {i} beyond {n} entries");
        assert_eq!(key.len(), self.kw, "key width");
        assert_eq!(value.len(), self.vw, "value width");
        let k = self.key_at(i);
        page.copy_within(k..self.key_at(n), k + self.kw);
        page[k..k + self.kw].copy_from_slice(key);
        let v = self.val_at(i);
        page.copy_within(v..self.val_at(n), v + self.vw);
        page[v..v + self.vw].copy_from_slice(value);
        set_entry_count(page, n + 1);
    }

    pub(super) fn replace(&self, page: &mut [u8], i: usize, value: &[u8]) {
        assert!(
            i < entry_count(page),
            "leaf_replace of entry {i} beyond the end"
        );
        assert_eq!(value.len(), self.vw, "value width");
        let v = self.val_at(i);
        page[v..v + self.vw].copy_from_slice(value);
    }

    pub(super) fn remove(&self, page: &mut [u8], i: usize) {
        let n = entry_count(page);
        assert!(i < n, "leaf_remove of entry {i} beyond {n} entries");
        page.copy_within(self.key_at(i + 1)..self.key_at(n), self.key_at(i));
        page.copy_within(self.val_at(i + 1)..self.val_at(n), self.val_at(i));
        set_entry_count(page, n - 1);
    }

    pub(super) fn split(&self, left: &mut [u8], right: &mut [u8]) -> usize {
        let n = entry_count(left);
        let keep = n - n / 2;
        let moved = n - keep;
        init_node(right, PageType::BTreeLeaf);
        right[self.key_at(0)..self.key_at(moved)]
            .copy_from_slice(&left[self.key_at(keep)..self.key_at(n)]);
        right[self.val_at(0)..self.val_at(moved)]
            .copy_from_slice(&left[self.val_at(keep)..self.val_at(n)]);
        set_entry_count(right, moved);
        set_entry_count(left, keep);
        keep
    }

    pub(super) fn validate(&self, page: &[u8]) -> Result<(), String> {
        let n = entry_count(page);
        if n > self.cap {
            return Err(format!("leaf holds {n} entries, capacity is {}", self.cap));
        }
        check_increasing(n, 0, |i| self.key(page, i), |i| format!("leaf entry {i}"))
    }
}

/// Packed inner node: `cap − 1` separators of `kw` bytes at 32, then `cap` child ids, then `cap` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FixedInner {
    kw: usize,
    cap: usize,
    children_at: usize,
    counts_at: usize,
}

impl FixedInner {
    pub(super) fn new(page_size: usize, kw: usize) -> FixedInner {
        let cap = (page_size - NODE_HEADER_LEN + kw) / (16 + kw);
        let children_at = NODE_HEADER_LEN + (cap - 1) * kw;
        FixedInner {
            kw,
            cap,
            children_at,
            counts_at: children_at + 8 * cap,
        }
    }

    /// Maximum number of children.
    pub(super) fn capacity(&self) -> usize {
        self.cap
    }

    /// Offset of separator `i` (i ≥ 1; separator i sits in slot i − 1).
    #[inline]
    fn sep_at(&self, i: usize) -> usize {
        NODE_HEADER_LEN + (i - 1) * self.kw
    }

    #[inline]
    fn child_at(&self, i: usize) -> usize {
        self.children_at + 8 * i
    }

    #[inline]
    fn count_at(&self, i: usize) -> usize {
        self.counts_at + 8 * i
    }

    pub(super) fn init(&self, page: &mut [u8], level: u8, child: PageId, count: u64) {
        init_node(page, PageType::BTreeInner);
        page[LEVEL_AT] = level;
        put_u64(page, self.child_at(0), child);
        put_u64(page, self.count_at(0), count);
        set_entry_count(page, 1);
    }

    #[inline]
    pub(super) fn child(&self, page: &[u8], i: usize) -> PageId {
        debug_assert!(i < entry_count(page));
        get_u64(page, self.child_at(i))
    }

    pub(super) fn set_child(&self, page: &mut [u8], i: usize, child: PageId) {
        assert!(
            i < entry_count(page),
            "inner_set_child of child {i} beyond the end"
        );
        put_u64(page, self.child_at(i), child);
    }

    #[inline]
    pub(super) fn count(&self, page: &[u8], i: usize) -> u64 {
        debug_assert!(i < entry_count(page));
        get_u64(page, self.count_at(i))
    }

    pub(super) fn set_count(&self, page: &mut [u8], i: usize, count: u64) {
        assert!(
            i < entry_count(page),
            "inner_set_count of child {i} beyond the end"
        );
        put_u64(page, self.count_at(i), count);
    }

    #[inline]
    pub(super) fn key<'a>(&self, page: &'a [u8], i: usize) -> &'a [u8] {
        assert!(i >= 1, "child 0 has no separator");
        let at = self.sep_at(i);
        &page[at..at + self.kw]
    }

    #[inline]
    /// Asks for the cache lines of the packed separators a search probes.
    pub(super) fn prefetch_search(&self, page: &[u8]) {
        let n = entry_count(page);
        prefetch_bytes(
            page,
            NODE_HEADER_LEN,
            NODE_HEADER_LEN + n.saturating_sub(1) * self.kw,
        );
    }

    pub(super) fn search(&self, page: &[u8], key: &[u8]) -> usize {
        let n = entry_count(page);
        let seps = &page[NODE_HEADER_LEN..NODE_HEADER_LEN + (n - 1) * self.kw];
        match search_packed(seps, self.kw, key) {
            // Slot j holds separator j + 1.
            Ok(j) => j + 1,
            Err(j) => j,
        }
    }

    pub(super) fn has_room(&self, page: &[u8]) -> bool {
        entry_count(page) < self.cap
    }

    pub(super) fn insert(&self, page: &mut [u8], i: usize, sep: &[u8], child: PageId, count: u64) {
        let n = entry_count(page);
        assert!(n < self.cap, "inner_insert into a full node ({n} children)");
        assert!((1..=n).contains(&i), "inner_insert at {i} outside 1..={n}");
        assert_eq!(sep.len(), self.kw, "separator width");
        let s = self.sep_at(i);
        page.copy_within(s..self.sep_at(n), s + self.kw);
        page[s..s + self.kw].copy_from_slice(sep);
        let c = self.child_at(i);
        page.copy_within(c..self.child_at(n), c + 8);
        put_u64(page, c, child);
        let c = self.count_at(i);
        page.copy_within(c..self.count_at(n), c + 8);
        put_u64(page, c, count);
        set_entry_count(page, n + 1);
    }

    pub(super) fn remove(&self, page: &mut [u8], i: usize) {
        let n = entry_count(page);
        let i = if i == 0 {
            assert!(n >= 2, "inner_remove(0) needs two children");
            let (child, count) = (self.child(page, 1), self.count(page, 1));
            put_u64(page, self.child_at(0), child);
            put_u64(page, self.count_at(0), count);
            1
        } else {
            assert!(i < n, "inner_remove of child {i} beyond {n} children");
            i
        };
        page.copy_within(self.sep_at(i + 1)..self.sep_at(n), self.sep_at(i));
        page.copy_within(self.child_at(i + 1)..self.child_at(n), self.child_at(i));
        page.copy_within(self.count_at(i + 1)..self.count_at(n), self.count_at(i));
        set_entry_count(page, n - 1);
    }

    pub(super) fn split(&self, left: &mut [u8], right: &mut [u8]) -> Vec<u8> {
        let n = entry_count(left);
        assert!(n >= 2, "inner_split needs two children");
        let keep = n / 2;
        let moved = n - keep;
        let sep = self.key(left, keep).to_vec();
        init_node(right, PageType::BTreeInner);
        right[LEVEL_AT] = left[LEVEL_AT];
        // Right's separators 1..moved are left's separators keep+1..n.
        right[self.sep_at(1)..self.sep_at(moved)]
            .copy_from_slice(&left[self.sep_at(keep + 1)..self.sep_at(n)]);
        right[self.child_at(0)..self.child_at(moved)]
            .copy_from_slice(&left[self.child_at(keep)..self.child_at(n)]);
        right[self.count_at(0)..self.count_at(moved)]
            .copy_from_slice(&left[self.count_at(keep)..self.count_at(n)]);
        set_entry_count(right, moved);
        set_entry_count(left, keep);
        sep
    }

    pub(super) fn validate(&self, page: &[u8]) -> Result<(), String> {
        let n = entry_count(page);
        let level = page[LEVEL_AT];
        if level == 0 {
            return Err("inner node: level 0".into());
        }
        if n == 0 || n > self.cap {
            return Err(format!(
                "inner node holds {n} children, expected 1..={}",
                self.cap
            ));
        }
        check_increasing(
            n,
            1,
            |i| self.key(page, i),
            |i| format!("inner separator {i}"),
        )?;
        (0..n)
            .try_fold(0u64, |acc, i| acc.checked_add(self.count(page, i)))
            .map_or_else(
                || Err("inner node: subtree counts overflow u64".to_string()),
                |_| Ok(()),
            )
    }
}
