//! The bench lab's error type: engine errors, file errors, and wrong answers found by the checks that every
//! workload makes on what it reads back.

use std::fmt;
use std::path::PathBuf;

/// Result alias of the bench lab.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Everything that stops a benchmark run.
#[derive(Debug)]
pub enum BenchError {
    /// The engine under test reported an error.
    Engine(strata::Error),
    /// A peer engine (redb, fjall, LMDB, RocksDB) reported an error.
    Peer {
        engine: &'static str,
        message: String,
    },
    /// Reading or writing a file of the run (results, report, data directory) failed.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The engine returned a wrong answer (wrong value, missing key, out-of-range sample, …): the run is
    /// aborted because its numbers would be meaningless.
    Verify(String),
    /// A bad request: unknown suite, unsupported operation, invalid parameter.
    Usage(String),
}

impl BenchError {
    /// A peer engine's error, with the engine's name.
    pub fn peer(engine: &'static str, e: impl fmt::Display) -> Self {
        BenchError::Peer {
            engine,
            message: e.to_string(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BenchError::Io {
            path: path.into(),
            source,
        }
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Engine(e) => write!(f, "{e}"),
            BenchError::Peer { engine, message } => write!(f, "{engine}: {message}"),
            BenchError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            BenchError::Verify(msg) => write!(f, "wrong result: {msg}"),
            BenchError::Usage(msg) => write!(f, "{msg}"),
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BenchError::Engine(e) => Some(e),
            BenchError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<strata::Error> for BenchError {
    fn from(e: strata::Error) -> Self {
        BenchError::Engine(e)
    }
}
