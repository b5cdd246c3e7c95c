//! Write-ahead-log records: one per batch, plus checkpoint intents.
//!
//! Payload (inside the log's framing, `storage::log`): record kind u8, seqno u64 LE, then
//! * kind 1, a **batch**: op count u32 LE, then per op a tag byte (1 = put, 2 = delete, 3 = weighted put,
//!   4 = merge), key length u32 LE, key, for puts and merges value (operand) length u32 LE and value, and for
//!   weighted puts the weight (f64 bits, u64 LE);
//! * kind 2, a **checkpoint intent**: nothing more. Written and synced just before the index checkpoints
//!   everything up to `seqno`: if the log ends with one, a damaged spare checkpoint slot may be that
//!   checkpoint's torn write rather than media damage.
//!
//! A WAL file's header (`storage::log::LogHeader`) carries the file's number and its base seqno: the
//! checkpoint its records follow (its first batch is base + 1).

use crate::index::WriteOp;

const PUT: u8 = 1;
const DELETE: u8 = 2;
const PUT_WEIGHTED: u8 = 3;
const MERGE: u8 = 4;

const KIND_BATCH: u8 = 1;
const KIND_INTENT: u8 = 2;

/// One decoded WAL record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WalRecord {
    /// A batch of writes with its sequence number.
    Batch { seqno: u64, ops: Vec<WriteOp> },
    /// The index is about to checkpoint everything up to `seqno`.
    CheckpointIntent { seqno: u64 },
}

/// Encodes a checkpoint intent for `seqno`.
pub(crate) fn encode_intent(seqno: u64, out: &mut Vec<u8>) {
    out.clear();
    out.push(KIND_INTENT);
    out.extend_from_slice(&seqno.to_le_bytes());
}

/// Name of the `number`th WAL file.
pub(crate) fn wal_name(number: u64) -> String {
    format!("wal-{number:016}.log")
}

/// Parses a WAL file name back into its number.
pub(crate) fn parse_wal_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    if digits.len() != 16 {
        return None;
    }
    digits.parse().ok()
}

pub(crate) fn encode(seqno: u64, ops: &[WriteOp], out: &mut Vec<u8>) {
    out.clear();
    out.push(KIND_BATCH);
    out.extend_from_slice(&seqno.to_le_bytes());
    out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for op in ops {
        match op {
            WriteOp::Put { key, value }
            | WriteOp::Merge {
                key,
                operand: value,
            } => {
                out.push(if matches!(op, WriteOp::Put { .. }) {
                    PUT
                } else {
                    MERGE
                });
                out.extend_from_slice(&(key.len() as u32).to_le_bytes());
                out.extend_from_slice(key);
                out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                out.extend_from_slice(value);
            }
            WriteOp::PutWeighted { key, value, weight } => {
                out.push(PUT_WEIGHTED);
                out.extend_from_slice(&(key.len() as u32).to_le_bytes());
                out.extend_from_slice(key);
                out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                out.extend_from_slice(value);
                out.extend_from_slice(&weight.to_bits().to_le_bytes());
            }
            WriteOp::Delete { key } => {
                out.push(DELETE);
                out.extend_from_slice(&(key.len() as u32).to_le_bytes());
                out.extend_from_slice(key);
            }
        }
    }
}

/// Decodes a record; `Err` says what is malformed.
pub(crate) fn decode(b: &[u8]) -> Result<WalRecord, String> {
    let mut r = Reader { b, at: 0 };
    let kind = r.take(1)?[0];
    let seqno = u64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"));
    match kind {
        KIND_BATCH => {}
        KIND_INTENT => {
            if r.at != b.len() {
                return Err(format!("{} trailing bytes", b.len() - r.at));
            }
            return Ok(WalRecord::CheckpointIntent { seqno });
        }
        k => return Err(format!("unknown record kind {k}")),
    }
    let n = r.u32()? as usize;
    if n > b.len() {
        return Err(format!("op count {n} exceeds the record size"));
    }
    let mut ops = Vec::with_capacity(n);
    for i in 0..n {
        let tag = r.take(1)?[0];
        let klen = r.u32()? as usize;
        let key = r.take(klen)?.to_vec();
        ops.push(match tag {
            PUT => {
                let vlen = r.u32()? as usize;
                WriteOp::Put {
                    key,
                    value: r.take(vlen)?.to_vec(),
                }
            }
            PUT_WEIGHTED => {
                let vlen = r.u32()? as usize;
                let value = r.take(vlen)?.to_vec();
                let weight =
                    f64::from_bits(u64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes")));
                if !(weight.is_finite() && weight >= 0.0) {
                    return Err(format!("op {i} has weight {weight}"));
                }
                WriteOp::PutWeighted { key, value, weight }
            }
            DELETE => WriteOp::Delete { key },
            MERGE => {
                let len = r.u32()? as usize;
                WriteOp::Merge {
                    key,
                    operand: r.take(len)?.to_vec(),
                }
            }
            t => return Err(format!("op {i} has unknown tag {t}")),
        });
    }
    if r.at != b.len() {
        return Err(format!("{} trailing bytes", b.len() - r.at));
    }
    Ok(WalRecord::Batch { seqno, ops })
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self
            .b
            .get(self.at..self.at.saturating_add(n))
            .ok_or_else(|| {
                format!(
                    "record ends at byte {} but {n} more were expected",
                    self.b.len()
                )
            })?;
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_roundtrip_and_damage_is_reported() {
        let ops = vec![
            WriteOp::Put {
                key: b"a".to_vec(),
                value: b"xyz".to_vec(),
            },
            WriteOp::Delete { key: b"b".to_vec() },
            WriteOp::PutWeighted {
                key: b"c".to_vec(),
                value: b"v".to_vec(),
                weight: 2.5,
            },
            WriteOp::Merge {
                key: b"d".to_vec(),
                operand: b"+1".to_vec(),
            },
        ];
        let mut buf = Vec::new();
        encode(9, &ops, &mut buf);
        assert_eq!(decode(&buf).unwrap(), WalRecord::Batch { seqno: 9, ops });
        assert!(decode(&buf[..buf.len() - 1]).is_err());
        let mut bad = buf.clone();
        bad[13] = 7;
        assert!(decode(&bad).is_err());
        assert!(decode(&[]).is_err());
        let mut bad = buf.clone();
        bad[0] = 9;
        assert!(decode(&bad).is_err());
        encode_intent(12, &mut buf);
        assert_eq!(
            decode(&buf).unwrap(),
            WalRecord::CheckpointIntent { seqno: 12 }
        );
        buf.push(0);
        assert!(decode(&buf).is_err());
    }

    #[test]
    fn wal_names_roundtrip() {
        assert_eq!(parse_wal_name(&wal_name(42)), Some(42));
        assert_eq!(parse_wal_name("wal-12.log"), None);
        assert_eq!(parse_wal_name("MANIFEST"), None);
    }
}
