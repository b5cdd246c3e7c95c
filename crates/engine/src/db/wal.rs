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

// A decoder of bytes read from disk: every index and slice is checked.
#![deny(clippy::indexing_slicing)]

use crate::index::WriteOp;
use crate::storage::codec::{Reader, Writer};

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
    Writer::new(out).u8(KIND_INTENT).u64(seqno);
}

/// Encodes a batch record of `ops` after `out`'s contents.
pub(crate) fn encode(seqno: u64, ops: &[WriteOp], out: &mut Vec<u8>) {
    let mut w = Writer::new(out);
    w.u8(KIND_BATCH).u64(seqno).u32(ops.len() as u32);
    for op in ops {
        match op {
            WriteOp::Put { key, value } => encode_op(&mut w, PUT, key, Some(value)),
            WriteOp::Merge { key, operand } => encode_op(&mut w, MERGE, key, Some(operand)),
            WriteOp::PutWeighted { key, value, weight } => {
                encode_op(&mut w, PUT_WEIGHTED, key, Some(value));
                w.f64(*weight);
            }
            WriteOp::Delete { key } => encode_op(&mut w, DELETE, key, None),
        }
    }
}

/// Encodes, after `out`'s contents, the batch record of one put of `value` under `key` (`None`: a delete
/// of `key`): the bytes [`encode`] gives for that one op, from borrowed bytes.
pub(crate) fn encode_single(seqno: u64, key: &[u8], value: Option<&[u8]>, out: &mut Vec<u8>) {
    let mut w = Writer::new(out);
    w.u8(KIND_BATCH).u64(seqno).u32(1);
    encode_op(
        &mut w,
        if value.is_some() { PUT } else { DELETE },
        key,
        value,
    );
}

/// One operation of a batch record: its tag, its key and, unless it is a delete, its value (or operand).
fn encode_op(w: &mut Writer<'_>, tag: u8, key: &[u8], value: Option<&[u8]>) {
    w.u8(tag).u32(key.len() as u32).bytes(key);
    if let Some(value) = value {
        w.u32(value.len() as u32).bytes(value);
    }
}

/// Decodes a record; `Err` says what is malformed.
pub(crate) fn decode(b: &[u8]) -> Result<WalRecord, String> {
    let mut r = Reader::new(b);
    let kind = r.u8()?;
    let seqno = r.u64()?;
    match kind {
        KIND_BATCH => {}
        KIND_INTENT => {
            r.finish()?;
            return Ok(WalRecord::CheckpointIntent { seqno });
        }
        k => return Err(format!("unknown record kind {k}")),
    }
    let count = r.u32()?;
    // Every op takes at least 5 bytes (tag and key length).
    let n = r.count(u64::from(count), 5)?;
    let mut ops = Vec::with_capacity(n);
    for i in 0..n {
        let tag = r.u8()?;
        let klen = r.u32()? as usize;
        let key = r.bytes(klen)?.to_vec();
        let mut value = || -> Result<Vec<u8>, String> {
            let len = r.u32()? as usize;
            Ok(r.bytes(len)?.to_vec())
        };
        ops.push(match tag {
            PUT => WriteOp::Put {
                key,
                value: value()?,
            },
            PUT_WEIGHTED => {
                let value = value()?;
                let weight = r.f64()?;
                if !(weight.is_finite() && weight >= 0.0) {
                    return Err(format!("op {i} has weight {weight}"));
                }
                WriteOp::PutWeighted { key, value, weight }
            }
            DELETE => WriteOp::Delete { key },
            MERGE => WriteOp::Merge {
                key,
                operand: value()?,
            },
            t => return Err(format!("op {i} has unknown tag {t}")),
        });
    }
    r.finish()?;
    Ok(WalRecord::Batch { seqno, ops })
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

    /// A single put or delete encoded from borrowed bytes is the record of that one op, after what the
    /// buffer held.
    #[test]
    fn single_ops_encode_as_their_batch() {
        for (key, value) in [(&b"k1"[..], Some(&b"value"[..])), (b"key2", None)] {
            let op = match value {
                Some(v) => WriteOp::Put {
                    key: key.to_vec(),
                    value: v.to_vec(),
                },
                None => WriteOp::Delete { key: key.to_vec() },
            };
            let mut want = b"head".to_vec();
            encode(5, std::slice::from_ref(&op), &mut want);
            let mut got = b"head".to_vec();
            encode_single(5, key, value, &mut got);
            assert_eq!(got, want);
            assert_eq!(
                decode(&got[4..]).unwrap(),
                WalRecord::Batch {
                    seqno: 5,
                    ops: vec![op]
                }
            );
        }
    }
}
