//! Driver for Strata's dynamized family (`strata-dynamized`): a [`RawDb`] with a dynamized index (a buffer
//! plus levels of immutable ISAM shards, or WIRS shards when weighted), `u64` keys and `u64` values, the
//! bench's durability as its default, writes through the same WAL as the B+-tree.
//!
//! The index's structure ([`DynOptions`]: layout, scale factor s, buffer capacity N_b, delete policy, δ,
//! memory budget, weights) and its handle options ([`RuntimeOptions`]: background reconstruction,
//! throttling) belong to the engine value, so suites that sweep them build their own
//! [`StrataDynamized::new`]; the engine in [`super::engines`] has the engine's defaults. The bench's cache
//! budget is passed on as the handle's buffer-pool budget, which a dynamized index does not use: its memory
//! is bounded by `memory_budget` (0 = every level in memory).

use super::strata_btree::{StrataDriver, options};
use super::{Capabilities, Driver, Engine, EngineOptions};
use crate::error::Result;
use crate::report::fmt_bytes;
use std::path::Path;
use strata::Config;
use strata::options::{DynOptions, RuntimeOptions};
use strata::{IndexConfig, RawDb, TypeKind};

/// The `strata-dynamized` engine with its structural and handle options.
#[derive(Debug, Clone, Default)]
pub struct StrataDynamized {
    dyn_opts: DynOptions,
    runtime: RuntimeOptions,
}

impl StrataDynamized {
    /// An engine whose databases are created with `dyn_opts` and opened with `runtime`.
    pub fn new(dyn_opts: DynOptions, runtime: RuntimeOptions) -> Self {
        StrataDynamized { dyn_opts, runtime }
    }

    /// The structural options of the databases it creates.
    pub fn dyn_options(&self) -> &DynOptions {
        &self.dyn_opts
    }

    /// The handle options of the databases it opens.
    pub fn runtime_options(&self) -> &RuntimeOptions {
        &self.runtime
    }

    /// One line describing the index options (layout, s, N_b, delete policy, δ, memory budget, throttling).
    pub fn describe(&self) -> String {
        let d = &self.dyn_opts;
        format!(
            "{}{} layout, s = {}, N_b = {}, {} deletes, δ = {}, memory budget {}, throttling {}",
            if d.weighted {
                "weighted (WIRS shards), "
            } else {
                ""
            },
            d.layout.name(),
            d.growth(),
            d.buffer_capacity,
            d.delete_policy.name(),
            d.max_delete_proportion,
            if d.memory_budget == 0 {
                "none (every level in memory)".to_string()
            } else {
                fmt_bytes(d.memory_budget)
            },
            if self.runtime.throttle {
                format!("on ({:?} per throttled write)", self.runtime.throttle_delay)
            } else {
                "off".to_string()
            },
        )
    }
}

impl Engine for StrataDynamized {
    fn name(&self) -> &'static str {
        "strata-dynamized"
    }

    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn capabilities(&self) -> Capabilities {
        super::capabilities_of(&IndexConfig::Dynamized(self.dyn_opts.clone()))
    }

    fn settings(&self, opts: &EngineOptions) -> String {
        format!(
            "dynamized ISAM shards: {}; background reconstruction {}, {} sealed buffer(s) before writers stall; \
             {}WAL with durability `{}`, checkpoint every 64 MiB of WAL; inline u64 values",
            self.describe(),
            if self.runtime.background { "on" } else { "off" },
            self.runtime.max_sealed_buffers,
            if opts.direct_io {
                "O_DIRECT files, "
            } else {
                ""
            },
            opts.durability.name(),
        )
    }

    fn open_dir(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>> {
        super::strata_btree::check_value_format(self, opts)?;
        let mut handle = options(opts);
        handle.dynamized = self.runtime.clone();
        let db = if create {
            let config = Config {
                index: IndexConfig::Dynamized(self.dyn_opts.clone()),
                key: TypeKind::U64,
                value: TypeKind::U64,
                page_size: opts.page_size,
                durability: opts.durability,
                direct_io: opts.direct_io,
            };
            RawDb::create(dir, &config, &handle)?
        } else {
            RawDb::open(dir, &handle)?
        };
        Ok(Box::new(StrataDriver::new(self, db)))
    }
}
