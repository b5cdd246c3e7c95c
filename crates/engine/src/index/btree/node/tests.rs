//! Model-based and fuzz tests of the node layouts.

use super::*;

/// Where slot `i` of a slotted node starts (its key head).
fn slot_head_at(i: usize) -> usize {
    NODE_HEADER_LEN + 8 * i
}

/// Where slot `i`'s cell offset is.
fn slot_offset_at(i: usize) -> usize {
    slot_head_at(i) + slotted::HEAD_LEN
}
use proptest::prelude::*;
use proptest::sample::Index;

/// `cases` proptest cases unless `PROPTEST_CASES` says otherwise.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

const CHECKSUM_PATTERN: [u8; 8] = [0xA5; 8];
const EPOCH_PATTERN: [u8; 8] = [0x5A; 8];

/// A page of `layout`'s size full of garbage except recognisable checksum and epoch bytes.
fn blank_page(layout: &Layout, garbage: u8) -> Vec<u8> {
    let mut p = vec![garbage; layout.page_size()];
    p[0..8].copy_from_slice(&CHECKSUM_PATTERN);
    p[16..24].copy_from_slice(&EPOCH_PATTERN);
    p
}

fn assert_header_untouched(page: &[u8]) {
    assert_eq!(page[0..8], CHECKSUM_PATTERN, "checksum bytes modified");
    assert_eq!(page[16..24], EPOCH_PATTERN, "epoch bytes modified");
}

/// All layouts under test: both formats, mixed widths, two page sizes.
fn layouts() -> Vec<Layout> {
    let mut v = Vec::new();
    for ps in [4096, 16384] {
        for (kw, vw) in [
            (Some(8), Some(8)),
            (None, None),
            (Some(8), None),
            (None, Some(8)),
            (Some(3), Some(64)),
            (Some(64), None),
        ] {
            v.push(Layout::new(ps, kw, vw));
        }
    }
    v
}

// ---- leaf model ----

#[derive(Debug, Clone, PartialEq, Eq)]
enum MVal {
    Inline(Vec<u8>),
    Overflow(u32, u64),
}

impl MVal {
    fn as_ref(&self) -> ValueRef<'_> {
        match self {
            MVal::Inline(v) => ValueRef::Inline(v),
            MVal::Overflow(len, first_page) => ValueRef::Overflow {
                len: *len,
                first_page: *first_page,
            },
        }
    }
    fn from_ref(v: ValueRef<'_>) -> MVal {
        match v {
            ValueRef::Inline(v) => MVal::Inline(v.to_vec()),
            ValueRef::Overflow { len, first_page } => MVal::Overflow(len, first_page),
        }
    }
}

type Model = Vec<(Vec<u8>, MVal)>;

/// A key for `layout` from a size class and some bytes.
fn mk_key(layout: &Layout, class: u8, bytes: &[u8]) -> Vec<u8> {
    let len = match layout.key_width() {
        Some(w) => w,
        None => match class % 8 {
            0..=3 => bytes.len(),
            4 | 5 => 40 + bytes.len() * 13,
            6 => layout.max_key_len() - bytes.len(),
            _ => layout.max_key_len(),
        },
    };
    let mut k = bytes.to_vec();
    k.resize(len, 0x77);
    k
}

/// A value for an entry with a key of `key_len` bytes: inline if it fits, else an overflow reference.
fn mk_val(layout: &Layout, key_len: usize, class: u8, seed: u32) -> MVal {
    let len = match layout.value_width() {
        Some(w) => w,
        None => match class % 8 {
            0 => 0,
            1..=3 => 1 + seed as usize % 20,
            4 => 100 + seed as usize % 300,
            5 => 1000 + seed as usize % 20000,
            // The largest inline value, or just beyond it.
            c => (0..=layout.page_size())
                .take_while(|&v| layout.value_fits_inline(key_len, v))
                .last()
                .map_or(0, |v| v + (c as usize - 6)),
        },
    };
    if layout.value_fits_inline(key_len, len) {
        MVal::Inline((0..len).map(|i| (seed as usize + i) as u8).collect())
    } else {
        MVal::Overflow(len.max(1) as u32, seed as u64 + 2)
    }
}

fn check_leaf(layout: &Layout, page: &[u8], model: &Model) {
    assert_header_untouched(page);
    layout.validate(page).unwrap();
    assert_eq!(layout.leaf_len(page), model.len());
    for (i, (k, v)) in model.iter().enumerate() {
        assert_eq!(layout.leaf_key(page, i), &k[..], "key {i}");
        assert_eq!(MVal::from_ref(layout.leaf_value(page, i)), *v, "value {i}");
        assert_eq!(layout.leaf_search(page, k), Ok(i));
    }
}

fn check_probe(layout: &Layout, page: &[u8], model: &Model, probe: &[u8]) {
    let expected = model.binary_search_by(|(k, _)| k.as_slice().cmp(probe));
    assert_eq!(layout.leaf_search(page, probe), expected, "probe {probe:?}");
}

#[derive(Debug, Clone)]
enum LeafOp {
    Insert {
        kclass: u8,
        key: Vec<u8>,
        vclass: u8,
        seed: u32,
    },
    Remove(Index),
    Replace(Index, u8, u32),
    Probe(u8, Vec<u8>),
    /// Inserts `count` keys `key`+counter (so that packed leaves fill up too).
    Bulk {
        kclass: u8,
        key: Vec<u8>,
        vclass: u8,
        count: u8,
    },
}

/// The `c`-th key of a run starting at `base`: the counter replaces the last two bytes of fixed-width keys
/// and is appended to variable ones (or replaces their last bytes at the length limit).
fn run_key(layout: &Layout, base: &[u8], c: u16) -> Vec<u8> {
    let mut k = base.to_vec();
    if layout.key_width().is_none() && k.len() + 2 <= layout.max_key_len() {
        k.extend_from_slice(&[0, 0]);
    }
    let at = k.len().saturating_sub(2);
    let tail = &c.to_be_bytes()[2 - (k.len() - at)..];
    k[at..].copy_from_slice(tail);
    k
}

fn leaf_ops() -> impl Strategy<Value = Vec<LeafOp>> {
    let key = prop::collection::vec(any::<u8>(), 0..6);
    let op = prop_oneof![
        6 => (any::<u8>(), key.clone(), any::<u8>(), any::<u32>())
            .prop_map(|(kclass, key, vclass, seed)| LeafOp::Insert { kclass, key, vclass, seed }),
        2 => any::<Index>().prop_map(LeafOp::Remove),
        2 => (any::<Index>(), any::<u8>(), any::<u32>()).prop_map(|(i, c, s)| LeafOp::Replace(i, c, s)),
        1 => (any::<u8>(), key.clone()).prop_map(|(c, k)| LeafOp::Probe(c, k)),
        1 => (any::<u8>(), key, any::<u8>(), any::<u8>())
            .prop_map(|(kclass, key, vclass, count)| LeafOp::Bulk { kclass, key, vclass, count }),
    ];
    prop::collection::vec(op, 1..300)
}

/// Byte weight of entry i of a leaf as the slotted format counts it (slot + cell).
fn entry_weight(layout: &Layout, page: &[u8], i: usize) -> usize {
    let klen = layout.leaf_key(page, i).len();
    2 + 4
        + klen
        + match layout.leaf_value(page, i) {
            ValueRef::Inline(v) => v.len(),
            ValueRef::Overflow { .. } => 12,
        }
}

fn usable(layout: &Layout) -> usize {
    layout.page_size() - NODE_HEADER_LEN
}

/// Splits the full leaf `page` (`model`) and checks the halves; returns (right page, number kept left).
fn split_and_check(
    layout: &Layout,
    page: &mut [u8],
    model: &Model,
    garbage: u8,
) -> (Vec<u8>, usize) {
    let n = model.len();
    assert!(n >= 4, "a full leaf has at least 4 entries, has {n}");
    let mut right = blank_page(layout, garbage);
    let k = layout.leaf_split(page, &mut right);
    check_leaf(layout, page, &model[..k].to_vec());
    check_leaf(layout, &right, &model[k..].to_vec());
    assert!(k >= 2 && n - k >= 2, "split {k} / {}", n - k);
    if layout.packed_leaf_capacity().is_some() {
        assert_eq!(k, n - n / 2);
    } else {
        let l: usize = (0..k).map(|i| entry_weight(layout, page, i)).sum();
        let r: usize = (0..n - k).map(|i| entry_weight(layout, &right, i)).sum();
        assert!(
            l.max(r) * 8 <= usable(layout) * 5,
            "unbalanced split: {l} / {r}"
        );
    }
    (right, k)
}

/// Inserts `key` → `val` at `i` of the leaf, splitting (and continuing in the half the key belongs to) if
/// needed.
fn model_insert(
    layout: &Layout,
    page: &mut Vec<u8>,
    model: &mut Model,
    i: usize,
    key: Vec<u8>,
    val: MVal,
) {
    if !layout.leaf_has_room(page, key.len(), val.as_ref()) {
        let (right, k) = split_and_check(layout, page, model, key.len() as u8);
        if i > k {
            *page = right;
            model.drain(..k);
            let i = i - k;
            assert!(
                layout.leaf_has_room(page, key.len(), val.as_ref()),
                "invariant 1 (right)"
            );
            layout.leaf_insert(page, i, &key, val.as_ref());
            model.insert(i, (key, val));
            return;
        }
        model.truncate(k);
        assert!(
            layout.leaf_has_room(page, key.len(), val.as_ref()),
            "invariant 1 (left)"
        );
    }
    layout.leaf_insert(page, i, &key, val.as_ref());
    model.insert(i, (key, val));
}

/// Inserts or replaces `key` the way the tree does: replace in place if possible, else remove and insert.
fn model_upsert(layout: &Layout, page: &mut Vec<u8>, model: &mut Model, key: Vec<u8>, val: MVal) {
    match model.binary_search_by(|(k, _)| k.cmp(&key)) {
        Ok(i) => {
            if layout.leaf_can_replace(page, i, val.as_ref()) {
                layout.leaf_replace(page, i, val.as_ref());
                model[i].1 = val;
            } else {
                layout.leaf_remove(page, i);
                model.remove(i);
                model_insert(layout, page, model, i, key, val);
            }
        }
        Err(i) => model_insert(layout, page, model, i, key, val),
    }
}

fn leaf_model(layout: Layout, ops: &[LeafOp]) {
    let mut page = blank_page(&layout, 0xEE);
    layout.leaf_init(&mut page);
    let mut model: Model = Vec::new();
    for op in ops {
        match op {
            LeafOp::Insert {
                kclass,
                key,
                vclass,
                seed,
            } => {
                let key = mk_key(&layout, *kclass, key);
                let val = mk_val(&layout, key.len(), *vclass, *seed);
                model_upsert(&layout, &mut page, &mut model, key, val);
            }
            LeafOp::Bulk {
                kclass,
                key,
                vclass,
                count,
            } => {
                let base = mk_key(&layout, *kclass, key);
                for c in 0..*count as u16 {
                    let key = run_key(&layout, &base, c);
                    let val = mk_val(&layout, key.len(), *vclass, c as u32);
                    model_upsert(&layout, &mut page, &mut model, key, val);
                    check_leaf(&layout, &page, &model);
                }
            }
            LeafOp::Remove(ix) => {
                if !model.is_empty() {
                    let i = ix.index(model.len());
                    layout.leaf_remove(&mut page, i);
                    model.remove(i);
                }
            }
            LeafOp::Replace(ix, class, seed) => {
                if !model.is_empty() {
                    let i = ix.index(model.len());
                    let val = mk_val(&layout, model[i].0.len(), *class, *seed);
                    if layout.leaf_can_replace(&page, i, val.as_ref()) {
                        layout.leaf_replace(&mut page, i, val.as_ref());
                        model[i].1 = val;
                    } else {
                        assert!(layout.packed_leaf_capacity().is_none());
                    }
                }
            }
            LeafOp::Probe(class, key) => {
                let probe = mk_key(&layout, *class, key);
                check_probe(&layout, &page, &model, &probe);
                check_probe(&layout, &page, &model, key);
            }
        }
        check_leaf(&layout, &page, &model);
    }
}

macro_rules! leaf_model_tests {
    ($($name:ident: $ps:expr, $kw:expr, $vw:expr;)*) => {$(
        proptest! {
            #![proptest_config(config(24))]
            #[test]
            fn $name(ops in leaf_ops()) {
                leaf_model(Layout::new($ps, $kw, $vw), &ops);
            }
        }
    )*};
}

leaf_model_tests! {
    leaf_model_fixed_4k: 4096, Some(8), Some(8);
    leaf_model_fixed_16k: 16384, Some(8), Some(8);
    leaf_model_fixed_wide_4k: 4096, Some(24), Some(64);
    leaf_model_var_4k: 4096, None, None;
    leaf_model_var_16k: 16384, None, None;
    leaf_model_fixed_key_var_value_4k: 4096, Some(8), None;
    leaf_model_var_key_fixed_value_4k: 4096, None, Some(8);
    leaf_model_var_key_fixed_value_16k: 16384, None, Some(64);
}

// ---- leaf splits with adversarial sizes ----

/// An entry size class for the adversarial split test: (key length class, value class).
fn adversarial_entry() -> impl Strategy<Value = (u8, u8)> {
    prop_oneof![
        (Just(7u8), Just(6u8)), // max key, largest inline value
        (Just(7u8), Just(7u8)), // max key, overflow
        (Just(0u8), Just(6u8)), // tiny key, largest inline value
        (Just(0u8), Just(0u8)), // tiny entry
        (any::<u8>(), any::<u8>()),
    ]
}

proptest! {
    #![proptest_config(config(64))]
    /// Fills a leaf in key order with entries of adversarial sizes until the entry `e` (at any position) no
    /// longer fits, then checks the split: ≥ 2 entries per half, balance, and `e` fits in its half.
    #[test]
    fn leaf_split_invariants(
        layout_ix in 0..12usize,
        sizes in prop::collection::vec(adversarial_entry(), 1..64),
        e in adversarial_entry(),
        pos in any::<Index>(),
    ) {
        let layout = layouts()[layout_ix];
        // Even numbers for the filling entries, big endian, in the key's last bytes (fixed) or first 4 (variable).
        let key_for = |j: u32, class: u8| {
            let be = (2 * j as u64).to_be_bytes();
            match layout.key_width() {
                Some(w) => {
                    let mut k = vec![0; w.saturating_sub(8)];
                    k.extend_from_slice(&be[8 - w.min(8)..]);
                    k
                }
                None => mk_key(&layout, class, &be[4..]),
            }
        };
        let mut page = blank_page(&layout, 1);
        layout.leaf_init(&mut page);
        let mut model: Model = Vec::new();
        let (kc, vc) = e;
        let probe_key = mk_key(&layout, kc, &[0; 4]);
        let probe_val = mk_val(&layout, probe_key.len(), vc, 99);
        let mut j = 0u32;
        // Fill with the given sizes, then with tiny entries, until an entry like `e` no longer fits.
        while layout.leaf_has_room(&page, probe_key.len(), probe_val.as_ref()) {
            let (kc, vc) = sizes[j as usize % sizes.len()];
            let mut key = key_for(j + 1, kc);
            let mut val = mk_val(&layout, key.len(), vc, j);
            if !layout.leaf_has_room(&page, key.len(), val.as_ref()) {
                key = key_for(j + 1, 0);
                val = mk_val(&layout, key.len(), 0, j);
                if !layout.leaf_has_room(&page, key.len(), val.as_ref()) {
                    break;
                }
            }
            layout.leaf_insert(&mut page, model.len(), &key, val.as_ref());
            model.push((key, val));
            j += 1;
        }
        // The entry that does not fit, between existing keys.
        let p = pos.index(model.len() + 1);
        let mut ekey = key_for(p as u32, kc);
        match layout.key_width() {
            Some(w) => ekey[w - 1] |= 1,
            None => ekey[3] |= 1,
        }
        let eval = mk_val(&layout, ekey.len(), vc, 99);
        let i = model.binary_search_by(|(k, _)| k.cmp(&ekey)).unwrap_err();
        prop_assume!(!layout.leaf_has_room(&page, ekey.len(), eval.as_ref()));
        model_insert(&layout, &mut page, &mut model, i, ekey, eval);
        check_leaf(&layout, &page, &model);
    }
}

#[test]
fn full_leaf_of_max_entries_splits_two_and_two() {
    for layout in layouts() {
        let mut page = blank_page(&layout, 3);
        layout.leaf_init(&mut page);
        let klen = layout.max_key_len();
        let mut n = 0u32;
        let val = |klen: usize| mk_val(&layout, klen, 7, 1);
        loop {
            let mut key = vec![0xFF; klen];
            key[..4.min(klen)].copy_from_slice(&(2 * n).to_be_bytes()[4 - 4.min(klen)..]);
            if !layout.leaf_has_room(&page, klen, val(klen).as_ref()) {
                break;
            }
            layout.leaf_insert(&mut page, n as usize, &key, val(klen).as_ref());
            n += 1;
        }
        assert!(n >= 4, "{layout:?}: only {n} max entries fit");
        let mut right = blank_page(&layout, 4);
        let k = layout.leaf_split(&mut page, &mut right);
        assert!(k >= 2 && n as usize - k >= 2);
        for half in [&page, &right] {
            layout.validate(half).unwrap();
            assert!(layout.leaf_has_room(half, klen, val(klen).as_ref()));
            // Also the largest inline entry.
            let v = mk_val(&layout, klen, 6, 1);
            assert!(layout.leaf_has_room(half, klen, v.as_ref()));
        }
    }
}

// ---- layout parameters ----

#[test]
fn capacities_and_limits() {
    let l = Layout::new(4096, Some(8), Some(8));
    assert_eq!(l.packed_leaf_capacity(), Some(254));
    assert_eq!(l.packed_inner_capacity(), Some(169));
    assert_eq!(l.max_key_len(), 8);
    assert!(l.value_fits_inline(8, 8));
    assert!(!l.value_fits_inline(8, 9));

    let v = Layout::new(4096, None, None);
    assert_eq!(v.packed_leaf_capacity(), None);
    assert_eq!(v.packed_inner_capacity(), None);
    // Budget 1016 − the larger of an inner entry's overhead (slot 8 + cell header 18) and a leaf's (slot 8 +
    // cell header 4 + overflow reference 12).
    assert_eq!(v.max_key_len(), 990);
    assert_eq!(Layout::new(16384, None, None).max_key_len(), 4062);
    assert_eq!(Layout::new(32768, None, None).max_key_len(), 4096);
    assert_eq!(Layout::new(65536, None, None).max_key_len(), 4096);
    // Budget 1016 = slot 8 + header 4 + key + value.
    assert!(v.value_fits_inline(10, 994));
    assert!(!v.value_fits_inline(10, 995));
    assert!(v.value_fits_inline(990, 14));
    assert_eq!(v.overflow_capacity(), 4060);

    let m = Layout::new(4096, Some(8), None);
    assert_eq!(m.packed_leaf_capacity(), None);
    assert_eq!(m.packed_inner_capacity(), Some(169));
    let m = Layout::new(4096, None, Some(64));
    assert_eq!(m.max_key_len(), 1016 - 76);
    assert!(m.value_fits_inline(0, 64) && !m.value_fits_inline(0, 63));

    for ps in [4096, 8192, 16384, 32768, 65536] {
        for (kw, vw) in [(Some(1), Some(1)), (Some(64), Some(64)), (Some(1), None)] {
            let l = Layout::new(ps, kw, vw);
            assert!(l.packed_inner_capacity().unwrap() >= 4);
            assert!(
                l.packed_leaf_capacity()
                    .is_none_or(|c| (4..=u16::MAX as usize).contains(&c))
            );
        }
    }
}

// ---- inner nodes ----

type InnerModel = Vec<(Vec<u8>, PageId, u64)>;

fn check_inner(layout: &Layout, page: &[u8], model: &InnerModel, level: u8) {
    assert_header_untouched(page);
    layout.validate(page).unwrap();
    assert_eq!(layout.inner_len(page), model.len());
    assert_eq!(layout.inner_level(page), level);
    for (i, (k, c, n)) in model.iter().enumerate() {
        assert_eq!(layout.inner_child(page, i), *c);
        assert_eq!(layout.inner_count(page, i), *n);
        if i > 0 {
            assert_eq!(layout.inner_key(page, i), &k[..]);
            assert_eq!(layout.inner_search(page, k), i);
        }
    }
    assert_eq!(
        layout.inner_total(page),
        model.iter().map(|e| e.2).sum::<u64>()
    );
}

fn inner_model_search(model: &InnerModel, key: &[u8]) -> usize {
    model[1..]
        .iter()
        .take_while(|(k, _, _)| k.as_slice() <= key)
        .count()
}

#[derive(Debug, Clone)]
enum InnerOp {
    Insert(u8, Vec<u8>, u64, u32),
    Remove(Index),
    SetChild(Index, u64),
    SetCount(Index, u32),
    Probe(u8, Vec<u8>),
    Bulk(u8, Vec<u8>, u8),
}

fn inner_ops() -> impl Strategy<Value = Vec<InnerOp>> {
    let key = prop::collection::vec(any::<u8>(), 0..6);
    let op = prop_oneof![
        6 => (any::<u8>(), key.clone(), any::<u64>(), any::<u32>())
            .prop_map(|(c, k, ch, n)| InnerOp::Insert(c, k, ch, n)),
        2 => any::<Index>().prop_map(InnerOp::Remove),
        1 => (any::<Index>(), any::<u64>()).prop_map(|(i, c)| InnerOp::SetChild(i, c)),
        1 => (any::<Index>(), any::<u32>()).prop_map(|(i, c)| InnerOp::SetCount(i, c)),
        2 => (any::<u8>(), key.clone()).prop_map(|(c, k)| InnerOp::Probe(c, k)),
        1 => (any::<u8>(), key, any::<u8>()).prop_map(|(c, k, n)| InnerOp::Bulk(c, k, n)),
    ];
    prop::collection::vec(op, 1..300)
}

/// Inserts separator `sep` with a new child after it (unless present), splitting (and continuing in the half
/// the separator belongs to) if needed.
fn inner_model_insert(
    layout: &Layout,
    level: u8,
    page: &mut Vec<u8>,
    model: &mut InnerModel,
    sep: Vec<u8>,
    child: PageId,
    count: u64,
) {
    let p = model[1..].iter().take_while(|(k, _, _)| *k < sep).count();
    if model.get(p + 1).is_some_and(|(k, _, _)| *k == sep) {
        return;
    }
    let i = p + 1;
    if !layout.inner_has_room(page, sep.len()) {
        let n = model.len();
        assert!(n >= 4, "a full inner node has at least 4 children, has {n}");
        let mut right = blank_page(layout, sep.len() as u8);
        let promoted = layout.inner_split(page, &mut right);
        let k = layout.inner_len(page);
        assert!(k >= 2 && n - k >= 2, "split {k} / {}", n - k);
        assert_eq!(promoted, model[k].0);
        let mut rmodel = model.split_off(k);
        rmodel[0].0.clear();
        check_inner(layout, page, model, level);
        check_inner(layout, &right, &rmodel, level);
        if layout.packed_inner_capacity().is_some() {
            assert_eq!(k, n / 2);
        } else {
            let weight = |m: &InnerModel| m.iter().map(|e| 20 + e.0.len()).sum::<usize>();
            let (l, r) = (weight(model), weight(&rmodel));
            assert!(
                l.max(r) * 8 <= usable(layout) * 5,
                "unbalanced split: {l} / {r}"
            );
        }
        if i > k {
            *page = right;
            *model = rmodel;
            let i = i - k;
            assert!(
                layout.inner_has_room(page, sep.len()),
                "invariant 1 (right)"
            );
            layout.inner_insert(page, i, &sep, child, count);
            model.insert(i, (sep, child, count));
            return;
        }
        assert!(layout.inner_has_room(page, sep.len()), "invariant 1 (left)");
    }
    layout.inner_insert(page, i, &sep, child, count);
    model.insert(i, (sep, child, count));
}

fn inner_model(layout: Layout, level: u8, ops: &[InnerOp]) {
    let mut page = blank_page(&layout, 0xCC);
    layout.inner_init(&mut page, level, 77, 5);
    let mut model: InnerModel = vec![(Vec::new(), 77, 5)];
    check_inner(&layout, &page, &model, level);
    for op in ops {
        match op {
            InnerOp::Insert(class, key, child, count) => {
                let sep = mk_key(&layout, *class, key);
                inner_model_insert(
                    &layout,
                    level,
                    &mut page,
                    &mut model,
                    sep,
                    *child,
                    *count as u64,
                );
            }
            InnerOp::Bulk(class, key, count) => {
                let base = mk_key(&layout, *class, key);
                for c in 0..*count as u16 {
                    let sep = run_key(&layout, &base, c);
                    inner_model_insert(
                        &layout,
                        level,
                        &mut page,
                        &mut model,
                        sep,
                        c as u64 + 9,
                        c as u64,
                    );
                    check_inner(&layout, &page, &model, level);
                }
            }
            InnerOp::Remove(ix) => {
                if model.len() >= 2 {
                    let i = ix.index(model.len());
                    layout.inner_remove(&mut page, i);
                    if i == 0 {
                        let (_, c, n) = model.remove(1);
                        model[0] = (Vec::new(), c, n);
                    } else {
                        model.remove(i);
                    }
                }
            }
            InnerOp::SetChild(ix, c) => {
                let i = ix.index(model.len());
                layout.inner_set_child(&mut page, i, *c);
                model[i].1 = *c;
            }
            InnerOp::SetCount(ix, c) => {
                let i = ix.index(model.len());
                layout.inner_set_count(&mut page, i, *c as u64);
                model[i].2 = *c as u64;
            }
            InnerOp::Probe(class, key) => {
                let probe = mk_key(&layout, *class, key);
                assert_eq!(
                    layout.inner_search(&page, &probe),
                    inner_model_search(&model, &probe)
                );
                assert_eq!(
                    layout.inner_search(&page, key),
                    inner_model_search(&model, key)
                );
            }
        }
        check_inner(&layout, &page, &model, level);
    }
}

macro_rules! inner_model_tests {
    ($($name:ident: $ps:expr, $kw:expr;)*) => {$(
        proptest! {
            #![proptest_config(config(24))]
            #[test]
            fn $name(ops in inner_ops(), level in 1u8..=255) {
                inner_model(Layout::new($ps, $kw, None), level, &ops);
            }
        }
    )*};
}

inner_model_tests! {
    inner_model_fixed_4k: 4096, Some(8);
    inner_model_fixed_16k: 16384, Some(8);
    inner_model_fixed_wide_4k: 4096, Some(64);
    inner_model_var_4k: 4096, None;
    inner_model_var_16k: 16384, None;
}

#[test]
fn full_inner_of_max_separators_splits_two_and_two() {
    for layout in layouts() {
        let klen = layout.max_key_len();
        let mut page = blank_page(&layout, 9);
        layout.inner_init(&mut page, 3, 1, 10);
        let mut n = 1u32;
        loop {
            let mut sep = vec![0xFF; klen];
            sep[..4.min(klen)].copy_from_slice(&(2 * n).to_be_bytes()[4 - 4.min(klen)..]);
            if !layout.inner_has_room(&page, klen) {
                break;
            }
            layout.inner_insert(&mut page, n as usize, &sep, n as u64 + 1, 10);
            n += 1;
        }
        assert!(n >= 4, "{layout:?}: only {n} children fit");
        let mut right = blank_page(&layout, 8);
        let promoted = layout.inner_split(&mut page, &mut right);
        let (l, r) = (layout.inner_len(&page), layout.inner_len(&right));
        assert!(l >= 2 && r >= 2 && l + r == n as usize);
        assert_eq!(promoted.len(), klen);
        assert_eq!(layout.inner_child(&right, 0), l as u64 + 1);
        assert_eq!(
            layout.inner_total(&page) + layout.inner_total(&right),
            10 * n as u64
        );
        assert_eq!(layout.inner_level(&right), 3);
        for half in [&page, &right] {
            layout.validate(half).unwrap();
            assert!(layout.inner_has_room(half, klen));
        }
    }
}

#[test]
fn inner_search_and_remove_first_child() {
    for layout in layouts() {
        let kw = layout.key_width().unwrap_or(4);
        let key = |b: u8| vec![b; kw];
        let mut page = blank_page(&layout, 0);
        layout.inner_init(&mut page, 1, 100, 1);
        layout.inner_insert(&mut page, 1, &key(20), 101, 2);
        layout.inner_insert(&mut page, 1, &key(10), 102, 3);
        layout.inner_insert(&mut page, 3, &key(30), 103, 4);
        // children: 100 | 10 | 102 | 20 | 101 | 30 | 103
        assert_eq!(layout.inner_len(&page), 4);
        assert_eq!(layout.inner_search(&page, &key(0)), 0);
        assert_eq!(layout.inner_search(&page, &key(10)), 1);
        assert_eq!(layout.inner_search(&page, &key(15)), 1);
        assert_eq!(layout.inner_search(&page, &key(20)), 2);
        assert_eq!(layout.inner_search(&page, &key(255)), 3);
        assert_eq!(layout.inner_search(&page, b""), 0);
        assert_eq!(layout.inner_total(&page), 10);
        layout.inner_remove(&mut page, 0);
        // children: 102 | 20 | 101 | 30 | 103
        assert_eq!(layout.inner_len(&page), 3);
        assert_eq!(layout.inner_child(&page, 0), 102);
        assert_eq!(layout.inner_count(&page, 0), 3);
        assert_eq!(layout.inner_key(&page, 1), &key(20)[..]);
        assert_eq!(layout.inner_search(&page, &key(15)), 0);
        layout.inner_remove(&mut page, 2);
        assert_eq!(layout.inner_len(&page), 2);
        assert_eq!(layout.inner_child(&page, 1), 101);
        layout.validate(&page).unwrap();
        assert_header_untouched(&page);
    }
}

// ---- overflow pages ----

#[test]
fn overflow_pages() {
    for layout in layouts() {
        let cap = layout.overflow_capacity();
        for len in [0, 1, cap / 2, cap] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let mut page = blank_page(&layout, 0xFF);
            layout.overflow_init(&mut page, 1234, &data);
            assert_header_untouched(&page);
            assert_eq!(page::page_type(&page), PageType::Overflow as u8);
            assert_eq!(layout.overflow_next(&page), 1234);
            assert_eq!(layout.overflow_data(&page), &data[..]);
            layout.validate(&page).unwrap();
        }
        let mut page = blank_page(&layout, 0);
        layout.overflow_init(&mut page, 0, b"x");
        put_u32(&mut page, OVERFLOW_LEN_AT, cap + 1);
        let err = layout.validate(&page).unwrap_err();
        assert!(err.contains("exceeds capacity"), "{err}");
    }
}

// ---- validate ----

#[test]
fn validate_messages() {
    let v = Layout::new(4096, None, None);
    let mut page = blank_page(&v, 0);
    v.leaf_init(&mut page);
    for i in 0..3u8 {
        v.leaf_insert(&mut page, i as usize, &[i; 10], ValueRef::Inline(b"value"));
    }
    v.validate(&page).unwrap();
    // Key length of entry 1 beyond the limit.
    let off = get_u16(&page, slot_offset_at(1));
    let mut bad = page.clone();
    put_u16(&mut bad, off, 2000);
    let err = v.validate(&bad).unwrap_err();
    assert!(err.starts_with("leaf entry 1"), "{err}");
    // A key whose slot head was not changed with it.
    let mut bad = page.clone();
    bad[off + 4] = 3;
    assert!(
        v.validate(&bad)
            .unwrap_err()
            .contains("slot head does not match")
    );
    // Keys out of order (head and key changed together).
    bad[slot_head_at(1)] = 3;
    assert!(v.validate(&bad).unwrap_err().contains("not greater"));
    // Slot pointing into the header.
    let mut bad = page.clone();
    put_u16(&mut bad, slot_offset_at(0), 10);
    assert!(
        v.validate(&bad)
            .unwrap_err()
            .contains("outside the cell area")
    );
    // Type byte.
    let mut bad = page.clone();
    bad[8] = 9;
    assert!(v.validate(&bad).unwrap_err().contains("unknown page type"));
    bad[8] = PageType::Meta as u8;
    assert!(v.validate(&bad).is_err());
    // Overflow reference of length 0.
    let mut p2 = blank_page(&v, 0);
    v.leaf_init(&mut p2);
    v.leaf_insert(
        &mut p2,
        0,
        b"k",
        ValueRef::Overflow {
            len: 5,
            first_page: 9,
        },
    );
    let off = get_u16(&p2, slot_offset_at(0));
    put_u32(&mut p2, off + 4 + 1, 0);
    assert!(v.validate(&p2).unwrap_err().contains("length 0"));
    // Inner node without children, and of level 0.
    let mut inner = blank_page(&v, 0);
    v.inner_init(&mut inner, 1, 5, 5);
    let mut bad = inner.clone();
    bad[LEVEL_AT] = 0;
    assert!(v.validate(&bad).unwrap_err().contains("level 0"));
    set_entry_count(&mut inner, 0);
    assert!(v.validate(&inner).is_err());
    // Packed leaf over capacity.
    let f = Layout::new(4096, Some(8), Some(8));
    let mut page = blank_page(&f, 0);
    f.leaf_init(&mut page);
    set_entry_count(&mut page, 255);
    assert!(f.validate(&page).unwrap_err().contains("capacity"));
    // Wrong page length.
    assert!(f.validate(&page[..100]).is_err());
}

/// Exercises every accessor and mutation on a page that `validate` accepted; none may panic, and mutations
/// keep the page valid.
fn exercise(layout: &Layout, page: &mut [u8]) {
    let ps = layout.page_size();
    match PageType::from_u8(page::page_type(page)) {
        Some(PageType::BTreeLeaf) => {
            let n = layout.leaf_len(page);
            for i in 0..n {
                let k = layout.leaf_key(page, i).to_vec();
                let _ = layout.leaf_value(page, i);
                let _ = layout.leaf_search(page, &k);
                let _ = layout.leaf_can_replace(page, i, ValueRef::Inline(&[]));
            }
            let _ = layout.leaf_search(page, b"probe");
            let key = mk_key(layout, 1, b"\x80");
            let val = mk_val(layout, key.len(), 2, 7);
            if let Err(i) = layout.leaf_search(page, &key)
                && layout.leaf_has_room(page, key.len(), val.as_ref())
            {
                layout.leaf_insert(page, i, &key, val.as_ref());
                layout.validate(page).unwrap();
            }
            let n = layout.leaf_len(page);
            if n > 0 {
                let val = mk_val(layout, layout.leaf_key(page, 0).len(), 4, 3);
                if layout.leaf_can_replace(page, 0, val.as_ref()) {
                    layout.leaf_replace(page, 0, val.as_ref());
                    layout.validate(page).unwrap();
                }
                layout.leaf_remove(page, n / 2);
                layout.validate(page).unwrap();
            }
            if layout.leaf_len(page) >= 2 {
                let mut right = vec![0xAB; ps];
                layout.leaf_split(page, &mut right);
                layout.validate(page).unwrap();
                layout.validate(&right).unwrap();
            }
        }
        Some(PageType::BTreeInner) => {
            let n = layout.inner_len(page);
            let _ = layout.inner_level(page);
            for i in 0..n {
                let _ = layout.inner_child(page, i);
                let _ = layout.inner_count(page, i);
                if i > 0 {
                    let k = layout.inner_key(page, i).to_vec();
                    assert_eq!(layout.inner_search(page, &k), i);
                }
            }
            let _ = layout.inner_search(page, b"probe");
            let _ = layout.inner_total(page);
            let sep = mk_key(layout, 1, b"\x80");
            let p = layout.inner_search(page, &sep);
            if (p == 0 || layout.inner_key(page, p) != &sep[..])
                && layout.inner_has_room(page, sep.len())
            {
                layout.inner_insert(page, p + 1, &sep, 3, 0);
                layout.validate(page).unwrap();
            }
            layout.inner_set_child(page, 0, 42);
            if layout.inner_len(page) >= 2 {
                layout.inner_remove(page, 0);
                layout.validate(page).unwrap();
            }
            if layout.inner_len(page) >= 2 {
                let mut right = vec![0xCD; ps];
                layout.inner_split(page, &mut right);
                layout.validate(page).unwrap();
                layout.validate(&right).unwrap();
            }
        }
        Some(PageType::Overflow) => {
            let _ = layout.overflow_next(page);
            let _ = layout.overflow_data(page).len();
        }
        _ => unreachable!("validate accepts only node pages"),
    }
}

/// A valid page of `layout` built from `seed`: a leaf, inner node or overflow page with some entries.
fn valid_page(layout: &Layout, kind: u8, entries: &[(u8, Vec<u8>, u8, u32)]) -> Vec<u8> {
    let mut page = blank_page(layout, 0x11);
    match kind % 3 {
        0 => {
            layout.leaf_init(&mut page);
            for (kc, k, vc, seed) in entries {
                let key = mk_key(layout, *kc, k);
                let val = mk_val(layout, key.len(), *vc, *seed);
                if let Err(i) = layout.leaf_search(&page, &key)
                    && layout.leaf_has_room(&page, key.len(), val.as_ref())
                {
                    layout.leaf_insert(&mut page, i, &key, val.as_ref());
                }
            }
            // Leave some dead bytes behind.
            if layout.leaf_len(&page) > 2 {
                layout.leaf_remove(&mut page, 1);
            }
        }
        1 => {
            layout.inner_init(&mut page, 1 + kind / 3 % 4, 7, 1);
            for (kc, k, _, seed) in entries {
                let sep = mk_key(layout, *kc, k);
                let p = layout.inner_search(&page, &sep);
                if (p == 0 || layout.inner_key(&page, p) != &sep[..])
                    && layout.inner_has_room(&page, sep.len())
                {
                    layout.inner_insert(&mut page, p + 1, &sep, *seed as u64, *seed as u64);
                }
            }
            if layout.inner_len(&page) > 2 {
                layout.inner_remove(&mut page, 1);
            }
        }
        _ => {
            let len = entries.len() * 97 % layout.overflow_capacity();
            layout.overflow_init(&mut page, 5, &vec![3; len]);
        }
    }
    page
}

fn page_entries() -> impl Strategy<Value = Vec<(u8, Vec<u8>, u8, u32)>> {
    prop::collection::vec(
        (
            any::<u8>(),
            prop::collection::vec(any::<u8>(), 0..5),
            any::<u8>(),
            any::<u32>(),
        ),
        0..120,
    )
}

proptest! {
    #![proptest_config(config(256))]
    /// Random bytes with a valid type byte (and, half of the time, a small entry count): validate never
    /// panics, and accessors on accepted pages never panic.
    #[test]
    fn validate_random_bytes(
        layout_ix in 0..12usize,
        t in 3u8..=5,
        small in any::<bool>(),
        n in 0usize..6,
        level in 0u8..3,
        cb in any::<u16>(),
        seed in any::<u64>(),
    ) {
        use rand::{RngCore, SeedableRng};
        let layout = layouts()[layout_ix];
        let mut page = vec![0u8; layout.page_size()];
        rand_chacha::ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut page);
        page[8] = t;
        if small {
            set_entry_count(&mut page, n);
            put_u16(&mut page, FRAG_AT, 0);
            put_u16(&mut page, CELL_BYTES_AT, cb as usize % layout.page_size());
            page[LEVEL_AT] = level;
            put_u32(&mut page, OVERFLOW_LEN_AT, cb as usize);
        }
        if layout.validate(&page).is_ok() {
            exercise(&layout, &mut page);
        }
    }

    /// Single-byte (and u16) mutations of valid pages: validate never panics, and accessors and mutations on
    /// accepted pages never panic.
    #[test]
    fn validate_mutated_pages(
        layout_ix in 0..12usize,
        kind in any::<u8>(),
        entries in page_entries(),
        mutations in prop::collection::vec((any::<Index>(), any::<bool>(), any::<u16>()), 1..4),
    ) {
        let layout = layouts()[layout_ix];
        let mut page = valid_page(&layout, kind, &entries);
        layout.validate(&page).unwrap();
        let used = {
            // Most interesting bytes: header, slots and the cell area.
            let n = entry_count(&page);
            (slot_head_at(n) + 64).min(layout.page_size())
        };
        for (ix, near_front, value) in mutations {
            let at = if near_front { 24 + ix.index(used - 24) } else { ix.index(layout.page_size()) };
            page[at] = value as u8;
            if value > 0x3FFF && at + 1 < page.len() {
                page[at + 1] = (value >> 8) as u8;
            }
        }
        page[0..8].copy_from_slice(&CHECKSUM_PATTERN);
        page[16..24].copy_from_slice(&EPOCH_PATTERN);
        if layout.validate(&page).is_ok() {
            exercise(&layout, &mut page);
        }
    }
}

/// Keys whose slot heads tie (equal first 6 bytes, keys shorter than a head, trailing zero bytes) are still
/// found and ordered by their whole bytes, in leaves and inner nodes.
#[test]
fn keys_with_equal_heads_are_told_apart() {
    let keys: Vec<&[u8]> = vec![
        b"",
        b"\0",
        b"ab",
        b"ab\0",
        b"ab\0\0\0\0",
        b"ab\0\0\0\0\0",
        b"ab\0\0\0\0\x01",
        b"abcdef",
        b"abcdef\0",
        b"abcdefg",
        b"abcdefh",
        b"abcdeg",
        &[0xFF; 7],
        &[0xFF; 9],
    ];
    let probes: Vec<&[u8]> = vec![
        b"a",
        b"ab\0\0",
        b"ab\0\0\0\0\0\0",
        b"abcde",
        b"abcdef\0\0",
        b"abcdefga",
        b"abcdeh",
        &[0xFF; 6],
        &[0xFF; 8],
        &[0xFF; 10],
    ];
    let v = Layout::new(4096, None, None);
    // Insert in a scrambled order.
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| (i * 7) % keys.len());
    let mut leaf = blank_page(&v, 0);
    v.leaf_init(&mut leaf);
    let mut inner = blank_page(&v, 0);
    v.inner_init(&mut inner, 1, 100, 1);
    let mut sorted: Vec<&[u8]> = Vec::new();
    for &i in &order {
        let k = keys[i];
        let at = sorted.binary_search(&k).unwrap_err();
        v.leaf_insert(&mut leaf, at, k, ValueRef::Inline(b"v"));
        if !k.is_empty() {
            let seps: Vec<&[u8]> = sorted.iter().copied().filter(|s| !s.is_empty()).collect();
            let sep_at = seps.binary_search(&k).unwrap_err();
            v.inner_insert(&mut inner, sep_at + 1, k, 200 + i as u64, 1);
        }
        sorted.insert(at, k);
    }
    v.validate(&leaf).unwrap();
    v.validate(&inner).unwrap();
    let seps: Vec<&[u8]> = sorted.iter().copied().filter(|s| !s.is_empty()).collect();
    for q in keys.iter().chain(&probes) {
        assert_eq!(
            v.leaf_search(&leaf, q),
            sorted.binary_search(q),
            "leaf, key {q:?}"
        );
        // The child whose range holds q: the number of separators ≤ q.
        let child = seps.partition_point(|s| s <= q);
        assert_eq!(v.inner_search(&inner, q), child, "inner, key {q:?}");
    }
}

/// The node prefix: set from the first key, shrunk (and every head recomputed) when a key without it arrives,
/// set to the longest shared one at a split; searches stay exact throughout, in leaves and inner nodes.
#[test]
fn node_prefixes_shrink_on_insert_and_grow_at_splits() {
    let v = Layout::new(16384, None, None);
    let prefix_len = |page: &[u8]| page[slotted::PREFIX_LEN_AT] as usize;
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for i in (0..60u32).map(|i| (i * 37) % 60) {
        keys.push(format!("tenant-A/item-{i:05}").into_bytes());
    }
    for i in 0..20u32 {
        keys.push(format!("tenant-B/item-{i:05}").into_bytes());
    }
    keys.push(b"tenant".to_vec());
    keys.push(b"alpha".to_vec());
    let probes: Vec<Vec<u8>> = [
        &b"tenant-A/item-00030x"[..],
        b"tenant-A/item-000",
        b"tenant-A",
        b"tenant-C",
        b"tenant-",
        b"te",
        b"",
        b"zzz",
        b"tenant-A/item-99999",
        // Below and above the 17-byte prefix after its first 7 bytes (the part read from the first key).
        b"tenant-A/a",
        b"tenant-A/item-0",
        b"tenant-A/item-001",
        b"tenant-A/z",
    ]
    .iter()
    .map(|p| p.to_vec())
    .collect();
    let mut leaf = blank_page(&v, 0);
    v.leaf_init(&mut leaf);
    let mut inner = blank_page(&v, 0);
    v.inner_init(&mut inner, 1, 100, 1);
    let mut sorted: Vec<Vec<u8>> = Vec::new();
    let mut prefixes = Vec::new();
    for (n, k) in keys.iter().enumerate() {
        let at = sorted.binary_search(k).unwrap_err();
        v.leaf_insert(&mut leaf, at, k, ValueRef::Inline(b"v"));
        v.inner_insert(&mut inner, at + 1, k, 1000 + n as u64, 1);
        sorted.insert(at, k.clone());
        v.validate(&leaf).unwrap();
        v.validate(&inner).unwrap();
        for q in sorted.iter().chain(&probes) {
            assert_eq!(v.leaf_search(&leaf, q), sorted.binary_search(q), "{q:?}");
            let child = sorted.partition_point(|s| s <= q);
            assert_eq!(v.inner_search(&inner, q), child, "{q:?}");
        }
        prefixes.push((prefix_len(&leaf), prefix_len(&inner)));
    }
    // The first key whole, then the prefix the keys share: "tenant-A/item-000" (17 bytes, longer than the 7
    // the header holds) while only tenant-A keys are in, "tenant-" (7) with tenant-B keys, then "tenant" (6),
    // then nothing ("alpha").
    assert_eq!(prefixes[0], (19, 19));
    assert_eq!(prefixes[59], (17, 17));
    assert_eq!(prefixes[60], (7, 7));
    assert_eq!(prefixes[79], (7, 7));
    assert_eq!(prefixes[80], (6, 6));
    assert_eq!(prefixes[81], (0, 0));
    // Splits give each half the longest prefix its keys share.
    let mut right = blank_page(&v, 0);
    let k = v.leaf_split(&mut leaf, &mut right);
    let mut inner_right = blank_page(&v, 0);
    let sep = v.inner_split(&mut inner, &mut inner_right);
    for (page, lo, hi) in [
        (&leaf, 0, k),
        (&right, k, sorted.len()),
        (&inner, 0, 0),
        (&inner_right, 0, 0),
    ] {
        v.validate(page).unwrap();
        if hi > lo {
            let half = &sorted[lo..hi];
            let shared = half[0]
                .iter()
                .zip(&half[half.len() - 1])
                .take_while(|(a, b)| a == b)
                .count();
            assert_eq!(prefix_len(page), shared);
            for q in half.iter().chain(&probes) {
                assert_eq!(v.leaf_search(page, q), half.binary_search(q), "{q:?}");
            }
        }
    }
    // The upper half (the last tenant-A keys and the tenant-B ones) gains "tenant-".
    assert!(prefix_len(&right) >= 7 || prefix_len(&leaf) >= 7);
    // The inner halves: separators of the right half all ≥ sep.
    let right_seps: Vec<&Vec<u8>> = sorted.iter().filter(|s| **s > sep).collect();
    for q in sorted.iter().chain(&probes) {
        let child = right_seps.partition_point(|s| s.as_slice() <= q.as_slice());
        if q.as_slice() >= sep.as_slice() {
            assert_eq!(v.inner_search(&inner_right, q), child, "{q:?}");
        }
    }
}
