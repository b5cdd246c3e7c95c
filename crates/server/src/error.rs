//! The server's error type: what stops it from starting or keeps it from serving.

use std::path::{Path, PathBuf};

/// Why the server cannot start or go on.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A mistake on the command line or in a configuration file.
    #[error("{0}")]
    Usage(String),
    /// A partition's database failed (opening, writing, closing).
    #[error("{0}")]
    Engine(String),
    /// The operating system refused something (binding the port, a file).
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ServerError {
    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> ServerError {
        ServerError::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }
}

/// A result whose error is a [`ServerError`].
pub type ServerResult<T> = std::result::Result<T, ServerError>;
