//! The traffic model's parameters ([`TrafficConfig`]) and its counters ([`Traffic`]), which anyone can
//! snapshot, subtract and turn into bytes per operation or amplification. The rules that produce the counts
//! are in the documentation of `super::counting`.

use std::ops::Sub;

use super::XPLINE;
use crate::error::{Error, Result};

/// Parameters of the traffic model. The defaults follow a 6-DIMM Optane DCPMM socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TrafficConfig {
    /// DIMMs the addresses are interleaved over (6).
    pub dimms: usize,
    /// Interleave unit in bytes (4096); a multiple of 256.
    pub interleave_bytes: u64,
    /// XPLines in each DIMM's XPBuffer (64, i.e. 16 KiB).
    pub xpbuffer_lines: usize,
    /// Dirty 64 B lines the CPU cache holds before it evicts the least recently written one (8192, i.e.
    /// 512 KiB); 0 = write-through.
    pub cpu_dirty_lines: usize,
    /// Busy-wait per XPBuffer read miss, emulating media latency (0 = off; ≈ 300 ns on Optane).
    pub read_miss_latency_ns: u64,
    /// Media write bandwidth in bytes per second, enforced by busy-waiting on a token bucket
    /// ([`WriteBucket`](super::pacing::WriteBucket)) charged with every media write (0 = unlimited, the
    /// default; ≈ 2.3 GB/s per Optane DIMM).
    pub write_bandwidth: u64,
    /// The token bucket's burst: media write bytes an idle medium takes without waiting (16 KiB, one
    /// XPBuffer; used only with a `write_bandwidth`).
    pub write_burst_bytes: u64,
}

impl Default for TrafficConfig {
    fn default() -> Self {
        TrafficConfig {
            dimms: 6,
            interleave_bytes: 4096,
            xpbuffer_lines: 64,
            cpu_dirty_lines: 8192,
            read_miss_latency_ns: 0,
            write_bandwidth: 0,
            write_burst_bytes: 16 << 10,
        }
    }
}

impl TrafficConfig {
    /// `InvalidArgument` unless `dimms` and `xpbuffer_lines` are non-zero, `interleave_bytes` is a
    /// non-zero multiple of 256 and the write bandwidth, if any, is at most 1 TB/s.
    pub fn validate(&self) -> Result<()> {
        if self.dimms == 0 || self.xpbuffer_lines == 0 {
            return Err(Error::invalid(
                "traffic model needs at least one DIMM and one XPBuffer line",
            ));
        }
        if self.interleave_bytes == 0 || !self.interleave_bytes.is_multiple_of(XPLINE) {
            return Err(Error::invalid(format!(
                "interleave of {} bytes is not a non-zero multiple of {XPLINE}",
                self.interleave_bytes
            )));
        }
        if self.write_bandwidth > 1 << 40 {
            return Err(Error::invalid(format!(
                "write bandwidth of {} B/s is above the model's 1 TiB/s",
                self.write_bandwidth
            )));
        }
        Ok(())
    }
}

/// Traffic counters at one moment. Subtract two snapshots (`later - earlier`) for an interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Traffic {
    /// Bytes the caller declared as its payload
    /// ([`CountingPm::record_logical`](super::CountingPm::record_logical)).
    pub logical_bytes: u64,
    /// Bytes asked for by `read`s and atomic loads.
    pub requested_read_bytes: u64,
    /// Bytes given to `write`s, atomic stores and `write_nt`s.
    pub requested_write_bytes: u64,
    /// 64 B per line read from PM by the CPU.
    pub cpu_read_bytes: u64,
    /// 64 B per line written back to PM, plus the bytes of non-temporal writes.
    pub cpu_write_bytes: u64,
    /// Bytes read from the media (XPBuffer read misses and read-modify-writes).
    pub media_read_bytes: u64,
    /// Bytes written to the media (whole XPLines leaving the XPBuffer).
    pub media_write_bytes: u64,
    /// 64 B CPU reads served by an XPBuffer.
    pub xpbuffer_read_hits: u64,
    /// 64 B CPU reads that read their XPLine from the media.
    pub xpbuffer_read_misses: u64,
    /// Partly written XPLines that needed a read-modify-write.
    pub rmw_xplines: u64,
    /// `flush` calls.
    pub flushes: u64,
    /// `fence` calls (persist points).
    pub fences: u64,
    /// Nanoseconds the media would need, at the configured write bandwidth, for the media writes charged
    /// so far (every one but those of `drain`; 0 when unlimited): their bytes ÷ bandwidth, whatever the
    /// clock.
    pub write_busy_ns: u64,
    /// Nanoseconds callers were made to wait (read-miss latency and write pacing).
    pub stall_ns: u64,
}

impl Sub for Traffic {
    type Output = Traffic;
    fn sub(self, o: Traffic) -> Traffic {
        Traffic {
            logical_bytes: self.logical_bytes.saturating_sub(o.logical_bytes),
            requested_read_bytes: self
                .requested_read_bytes
                .saturating_sub(o.requested_read_bytes),
            requested_write_bytes: self
                .requested_write_bytes
                .saturating_sub(o.requested_write_bytes),
            cpu_read_bytes: self.cpu_read_bytes.saturating_sub(o.cpu_read_bytes),
            cpu_write_bytes: self.cpu_write_bytes.saturating_sub(o.cpu_write_bytes),
            media_read_bytes: self.media_read_bytes.saturating_sub(o.media_read_bytes),
            media_write_bytes: self.media_write_bytes.saturating_sub(o.media_write_bytes),
            xpbuffer_read_hits: self.xpbuffer_read_hits.saturating_sub(o.xpbuffer_read_hits),
            xpbuffer_read_misses: self
                .xpbuffer_read_misses
                .saturating_sub(o.xpbuffer_read_misses),
            rmw_xplines: self.rmw_xplines.saturating_sub(o.rmw_xplines),
            flushes: self.flushes.saturating_sub(o.flushes),
            fences: self.fences.saturating_sub(o.fences),
            write_busy_ns: self.write_busy_ns.saturating_sub(o.write_busy_ns),
            stall_ns: self.stall_ns.saturating_sub(o.stall_ns),
        }
    }
}

impl Traffic {
    /// The counts of the interval from `earlier` to `self`.
    pub fn since(&self, earlier: &Traffic) -> Traffic {
        *self - *earlier
    }

    /// Media bytes read and written.
    pub fn media_bytes(&self) -> u64 {
        self.media_read_bytes + self.media_write_bytes
    }

    /// (Media read + write bytes) ÷ logical bytes; `None` when no logical bytes were recorded.
    pub fn amplification(&self) -> Option<f64> {
        ratio(self.media_bytes(), self.logical_bytes)
    }

    /// Media write bytes ÷ logical bytes; `None` when no logical bytes were recorded.
    pub fn write_amplification(&self) -> Option<f64> {
        ratio(self.media_write_bytes, self.logical_bytes)
    }

    /// Media read bytes ÷ logical bytes; `None` when no logical bytes were recorded.
    pub fn read_amplification(&self) -> Option<f64> {
        ratio(self.media_read_bytes, self.logical_bytes)
    }

    /// `bytes` per operation (`None` for zero operations), e.g. `Traffic::per_op(t.media_write_bytes, ops)`.
    pub fn per_op(bytes: u64, ops: u64) -> Option<f64> {
        ratio(bytes, ops)
    }
}

fn ratio(num: u64, den: u64) -> Option<f64> {
    (den != 0).then(|| num as f64 / den as f64)
}
