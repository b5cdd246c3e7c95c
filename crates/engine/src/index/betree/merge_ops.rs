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
pub const BUILTIN_MERGE_OPERATORS: &[&str] = &["u64-add", "u64-add-saturating"];

/// Checks, when a write is made, that merging `operand` into the value `current` (absent: `None`) is allowed:
/// `Err` says why not. Merges are applied lazily (during flushes and reads), so an operator whose result can
/// be invalid must refuse the write up front; the tree then reads the current value of every merged key.
pub type MergeCheck =
    Arc<dyn Fn(Option<&[u8]>, &[u8]) -> std::result::Result<(), String> + Send + Sync>;

/// A merge operator, and the check its merges need before they are logged (`None`: blind merges, no read).
#[derive(Clone)]
pub struct Merge {
    pub operator: MergeOperator,
    pub check: Option<MergeCheck>,
}

impl std::fmt::Debug for Merge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Merge")
            .field("checked", &self.check.is_some())
            .finish()
    }
}

fn read_u64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b.try_into().unwrap_or([0; 8]))
}

/// The built-in operator `name`, for a database whose values are of type `value`.
///
/// * `u64-add`: values and operands are `u64`; the operand is added to the value (absent: 0). A merge whose
///   sum would overflow is refused when it is written (`Error::InvalidArgument`, nothing changes), which
///   costs one point read of the key per merge.
/// * `u64-add-saturating`: the same sum, saturating at `u64::MAX` instead; blind (no read per merge), for
///   write-heavy counters.
///
/// A counter that reaches 0 stays, with value 0.
pub fn builtin(name: &str, value: TypeKind) -> Result<Merge> {
    if BUILTIN_MERGE_OPERATORS.contains(&name) && value != TypeKind::U64 {
        return Err(Error::invalid(format!(
            "merge operator {name} needs u64 values, not {}",
            value.name()
        )));
    }
    match name {
        "u64-add" => Ok(Merge {
            operator: Arc::new(|_key, old, operand| {
                let sum = old.map_or(0, read_u64).wrapping_add(read_u64(operand));
                Some(sum.to_be_bytes().to_vec())
            }),
            check: Some(Arc::new(|old, operand| {
                let (a, b) = (old.map_or(0, read_u64), read_u64(operand));
                a.checked_add(b).map(drop).ok_or_else(|| {
                    format!(
                        "adding {b} to {a} would overflow u64 (use the u64-add-saturating operator to saturate \
                         at {})",
                        u64::MAX
                    )
                })
            })),
        }),
        "u64-add-saturating" => Ok(Merge {
            operator: Arc::new(|_key, old, operand| {
                let sum = old.map_or(0, read_u64).saturating_add(read_u64(operand));
                Some(sum.to_be_bytes().to_vec())
            }),
            check: None,
        }),
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
    fn u64_add_adds_refuses_overflow_and_needs_u64_values() {
        let add = builtin("u64-add", TypeKind::U64).unwrap();
        let check = add.check.clone().expect("checked");
        let v = |x: u64| x.to_be_bytes().to_vec();
        assert_eq!((add.operator)(b"k", None, &v(5)), Some(v(5)));
        assert_eq!((add.operator)(b"k", Some(&v(5)), &v(7)), Some(v(12)));
        assert!(check(Some(&v(5)), &v(7)).is_ok());
        assert!(check(None, &v(u64::MAX)).is_ok());
        assert!(check(Some(&v(7)), &v(u64::MAX)).is_err());
        assert!(check(Some(&v(u64::MAX)), &v(1)).is_err());
        let sat = builtin("u64-add-saturating", TypeKind::U64).unwrap();
        assert!(sat.check.is_none());
        assert_eq!(
            (sat.operator)(b"k", Some(&v(7)), &v(u64::MAX)),
            Some(v(u64::MAX))
        );
        assert_eq!((sat.operator)(b"k", Some(&v(7)), &v(3)), Some(v(10)));
        assert!(builtin("u64-add", TypeKind::Bytes).is_err());
        assert!(builtin("u64-add-saturating", TypeKind::Bytes).is_err());
        assert!(builtin("concat", TypeKind::U64).is_err());
    }
}
