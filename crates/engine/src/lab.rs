//! Internals for the benchmark lab, the fuzz targets and tests; not part of the supported API (hidden from
//! the documentation, free to change).

/// Shared algorithms: alias tables, Bloom filters, static ISAM.
pub mod algo {
    pub use crate::algo::*;
}

/// The `Db` shell's internals (manifest, recovery information).
pub mod db {
    pub use crate::db::*;
}

/// The index families' internals and the family registry's traits.
pub mod index {
    pub use crate::index::*;
}

/// The storage layer: page files, buffer pool, log, codec, sealed files.
pub mod storage {
    pub use crate::storage::*;
}

/// Key and value types.
pub mod types {
    pub use crate::types::*;
}

/// Entry points of the fuzz targets (`fuzz/`): each decodes untrusted bytes with one decoder of on-disk data
/// and must return without panicking, whatever the bytes. Checksums that gate a decoder are recomputed over
/// the fuzzed bytes first, so the fuzzer reaches the decoder behind them. The engine's own test suite runs
/// each of them over seeded random and mutated inputs (`tests/fuzz_smoke.rs`).
pub mod fuzz {
    use crate::algo::bloom::BloomFilter;
    use crate::index::betree::node::{self as be_node, Node, NodeFormat};
    use crate::index::btree::node::Layout;
    use crate::storage::page::{PageBuf, stamp_checksum};
    use crate::storage::{
        IoStats, LogHeader, LogWriter, MemVfs, PageFile, PageFileOptions, RecoverMode, Vfs,
        read_log_header, recover_log,
    };
    use std::path::Path;
    use std::sync::Arc;

    /// A fuzz entry point.
    pub type Target = fn(&[u8]);

    /// Every fuzz entry point by name (the targets of `fuzz/`).
    pub const TARGETS: &[(&str, Target)] = &[
        ("wal_record", wal_record),
        ("wal_file", wal_file),
        ("wal_frames", wal_frames),
        ("manifest", manifest),
        ("dyn_state", dyn_state),
        ("shard_header", shard_header),
        ("btree_node", btree_node),
        ("betree_node", betree_node),
        ("page_file", page_file),
        ("root_records", root_records),
        ("bloom", bloom),
    ];

    const PAGE: usize = 4096;

    /// `data` as one page: cut or zero-padded to 4096 bytes.
    fn page_of(data: &[u8]) -> PageBuf {
        let mut page = PageBuf::new(PAGE);
        let n = data.len().min(PAGE);
        page[..n].copy_from_slice(&data[..n]);
        page
    }

    /// A WAL record payload.
    pub fn wal_record(data: &[u8]) {
        let _ = crate::db::wal::decode(data);
    }

    fn recover_both(vfs: &Arc<dyn Vfs>, path: &Path) {
        for mode in [RecoverMode::Strict, RecoverMode::Salvage] {
            let _ = recover_log(vfs, path, Arc::new(IoStats::new()), mode, &mut |p, _| {
                wal_record(p);
                Ok(())
            });
        }
    }

    /// A whole WAL file (up to 256 KiB: longer files take no other paths): header slots, frames, torn-tail
    /// and damage classification, both recovery modes.
    pub fn wal_file(data: &[u8]) {
        let mem = Arc::new(MemVfs::new());
        let vfs: Arc<dyn Vfs> = mem.clone();
        let path = Path::new("/wal");
        mem.set_file_bytes(path, data[..data.len().min(256 << 10)].to_vec());
        let _ = read_log_header(&vfs, path, &IoStats::new());
        recover_both(&vfs, path);
    }

    /// WAL frames behind a valid header (so the fuzzer spends its time on the frame scanner).
    pub fn wal_frames(data: &[u8]) {
        let mem = Arc::new(MemVfs::new());
        let vfs: Arc<dyn Vfs> = mem.clone();
        let path = Path::new("/wal");
        let header = LogHeader {
            number: 1,
            base_seqno: 0,
            follows_unsynced: false,
        };
        if LogWriter::create(&vfs, path, header, Arc::new(IoStats::new())).is_err() {
            return;
        }
        let Some(mut bytes) = mem.file_bytes(path) else {
            return;
        };
        let start = crate::storage::log::LOG_DATA_START as usize;
        let end = (start + data.len()).min(bytes.len());
        bytes[start..end].copy_from_slice(&data[..end - start]);
        mem.set_file_bytes(path, bytes);
        recover_both(&vfs, path);
    }

    /// A manifest: the sealed framing, the older framing, the JSON and the family options in it.
    pub fn manifest(data: &[u8]) {
        let path = Path::new("/MANIFEST");
        let _ = crate::storage::sealed::unseal(data, path, b"STRATAMF", "manifest");
        let _ = crate::db::manifest::legacy_body(data);
        let _ = crate::db::Manifest::from_json(data);
    }

    /// The dynamized state file's body.
    pub fn dyn_state(data: &[u8]) {
        let _ = crate::index::dynamized::persist::State::decode(data);
    }

    /// A shard file's header page.
    pub fn shard_header(data: &[u8]) {
        let page = page_of(data);
        let _ =
            crate::index::dynamized::shard_file::ShardHeader::decode(&page, Path::new("/shard"));
    }

    /// A B+-tree page under each node layout: once `validate` accepts it, every read of the layout must
    /// stay in bounds (the contract `validate` makes).
    pub fn btree_node(data: &[u8]) {
        let page = page_of(data);
        let probe: &[u8] = data.get(..8).unwrap_or(&[0; 8]);
        for (kw, vw) in [
            (Some(8), Some(8)),
            (None, None),
            (Some(8), None),
            (None, Some(8)),
            (Some(4), Some(16)),
        ] {
            let Ok(layout) = Layout::try_new(PAGE, kw, vw) else {
                continue;
            };
            if layout.validate(&page).is_err() {
                continue;
            }
            let key: Vec<u8> = match kw {
                Some(w) => probe.iter().copied().cycle().take(w).collect(),
                None => probe.to_vec(),
            };
            match crate::storage::PageType::from_u8(crate::storage::page::page_type(&page)) {
                Some(crate::storage::PageType::BTreeLeaf) => {
                    for i in 0..layout.leaf_len(&page) {
                        let _ = layout.leaf_key(&page, i);
                        let _ = layout.leaf_value(&page, i);
                    }
                    let _ = layout.leaf_search(&page, &key);
                }
                Some(crate::storage::PageType::BTreeInner) => {
                    let n = layout.inner_len(&page);
                    for i in 0..n {
                        let _ = layout.inner_child(&page, i);
                        let _ = layout.inner_count(&page, i);
                        if i > 0 {
                            let _ = layout.inner_key(&page, i);
                        }
                    }
                    if n > 0 {
                        let _ = layout.inner_search(&page, &key);
                        let _ = layout.inner_total(&page);
                    }
                    let _ = layout.inner_level(&page);
                }
                Some(crate::storage::PageType::Overflow) => {
                    let _ = layout.overflow_next(&page);
                    let _ = layout.overflow_data(&page);
                }
                _ => {}
            }
        }
    }

    /// A Bε-tree node page under each node format: whole decode, and the in-place reads of fixed formats.
    pub fn betree_node(data: &[u8]) {
        let page = page_of(data);
        let probe: &[u8] = data.get(..8).unwrap_or(&[0; 8]);
        for (kw, vw) in [
            (Some(8), Some(8)),
            (Some(4), Some(4)),
            (None, None),
            (Some(8), None),
        ] {
            let f = NodeFormat {
                key_width: kw,
                value_width: vw,
            };
            let key: Vec<u8> = match kw {
                Some(w) => probe.iter().copied().cycle().take(w).collect(),
                None => probe.to_vec(),
            };
            if let Ok(node) = Node::decode(&page, &f) {
                let _ = be_node::PageLookup::of_node(&node, &key);
            }
            let _ = be_node::lookup_in_page(&page, &f, &key);
            let _ = be_node::leaf_records_in_page(&page, &f, Some(&key), None);
            let _ = be_node::leaf_records_in_page(&page, &f, None, Some(&key));
            for reverse in [false, true] {
                let _ = be_node::route_in_page(&page, &f, Some(&key), reverse);
                let _ = be_node::route_in_page(&page, &f, None, reverse);
            }
        }
    }

    /// A page file whose pages are the fuzzed bytes, each stamped with a valid checksum for its position:
    /// the meta slots, the free-list chain and the open's checks.
    pub fn page_file(data: &[u8]) {
        let mem = Arc::new(MemVfs::new());
        let vfs: Arc<dyn Vfs> = mem.clone();
        let mut bytes = Vec::new();
        for (id, chunk) in data.chunks(PAGE).take(16).enumerate() {
            let mut page = page_of(chunk);
            stamp_checksum(&mut page, id as u64);
            bytes.extend_from_slice(&page);
        }
        while bytes.len() < 2 * PAGE {
            let mut page = PageBuf::new(PAGE);
            stamp_checksum(&mut page, (bytes.len() / PAGE) as u64);
            bytes.extend_from_slice(&page);
        }
        let path = Path::new("/data.pages");
        mem.set_file_bytes(path, bytes);
        let opts = PageFileOptions {
            page_size: PAGE,
            direct: false,
        };
        if let Ok(pf) = PageFile::open(&vfs, path, opts, Arc::new(IoStats::new())) {
            let _ = pf.check();
            let _ = pf.user_root();
            let mut buf = PageBuf::new(PAGE);
            for id in 0..pf.page_count().min(20) {
                let _ = pf.read_page(id, &mut buf);
            }
        }
    }

    /// The B+-tree's and the Bε-tree's root records (a page file's user root).
    pub fn root_records(data: &[u8]) {
        let _ = crate::index::btree::meta::TreeMeta::decode(data);
        let _ = crate::index::betree::meta::TreeMeta::decode(data);
    }

    /// A serialized Bloom filter, then probes of it.
    pub fn bloom(data: &[u8]) {
        if let Ok(filter) = BloomFilter::from_bytes(data) {
            for key in [&b""[..], b"a", data.get(..8).unwrap_or(b"x")] {
                let _ = filter.may_contain(key);
            }
        }
    }

    /// Realistic inputs for every target (the seed corpus of the fuzzers and of the smoke test): the files
    /// of small databases of every family, left as a crash leaves them (records in the WAL) and cleanly
    /// closed, cut into what each target takes.
    pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
        use crate::db::{Config, Options, RawDb};
        use crate::index::WriteOp;
        use crate::index::{IndexConfig, IndexKind};
        use crate::types::{Durability, TypeKind};
        let mut out: Vec<(&'static str, Vec<u8>)> = Vec::new();
        for &kind in IndexKind::ALL {
            for value in [TypeKind::U64, TypeKind::Bytes] {
                // Small buffers, where a family has them, so that shards and their files exist.
                let small =
                    IndexConfig::from_json(kind, serde_json::json!({"buffer_capacity": 64}));
                let config = Config {
                    index: small.unwrap_or_else(|_| kind.default_config()),
                    value,
                    ..Config::default()
                };
                if config.index.check(TypeKind::U64, value, PAGE).is_err() {
                    continue;
                }
                let mem = Arc::new(MemVfs::new());
                let options = Options {
                    vfs: mem.clone(),
                    cache_bytes: 1 << 20,
                    ..Options::default()
                };
                let Ok(db) = RawDb::create("/db", &config, &options) else {
                    continue;
                };
                let value_of = |i: u64| match value {
                    TypeKind::U64 => i.to_be_bytes().to_vec(),
                    TypeKind::Bytes => format!("value {i}").into_bytes(),
                };
                for b in 0..20u64 {
                    let ops: Vec<WriteOp> = (0..50)
                        .map(|i| WriteOp::Put {
                            key: (b * 50 + i).to_be_bytes().to_vec(),
                            value: value_of(i),
                        })
                        .chain([WriteOp::Delete {
                            key: (b * 7).to_be_bytes().to_vec(),
                        }])
                        .collect();
                    let _ = db.write(&ops, Some(Durability::Sync));
                }
                let _ = db.checkpoint();
                let _ = db.write(
                    &[WriteOp::Put {
                        key: 5u64.to_be_bytes().to_vec(),
                        value: value_of(555),
                    }],
                    Some(Durability::Sync),
                );
                // The files as a crash leaves them: the last write only in the WAL.
                for path in mem.file_paths() {
                    let Some(bytes) = mem.file_bytes(&path) else {
                        continue;
                    };
                    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                    let name = name.unwrap_or_default();
                    if name.starts_with("wal-") {
                        out.push(("wal_file", bytes.clone()));
                        let start = crate::storage::log::LOG_DATA_START as usize;
                        let end = bytes.iter().rposition(|&b| b != 0).map_or(start, |e| e + 1);
                        out.push(("wal_frames", bytes[start..end.max(start)].to_vec()));
                        // Each record's payload.
                        let _ = recover_log(
                            &(mem.clone() as Arc<dyn Vfs>),
                            &path,
                            Arc::new(IoStats::new()),
                            RecoverMode::Strict,
                            &mut |p, _| {
                                out.push(("wal_record", p.to_vec()));
                                Ok(())
                            },
                        );
                    } else if name == "MANIFEST" {
                        out.push(("manifest", bytes));
                    } else if name == "DYNSTATE" {
                        out.push(("dyn_state", bytes.get(24..).unwrap_or_default().to_vec()));
                    } else if name.starts_with("shard-") {
                        out.push((
                            "shard_header",
                            bytes.get(..PAGE).unwrap_or_default().to_vec(),
                        ));
                        // The blob ends with the Bloom filters: offer the last pages whole.
                        let tail = bytes.len().saturating_sub(2 * PAGE);
                        out.push(("bloom", bytes[tail..].to_vec()));
                    } else if name == "data.pages" {
                        out.push(("page_file", bytes.iter().copied().take(16 * PAGE).collect()));
                        for slot in 0..2 {
                            if let Some(meta) = bytes.get(slot * PAGE..(slot + 1) * PAGE) {
                                let len = usize::from(u16::from_le_bytes([meta[72], meta[73]]));
                                out.push(("root_records", meta[74..74 + len.min(512)].to_vec()));
                            }
                        }
                        let target = if kind == IndexKind::BTree {
                            "btree_node"
                        } else {
                            "betree_node"
                        };
                        for page in bytes.chunks(PAGE).skip(2).take(8) {
                            out.push((target, page.to_vec()));
                        }
                    }
                }
                drop(db);
            }
        }
        let mut filter = BloomFilter::new(100, 0.01).expect("a valid rate");
        for i in 0..100u64 {
            filter.insert(&i.to_be_bytes());
        }
        out.push(("bloom", filter.to_bytes()));
        out
    }
}
