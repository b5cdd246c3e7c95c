//! Merge operators a database can name in its manifest (a [`MergeOperator`] is a plain function, so a
//! database records which one it uses by name and gets it back on open).
//!
//! Contract of every operator: given the key, the current value (absent: `None`) and an operand, it returns
//! the new value (`None`: the key is deleted). It must be deterministic — a read applies buffered operands
//! on the fly, and a flush applies them again later — and its result must be a valid value for the tree
//! (the width of fixed-width values, within the entry size limit otherwise).

use super::message::MergeOperator;
use crate::error::{Error, Result};
use crate::types::TypeKind;
use std::sync::Arc;

/// Names of the built-in operators.
pub const BUILTIN_MERGE_OPERATORS: &[&str] = &["u64-add"];

/// The built-in operator `name`, for a database whose values are of type `value`.
///
/// * `u64-add`: values and operands are `u64`; the operand is added to the value (absent: 0), wrapping on
///   overflow. A counter that reaches 0 stays, with value 0.
pub fn builtin(name: &str, value: TypeKind) -> Result<MergeOperator> {
    match name {
        "u64-add" => {
            if value != TypeKind::U64 {
                return Err(Error::invalid(format!(
                    "merge operator u64-add needs u64 values, not {}",
                    value.name()
                )));
            }
            Ok(Arc::new(|_key, old, operand| {
                let read = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or([0; 8]));
                let sum = old.map_or(0, read).wrapping_add(read(operand));
                Some(sum.to_be_bytes().to_vec())
            }))
        }
        other => Err(Error::invalid(format!(
            "unknown merge operator {other:?} (available: {})",
            BUILTIN_MERGE_OPERATORS.join(", ")
        ))),
    }
}

/// The operator of a tree without one: merges are refused before they reach it, so it only keeps the
/// current value should one ever be applied.
pub fn refusing() -> MergeOperator {
    Arc::new(|_key, old, _operand| old.map(<[u8]>::to_vec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u64_add_adds_and_needs_u64_values() {
        let add = builtin("u64-add", TypeKind::U64).unwrap();
        let v = |x: u64| x.to_be_bytes().to_vec();
        assert_eq!(add(b"k", None, &v(5)), Some(v(5)));
        assert_eq!(add(b"k", Some(&v(5)), &v(7)), Some(v(12)));
        assert_eq!(add(b"k", Some(&v(u64::MAX)), &v(1)), Some(v(0)));
        assert!(builtin("u64-add", TypeKind::Bytes).is_err());
        assert!(builtin("concat", TypeKind::U64).is_err());
    }
}
