//! The names of every file a database directory holds, in one place (see `docs/format.md` for what is in
//! each).
//!
//! | name | what |
//! |---|---|
//! | `LOCK` | the directory's lock (no content) |
//! | `MANIFEST` | index family, options, types (sealed JSON) |
//! | `data.pages` | the page file of the tree families |
//! | `wal-NNNNNNNNNNNNNNNN.log` | write-ahead log number N |
//! | `DYNSTATE` | the dynamized family's checkpoint (sealed) |
//! | `LEARNED` | the learned family's checkpoint: its sorted records (sealed) |
//! | `shard-NNNNNNNNNNNNNNNN.dat` | an immutable shard of the dynamized family |
//! | `hash.pm` | the hash family's persistent-memory region (mapped) |
//! | `hash.batch` | the hash family's bodies of multi-operation batches |
//! | `hash.values` | the hash family's value log (bytes values only, mapped) |
//! | `NAME.tmp` | a sealed file being replaced |

/// The directory's lock.
pub const LOCK: &str = "LOCK";
/// The manifest.
pub const MANIFEST: &str = "MANIFEST";
/// The page file of the families that keep their index in one.
pub const PAGE_FILE: &str = "data.pages";
/// The dynamized family's state file.
pub const DYN_STATE: &str = "DYNSTATE";
/// The learned family's checkpoint file.
pub const LEARNED_STATE: &str = "LEARNED";

/// The hash family's persistent-memory region.
pub const HASH_REGION: &str = "hash.pm";
/// The hash family's batch bodies.
pub const HASH_BATCH: &str = "hash.batch";
/// The hash family's value log (databases with bytes values).
pub const HASH_VALUES: &str = "hash.values";

/// A 16-digit numbered name `prefix` + number + `suffix`.
fn numbered(prefix: &str, n: u64, suffix: &str) -> String {
    format!("{prefix}{n:016}{suffix}")
}

/// The number of a 16-digit numbered name, if `name` is one.
fn parse_numbered(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    (digits.len() == 16 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Name of the `number`th WAL file.
pub fn wal_name(number: u64) -> String {
    numbered("wal-", number, ".log")
}

/// The number of a WAL file name.
pub fn parse_wal_name(name: &str) -> Option<u64> {
    parse_numbered(name, "wal-", ".log")
}

/// Name of shard `id`'s file.
pub fn shard_file_name(id: u64) -> String {
    numbered("shard-", id, ".dat")
}

/// The id of a shard file name.
pub fn parse_shard_file_name(name: &str) -> Option<u64> {
    parse_numbered(name, "shard-", ".dat")
}

/// True for the files a database directory holds besides the manifest and the lock (a directory with any
/// of them and no manifest is a damaged database, not an empty directory).
pub fn is_database_file(name: &str) -> bool {
    name == PAGE_FILE
        || name == DYN_STATE
        || name == LEARNED_STATE
        || name == HASH_REGION
        || name == HASH_BATCH
        || name == HASH_VALUES
        || parse_wal_name(name).is_some()
        || parse_shard_file_name(name).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(wal_name(42), "wal-0000000000000042.log");
        assert_eq!(parse_wal_name(&wal_name(42)), Some(42));
        assert_eq!(parse_shard_file_name(&shard_file_name(7)), Some(7));
        for bad in [
            "wal-12.log",
            "MANIFEST",
            "wal-00000000000000+1.log",
            "shard-0000000000000001.log",
        ] {
            assert_eq!(parse_wal_name(bad), None, "{bad}");
            assert_eq!(parse_shard_file_name(bad), None, "{bad}");
        }
        assert!(is_database_file("data.pages") && is_database_file(&wal_name(1)));
        assert!(!is_database_file(LOCK) && !is_database_file("notes.txt"));
    }
}
