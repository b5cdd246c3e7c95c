//! Exp 13, limited PM bandwidth: the main phases (one thread) of `elimda`, `dash` and `cceh` on the same
//! traffic model as the `*-adr-model` rows ([`CountingPm`](strata::lab::storage::pm::CountingPm) over an
//! anonymous region, ADR), which here also charges real time for the media traffic it sees
//! ([`limited_config`]): a busy-wait of [`READ_MISS_NS`] per XPBuffer read miss, and media writes
//! (XPLines leaving the XPBuffer) paced by a token bucket of [`WRITE_BANDWIDTH`] with a 16 KiB burst. So a
//! limited row ÷ its `*-adr-model` row is what the emulated latency and bandwidth cost that engine.
//!
//! The setting: 300 ns is Optane's random-read latency (FAST'20, `reference/hashing.md` §1); 2 GB/s is
//! about one DIMM's write bandwidth (≈ 2.3 GB/s), i.e. scarce next to the 0.1–0.6 GB/s of media writes one
//! thread of these indexes causes on this machine without pacing. The seed does not state its setting or
//! thread count. The model's own cost (one mutex and a few hash-map operations per PM call) is in both the
//! limited and the `*-adr-model` rows; compare ratios measured in the same run.
//!
//! Rows: engines [`ELIMDA_LIMITED`], [`DASH_LIMITED`], [`CCEH_LIMITED`], workloads of the main phases; the
//! phase's media bytes in `bytes_read` / `bytes_written` (the model drained at each phase boundary; the
//! drained writes are counted but not paced).

use super::{Keys, SuiteConfig, modelled_with, persistent, region_bytes};
use crate::error::Result;
use crate::result::BenchResult;
use strata::lab::index::hash::cceh::{CcehConfig, CcehIndex};
use strata::lab::index::hash::dash::{DashConfig, DashIndex};
use strata::lab::index::hash::{HashConfig, HashIndex};
use strata::lab::storage::pm::{PersistMode, TrafficConfig};

pub const ELIMDA_LIMITED: &str = "elimda-limited";
pub const DASH_LIMITED: &str = "dash-limited";
pub const CCEH_LIMITED: &str = "cceh-limited";
/// Busy-wait per XPBuffer read miss.
pub const READ_MISS_NS: u64 = 300;
/// Media write bandwidth, bytes per second.
pub const WRITE_BANDWIDTH: u64 = 2_000_000_000;

/// The Optane model with emulated latency and bandwidth.
pub fn limited_config() -> TrafficConfig {
    TrafficConfig {
        read_miss_latency_ns: READ_MISS_NS,
        write_bandwidth: WRITE_BANDWIDTH,
        write_burst_bytes: 16 << 10,
        ..TrafficConfig::default()
    }
}

/// The rows of the three engines, each on a fresh limited model.
pub(super) fn rows(cfg: &SuiteConfig, k: &Keys) -> Result<Vec<BenchResult>> {
    let bytes = region_bytes(cfg);
    let config = limited_config();
    let mut out = modelled_with(bytes, PersistMode::Adr, config, |pm, snap| {
        let idx = HashIndex::create(pm, HashConfig::default())?;
        persistent(cfg, ELIMDA_LIMITED, idx, k, Some(snap))
    })?;
    out.extend(modelled_with(
        bytes,
        PersistMode::Adr,
        config,
        |pm, snap| {
            let idx = DashIndex::create(pm, DashConfig::default())?;
            persistent(cfg, DASH_LIMITED, idx, k, Some(snap))
        },
    )?);
    out.extend(modelled_with(
        bytes,
        PersistMode::Adr,
        config,
        |pm, snap| {
            let idx = CcehIndex::create(pm, CcehConfig::default())?;
            persistent(cfg, CCEH_LIMITED, idx, k, Some(snap))
        },
    )?);
    Ok(out)
}
