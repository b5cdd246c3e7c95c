//! What a handle reports about its database: what recovery did ([`RecoveryInfo`]) and its statistics
//! ([`DbStats`]).

use crate::index::IndexStats;
use crate::storage::IoSnapshot;

/// What recovery did when the handle was opened.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RecoveryInfo {
    /// WAL records replayed on top of the checkpoint.
    pub replayed_records: u64,
    /// Bytes of a torn WAL tail: records written but never made durable before a crash (what survives is a
    /// prefix of the acknowledged writes, as the durability levels promise).
    pub torn_tail_bytes: u64,
    /// WAL files dropped whole: created by a rotation in the background before the WAL they follow was
    /// durable, which a power loss then left without its checkpoint intent. Nothing in them was ever synced
    /// (see `db::background`); like a torn tail, what survives is a prefix of the acknowledged writes.
    #[serde(skip_serializing_if = "is_zero")]
    pub unsynced_wals_dropped: u64,
    /// The index's spare checkpoint slot was unusable (damage, or a checkpoint torn by a crash) and was
    /// rewritten by a fresh checkpoint: what was wrong with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spare_checkpoint_rewritten: Option<String>,
    /// What [`RawDb::repair`] dropped or replaced (empty for a normal open).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repairs: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Statistics of a database.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DbStats {
    pub index: &'static str,
    pub key: &'static str,
    pub value: &'static str,
    pub records: u64,
    pub tree: IndexStats,
    pub io: IoSnapshot,
    pub wal_bytes: u64,
    pub disk_bytes: u64,
    pub recovery: RecoveryInfo,
    /// The family's own statistics, under its name (e.g. `"dynamized"`: levels, shards, deleted entries,
    /// memory, counters); empty for families without any.
    #[serde(flatten)]
    pub family: std::collections::BTreeMap<String, serde_json::Value>,
}

impl DbStats {
    /// The family's own statistics as `T` (e.g. `index::dynamized::DynStats`); `None` if the family has none
    /// or they are not a `T`.
    pub fn family_stats<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        let value = self.family.get(self.index)?;
        serde_json::from_value(value.clone()).ok()
    }
}
