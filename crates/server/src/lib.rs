//! # strata-server: Strata behind the Redis protocol
//!
//! `strata serve` starts this server: every Redis client and tool can talk to it (RESP2 and RESP3,
//! pipelining, inline commands). Keys live in N partitions, each its own Strata database
//! (see [`store`]); commands are planned per key and scattered to the partitions they touch
//! ([`command`]); connections are tokio tasks ([`conn`]) that run each pipeline as one round trip per
//! partition.
//!
//! Layers, outside in: `conn` (bytes in and out, bounds) → `resp` (parser and reply encoder) → `command`
//! (names, arity, arguments → plans → replies) → `store` (routing, partition workers, group commit) → the
//! `strata` engine.
//!
//! Invariants: malformed or oversized input gets an error reply and, for protocol errors, the connection
//! closes — never a panic; a write is answered only after it is durable at the server's durability (group
//! commit: one WAL append, and one `fsync` at `sync`, per batch of waiting jobs of a partition).
//!
//! Threads: `io_threads` network threads, each a tokio current-thread runtime (an event loop, as Redis has
//! one); a connection is served by one loop at a time, and moves between loops only as [`net_loops`]
//! places it (a split of one loop's connections stays only if it raised the command rate). Each partition
//! has a thread of its own too (see [`store`]).
//!
//! Cost model: a pipeline of c commands touching p partitions costs one read and one write of the socket,
//! and per partition one job run on the connection's own thread when the partition is idle (else a
//! hand-off to the thread running it) plus the engine's own work; a partition runs one job at a time, so a
//! hot partition is the server's bottleneck (what the hot-key cache and range splits address). At
//! durability `flush` a job with writes waits one turn of its event loop in the partition's queue first, so
//! the jobs of every connection served in that turn commit with one WAL write (not one per connection).
//! Likewise a pipeline with only a few point reads on a busy loop waits one turn, so the reads of every
//! connection served in that turn are looked up in one batch per partition ([`turn_reads`]).

pub mod cache;
pub mod cluster;
pub mod command;
pub mod conn;
pub mod error;
pub mod net_loops;
pub mod resp;
pub mod store;
pub mod turn_reads;

pub use error::{ServerError, ServerResult};
pub use resp::Limits;
pub use store::{DEFAULT_PARTITIONS, Partitioning, StoreConfig};

use command::Shared;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Network and limit settings.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Address to listen on (default 127.0.0.1: reachable from this machine only).
    pub bind: String,
    /// Port (0: any free port).
    pub port: u16,
    /// Password every connection must give (AUTH or HELLO ... AUTH) before other commands.
    pub requirepass: Option<String>,
    /// Most connections at once; more are answered with an error and closed.
    pub max_clients: usize,
    /// Close connections idle this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Bounds on one request.
    pub limits: Limits,
    /// Most unparsed bytes a connection may have buffered (an incomplete command longer than this closes it).
    pub max_query_buffer: usize,
    /// Cluster mode: the slot map (`None`: a standalone server).
    pub cluster: Option<cluster::ClusterConfig>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        let limits = Limits {
            max_bulk: strata::MAX_VALUE_LEN,
            ..Limits::default()
        };
        ServerSettings {
            bind: "127.0.0.1".into(),
            port: 6379,
            requirepass: None,
            max_clients: 10_000,
            idle_timeout: None,
            limits,
            max_query_buffer: 64 << 20,
            cluster: None,
        }
    }
}

/// Everything the server needs to start.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub settings: ServerSettings,
    pub store: StoreConfig,
    /// Network threads, each an event loop of its own (0: one per core).
    pub io_threads: usize,
    /// How connections are placed on the network loops.
    pub placement: net_loops::Placement,
}

/// A server running in background threads.
pub struct RunningServer {
    addr: SocketAddr,
    net: Arc<net_loops::NetLoops>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<ServerResult<()>>>,
}

impl RunningServer {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its network loops: connections per loop, moves, and [`net_loops::NetLoops::request`] to move some.
    pub fn network_loops(&self) -> &net_loops::NetLoops {
        &self.net
    }

    /// Stops accepting, closes every connection, and closes the partitions (with a checkpoint).
    pub fn shutdown(mut self) -> ServerResult<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> ServerResult<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| ServerError::Engine("the server thread panicked".into()))?,
            None => Ok(()),
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// Opens the store, binds the port and starts serving in background threads.
///
/// The network runs on `io_threads` event loops (tokio current-thread runtimes), one per thread, as Redis
/// runs one; a connection is served by one loop at a time, so no task is stolen by another thread and no
/// idle thread searches the others for work. (A multi-thread tokio runtime with work stealing cost about
/// 10–40% more CPU per command on a loaded two-core machine, most at pipeline depth 1.) Which loop serves
/// which connection follows the load by default ([`net_loops`]). Loop 0 also runs the accept loop.
pub fn start(config: ServerConfig) -> ServerResult<RunningServer> {
    let cluster = match &config.settings.cluster {
        Some(c) => Some(cluster::Cluster::new(c.clone())?),
        None => None,
    };
    let store = store::Store::open(&config.store)?;
    let threads = if config.io_threads == 0 {
        std::thread::available_parallelism().map_or(2, |n| n.get())
    } else {
        config.io_threads
    };
    let net = Arc::new(net_loops::NetLoops::new(threads, config.placement));
    let mut runtimes = Vec::with_capacity(threads);
    for i in 0..net.len() {
        runtimes.push(
            net.runtime(i)
                .map_err(|e| ServerError::Engine(format!("starting the network runtime: {e}")))?,
        );
    }
    net.set_handles(runtimes.iter().map(|r| r.handle().clone()).collect());
    let mut runtimes = runtimes.into_iter();
    let Some(main_runtime) = runtimes.next() else {
        return Err(ServerError::Engine("no network thread".into()));
    };
    let addr_text = format!("{}:{}", config.settings.bind, config.settings.port);
    let listener = main_runtime
        .block_on(tokio::net::TcpListener::bind(&addr_text))
        .map_err(|e| ServerError::io(&addr_text, e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServerError::io(&addr_text, e))?;
    let shared = Shared::new(store, config.settings, cluster, net.clone());
    let running_net = net.clone();
    // The other loops run until their stop channel closes, then drop their runtime (ending its connections).
    let mut loops = Vec::new();
    for (i, runtime) in runtimes.enumerate() {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let loop_net = net.clone();
        let thread = std::thread::Builder::new()
            .name(format!("strata-net{}", i + 1))
            .spawn(move || {
                loop_net.register_thread(i + 1);
                drop(loop_net);
                runtime.block_on(async move {
                    let _ = stop_rx.await;
                });
                drop(runtime);
            })
            .map_err(|e| ServerError::Engine(format!("starting a network thread: {e}")))?;
        loops.push((stop_tx, thread));
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("strata-net0".into())
        .spawn(move || {
            net.register_thread(0);
            let counted = shared.clone();
            main_runtime
                .spawn(net.follow_load(move || counted.total_commands.load(Ordering::Relaxed)));
            main_runtime.block_on(accept_loop(shared.clone(), listener, stop_rx));
            for (stop, thread) in loops {
                drop(stop);
                let _ = thread.join();
            }
            // Dropping the runtimes ends every connection task, releasing their handles on the store.
            drop(main_runtime);
            match Arc::try_unwrap(shared) {
                Ok(shared) => shared.store.close(),
                Err(_) => Err(ServerError::Engine(
                    "connections still hold the store at shutdown".into(),
                )),
            }
        })
        .map_err(|e| ServerError::Engine(format!("starting the server thread: {e}")))?;
    Ok(RunningServer {
        addr,
        net: running_net,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

async fn accept_loop(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => a,
        };
        let Ok((mut stream, peer)) = accepted else {
            // Out of file descriptors and the like: back off a moment instead of spinning.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        shared.total_connections.fetch_add(1, Ordering::Relaxed);
        if shared.clients.load(Ordering::Relaxed) >= shared.settings.max_clients {
            shared.rejected_connections.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let _ = stream
                    .write_all(b"-ERR max number of clients reached\r\n")
                    .await;
            });
            continue;
        }
        // The socket moves to its loop's reactor: out of this one as a std socket, into that one in its task.
        let Ok(stream) = stream.into_std() else {
            continue;
        };
        shared.clients.fetch_add(1, Ordering::Relaxed);
        let home = shared.net.place_new();
        let conn = Box::new(conn::Connection::new(&shared, peer.to_string(), home));
        spawn_connection(shared.clone(), conn, stream);
    }
}

/// Serves `conn` on its home loop, and on the next one when it moves.
fn spawn_connection(shared: Arc<Shared>, conn: Box<conn::Connection>, stream: std::net::TcpStream) {
    let home = conn.home;
    let Some(handle) = shared.net.handle(home).cloned() else {
        shared.net.closed(home);
        shared.clients.fetch_sub(1, Ordering::Relaxed);
        return;
    };
    handle.spawn(async move {
        let ended = match tokio::net::TcpStream::from_std(stream) {
            Ok(stream) => conn::serve(shared.clone(), stream, conn).await,
            Err(_) => conn::Ended::Closed,
        };
        match ended {
            conn::Ended::Closed => {
                shared.net.closed(home);
                shared.clients.fetch_sub(1, Ordering::Relaxed);
            }
            conn::Ended::Moved {
                to,
                mut conn,
                stream,
            } => {
                conn.home = to;
                spawn_connection(shared, conn, stream);
            }
        }
    });
}

/// Blocks until the process receives SIGINT (Ctrl-C) or SIGTERM.
pub fn wait_for_signal() -> ServerResult<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ServerError::Engine(format!("starting the signal runtime: {e}")))?;
    runtime.block_on(async {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut term = signal(SignalKind::terminate())
                .map_err(|e| ServerError::Engine(format!("listening for SIGTERM: {e}")))?;
            tokio::select! {
                r = tokio::signal::ctrl_c() => r.map_err(|e| ServerError::Engine(format!("listening for SIGINT: {e}"))),
                _ = term.recv() => Ok(()),
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c()
                .await
                .map_err(|e| ServerError::Engine(format!("listening for Ctrl-C: {e}")))
        }
    })
}
