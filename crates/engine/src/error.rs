//! The one error type of the engine. Every kind is one a caller can act on.

use std::path::PathBuf;

/// Result alias used throughout the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, grouped by what the caller can do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller passed something the engine cannot accept (oversized key, wrong value type, bad option).
    /// Nothing was changed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Bytes read from storage are damaged. `offset` is the byte offset within `file` where the damaged unit
    /// (page, log record, manifest) starts.
    #[error("corruption in {} at offset {offset}: {detail}", file.display())]
    Corruption {
        file: PathBuf,
        offset: u64,
        detail: String,
    },

    /// The operating system (or an injected fault) reported an I/O error.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A configured limit was reached (memory budget, all buffer frames pinned, disk full).
    #[error("resource exhausted: {0}")]
    ResourceExhausted(String),

    /// The database on disk was created with other settings (index kind, key or value type, page size, format
    /// version) than the ones asked for.
    #[error("incompatible: {0}")]
    Incompatible(String),

    /// Another handle (usually another process) holds the database directory's lock.
    #[error("database at {} is locked by another process or handle", .0.display())]
    Locked(PathBuf),

    /// An earlier write failed part-way; to never serve wrong data the handle refuses every further operation.
    /// Reopen the database: recovery restores the last durable state.
    #[error("database refuses operations after an earlier failure ({0}); reopen it to recover")]
    Poisoned(String),
}

impl Error {
    /// An I/O error attributed to `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Damage found in `file` at byte `offset`.
    pub fn corruption(file: impl Into<PathBuf>, offset: u64, detail: impl Into<String>) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            detail: detail.into(),
        }
    }

    /// The same error with a damage report moved to where its bytes are in a larger whole: `place` maps the
    /// report's file and offset (those of a part, such as a window of a region) to the whole's. Other errors
    /// are returned as they are.
    pub(crate) fn relocated(self, place: impl FnOnce(PathBuf, u64) -> (PathBuf, u64)) -> Self {
        match self {
            Error::Corruption {
                file,
                offset,
                detail,
            } => {
                let (file, offset) = place(file, offset);
                Error::Corruption {
                    file,
                    offset,
                    detail,
                }
            }
            e => e,
        }
    }

    /// An invalid argument, with a message naming what was wrong.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Error::InvalidArgument(detail.into())
    }

    /// True for errors that leave the on-disk and in-memory state untouched (the operation was refused before
    /// it started).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, Error::InvalidArgument(_))
    }
}

/// Damage found but not (yet) returned as an error: the file, the byte offset where the damaged unit starts,
/// and what is wrong. [`Damage::into_error`] turns it into the matching `Error::Corruption`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Damage {
    pub file: PathBuf,
    pub offset: u64,
    pub detail: String,
}

impl Damage {
    pub fn new(file: impl Into<PathBuf>, offset: u64, detail: impl Into<String>) -> Self {
        Damage {
            file: file.into(),
            offset,
            detail: detail.into(),
        }
    }

    /// The `Error::Corruption` this damage is.
    pub fn into_error(self) -> Error {
        Error::Corruption {
            file: self.file,
            offset: self.offset,
            detail: self.detail,
        }
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at offset {}: {}",
            self.file.display(),
            self.offset,
            self.detail
        )
    }
}
