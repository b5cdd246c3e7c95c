//! The network loops and which connections each serves: load-following placement.
//!
//! The server's network runs on a few event loops (tokio current-thread runtimes, a thread each). Where the
//! connections go matters on a machine with few cores, which the clients and the partitions share with the
//! loops:
//! - spread over every loop, a light load costs a wakeup (an `epoll_wait` that returns, a context switch)
//!   for almost every request, because each loop finds only one or two sockets ready at a time;
//! - on one loop, the same load finds many sockets ready per wakeup, as Redis's single loop does, and leaves
//!   the other cores to the clients and the partition threads;
//! - but one loop saturates first when the load is heavy (deep pipelines): then more loops serve more.
//!
//! So, in [`Placement::FollowLoad`] (the default), connections start on the loops already serving and move
//! between loops as the load changes, decided by [`decide`] every [`TICK`] from each loop's busy share of
//! wall time. Busy shares do not add up across placements (a loop serving alone also runs the partition
//! jobs that other loops' connections would have handed to partition threads), so the controller remembers
//! the command rate at which a loop serving alone saturated, and gathers connections on one loop again only
//! while the rate is well below it ([`GATHER_BELOW_SATURATED_RATE`]). Redis makes the same trade with its I/O threads, which it switches off while few clients have
//! replies pending. [`Placement::RoundRobin`] deals connections out once at accept and never moves them.
//!
//! A busy share cannot tell a loop that has more work than it can serve from one that is merely kept busy
//! by its clients' round trips: at pipeline depth 1 a closed-loop client leaves a core idle between its
//! bursts while the loop serving it runs most of the time, so the loop looks saturated and a core spare. A
//! split then raises the cost per command, not the rate (`redis-benchmark -P 1 -c 50`, two loops against
//! one on two cores shared with the client: twice the context switches and `epoll_wait`s per command; for
//! SETs at `flush` three times the WAL writes, each loop's turn committing its own group, and a cross-thread
//! wakeup every 30 commands; up to 40% more server CPU per command). So a split of the one serving loop is a
//! trial ([`TRIAL_TICKS`] after its cooldown): if the loops still carry the load and the command rate did
//! not rise by at least [`MIN_SPLIT_GAIN`] over the rate before it, the moved connections go back, and no
//! split is tried again for [`HOLD_TICKS`] unless the rate climbs [`RETRY_ABOVE`] over that rate (a heavier
//! load). A split that pays (deep pipelines: the loop had more work than it could serve) stays.
//!
//! Invariants:
//! - a connection is served by exactly one loop at a time;
//! - it moves only between pipelines: every reply written, only an incomplete command (if any) buffered,
//!   and that buffer goes with it, as does the socket with whatever the kernel has buffered, so no byte is
//!   lost or reordered;
//! - a loop's busy time is the CPU time of its thread (Linux: `/proc/<pid>/task/<tid>/schedstat`, read by
//!   the controller); elsewhere, the wall time it spends outside its park (its wait for I/O). CPU time, not
//!   wall time: a loop preempted by the clients on a small machine is not saturated, and a second loop
//!   would only add a third runnable thread to two cores (and milliseconds of preemption to the tail).
//!
//! Cost: one atomic load per pipeline (is this connection asked to move?); per tick, a read of
//! `/proc/stat` and of each loop thread's `schedstat` (or, without them, two clock reads per park of a
//! loop instead); per move, one deregistration and one registration of the socket. A split that does not pay
//! serves on two loops for its cooldown and trial (0.8 s) and is tried at most once per hold at a similar rate.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How connections are placed on the network loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// On the loops already serving, moved between loops as their load changes (module doc).
    #[default]
    FollowLoad,
    /// Dealt out round robin at accept, never moved.
    RoundRobin,
}

/// How often the placement is reconsidered.
pub const TICK: Duration = Duration::from_millis(100);
/// Ticks after a move before the next decision, so the busy shares show the new placement first.
pub const COOLDOWN_TICKS: u32 = 3;
/// A loop this busy (share of wall time) is saturated: some of its connections move to a quieter loop.
pub const SATURATED: f64 = 0.85;
/// A loop that takes connections from a saturated one must be at least this much less busy.
pub const ROOM: f64 = 0.3;
/// When the loops serving are together at most this busy, one loop can serve them all (with room: its
/// busy share stays well under [`SATURATED`]), and the least busy loop's connections move to the busiest.
pub const CONSOLIDATE_BELOW: f64 = 0.5;
/// A saturated loop's connections spread only while the machine has at least this many cores idle: on a
/// machine whose cores are all busy (the clients' share included), another loop cannot run any sooner.
pub const MIN_SPARE_CORES: f64 = 0.25;
/// Connections gather on one loop only while the command rate is at most this share of the rate at which a
/// loop serving alone last saturated.
pub const GATHER_BELOW_SATURATED_RATE: f64 = 0.6;
/// Consecutive light ticks before connections gather (a split's own disturbance, or a dip, is not a lighter
/// load).
pub const GATHER_AFTER_TICKS: u32 = 5;
/// Ticks (after a split's cooldown) over which the command rate of a split from one loop is measured.
pub const TRIAL_TICKS: u32 = 5;
/// A split from one loop stays only if the command rate rose by at least this share over the rate before it.
pub const MIN_SPLIT_GAIN: f64 = 0.1;
/// Ticks after a split that did not pay during which no split is tried at a similar rate (one minute).
pub const HOLD_TICKS: u32 = 600;
/// During a hold, a split is tried again once the rate is this share above the rate of the failed trial.
pub const RETRY_ABOVE: f64 = 0.3;
/// Ticks of command rate averaged into the rate before a split.
const RATE_HISTORY: usize = 3;

/// One loop's counters, shared with its runtime's park hooks.
#[derive(Debug, Default)]
pub struct LoopCounters {
    connections: AtomicUsize,
    /// Busy nanoseconds up to its last park.
    busy_ns: AtomicU64,
    /// When it last woke (nanoseconds since the epoch of its [`NetLoops`], plus 1); 0 while parked.
    running_since: AtomicU64,
    /// Where the kernel reports its thread's CPU time (set by [`NetLoops::register_thread`]).
    cpu_clock: OnceLock<std::path::PathBuf>,
    /// Connections asked to move away, and where to.
    leave: AtomicUsize,
    leave_to: AtomicUsize,
}

/// Every network loop of a server: their runtimes' handles and counters.
pub struct NetLoops {
    placement: Placement,
    /// Loops keep their busy wall time in park hooks: only when the controller runs and the kernel does not
    /// report the threads' CPU time (the hooks cost two clock reads per park).
    wall_clock: bool,
    epoch: Instant,
    counters: Vec<Arc<LoopCounters>>,
    handles: OnceLock<Vec<tokio::runtime::Handle>>,
    next_round_robin: AtomicUsize,
    moves: AtomicU64,
}

/// What [`decide`] sees of one loop over the last tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoopSample {
    pub connections: usize,
    /// Share of the tick's wall time the loop was busy, 0 to 1.
    pub busy: f64,
}

/// Move `count` connections from loop `from` to loop `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    pub from: usize,
    pub to: usize,
    pub count: usize,
}

/// The placement change a tick's samples call for, if any (module doc; the thresholds are the constants
/// above):
/// - the busiest loop is saturated and has at least two connections, the machine has at least
///   [`MIN_SPARE_CORES`] idle (`spare_cores`), and another loop has room: move the
///   share of its connections that evens the two loops' busy shares out (half of them onto an idle loop);
/// - else, if `may_gather`, two or more loops serve connections and are together at most
///   [`CONSOLIDATE_BELOW`] busy: the
///   least busy one's connections all move to the busiest one.
pub fn decide(samples: &[LoopSample], may_gather: bool, spare_cores: f64) -> Option<Move> {
    let by_busy = |a: &(usize, &LoopSample), b: &(usize, &LoopSample)| {
        a.1.busy
            .total_cmp(&b.1.busy)
            .then(a.1.connections.cmp(&b.1.connections))
    };
    let (hot, hot_sample) = samples.iter().enumerate().max_by(by_busy)?;
    if hot_sample.busy >= SATURATED && hot_sample.connections >= 2 {
        if spare_cores < MIN_SPARE_CORES {
            return None;
        }
        let (cold, cold_sample) = samples
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != hot)
            .min_by(by_busy)?;
        if cold_sample.busy <= hot_sample.busy - ROOM {
            let share = (hot_sample.busy - cold_sample.busy) / (2.0 * hot_sample.busy);
            let count = ((hot_sample.connections as f64 * share).ceil() as usize)
                .clamp(1, hot_sample.connections - 1);
            return Some(Move {
                from: hot,
                to: cold,
                count,
            });
        }
        return None;
    }
    let serving: Vec<(usize, &LoopSample)> = samples
        .iter()
        .enumerate()
        .filter(|(_, s)| s.connections > 0)
        .collect();
    let total: f64 = serving.iter().map(|(_, s)| s.busy).sum();
    if !may_gather || serving.len() < 2 || total > CONSOLIDATE_BELOW {
        return None;
    }
    let (from, from_sample) = serving.iter().copied().min_by(by_busy)?;
    let (to, _) = serving
        .iter()
        .copied()
        .filter(|&(i, _)| i != from)
        .max_by(by_busy)?;
    Some(Move {
        from,
        to,
        count: from_sample.connections,
    })
}

/// `/proc/stat` counts in units of 1/100 s (USER_HZ).
const IDLE_TICKS_PER_SEC: f64 = 100.0;

/// Idle time of every core of the machine so far (idle and I/O wait, in [`IDLE_TICKS_PER_SEC`] units), where
/// the kernel reports it.
fn machine_idle_ticks() -> Option<u64> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = cpu
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait ...
    Some(fields.get(3)? + fields.get(4).copied().unwrap_or(0))
}

/// [`decide`] over time: a cooldown after each move, the command rate at which a loop serving alone
/// last saturated (connections gather on one loop only well below it), and the trial of a split from one
/// loop (module doc).
#[derive(Debug, Default)]
pub struct Controller {
    cooldown: u32,
    saturated_rate: Option<f64>,
    light_ticks: u32,
    /// The command rates of the last busy ticks (in a row, since the last move), newest last.
    rates: Vec<f64>,
    trial: Option<Trial>,
    /// After a split that did not pay: its rate before, and the ticks the hold lasts yet.
    hold: Option<(f64, u32)>,
}

/// A split from one loop on trial.
#[derive(Debug, Clone, Copy)]
struct Trial {
    /// The loop split and the loop that took connections.
    from: usize,
    to: usize,
    /// The saturated-rate mark before the split (restored when the split is undone).
    saturated_before: Option<f64>,
    /// The command rate before the split, and the sum and count of the rates since its cooldown.
    before: f64,
    sum: f64,
    ticks: u32,
}

impl Controller {
    /// The move a tick's samples and command rate (per second) call for, if any.
    pub fn step(&mut self, samples: &[LoopSample], rate: f64, spare_cores: f64) -> Option<Move> {
        if self.cooldown > 0 {
            self.cooldown -= 1;
            return None;
        }
        if let Some((_, left)) = &mut self.hold {
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.hold = None;
            }
        }
        if let Some(undo) = self.judge_trial(samples, rate) {
            return Some(undo);
        }
        // The rate before a split counts only the ticks of the load that saturates the loop: not the idle
        // ticks before it started, which would make any split look like a gain.
        if samples.iter().map(|s| s.busy).sum::<f64>() >= SATURATED {
            self.rates.push(rate);
            if self.rates.len() > RATE_HISTORY {
                self.rates.remove(0);
            }
        } else {
            self.rates.clear();
        }
        let may_gather = self
            .saturated_rate
            .is_none_or(|r| rate <= GATHER_BELOW_SATURATED_RATE * r);
        let Some(m) = decide(samples, may_gather, spare_cores) else {
            self.light_ticks = 0;
            return None;
        };
        // Any other move ends a trial unjudged (the placement it measured is gone).
        let trial = self.trial.take();
        if samples[m.from].busy >= SATURATED {
            self.light_ticks = 0;
            if samples.iter().filter(|s| s.connections > 0).count() == 1 {
                let before = self.rates.iter().sum::<f64>() / self.rates.len().max(1) as f64;
                if self
                    .hold
                    .is_some_and(|(held, _)| before < held * (1.0 + RETRY_ABOVE))
                {
                    return None;
                }
                self.trial = Some(Trial {
                    from: m.from,
                    to: m.to,
                    saturated_before: self.saturated_rate,
                    before,
                    sum: 0.0,
                    ticks: 0,
                });
                self.saturated_rate = Some(rate);
            }
        } else {
            self.light_ticks += 1;
            if self.light_ticks < GATHER_AFTER_TICKS {
                self.trial = trial;
                return None;
            }
            self.light_ticks = 0;
        }
        self.moved();
        Some(m)
    }

    /// Adds this tick to the split on trial, if any; at its end, the move that undoes it when it did not pay
    /// (and the hold starts).
    fn judge_trial(&mut self, samples: &[LoopSample], rate: f64) -> Option<Move> {
        let t = self.trial.as_mut()?;
        t.sum += rate;
        t.ticks += 1;
        if t.ticks < TRIAL_TICKS {
            return None;
        }
        let t = self.trial.take()?;
        // Judged only while the loops still carry the load (their busy shares add up to a saturated loop's):
        // a rate that fell because the clients went away says nothing of the split.
        let loaded = samples.iter().map(|s| s.busy).sum::<f64>() >= SATURATED;
        if !loaded || t.sum / f64::from(t.ticks) >= t.before * (1.0 + MIN_SPLIT_GAIN) {
            return None;
        }
        // The split raised no rate worth its cost: back to one loop, and no new trial for a while.
        self.hold = Some((t.before, HOLD_TICKS));
        self.saturated_rate = t.saturated_before;
        self.light_ticks = 0;
        self.moved();
        let count = samples.get(t.to).map_or(0, |s| s.connections);
        (count > 0 && t.from < samples.len()).then_some(Move {
            from: t.to,
            to: t.from,
            count,
        })
    }

    /// A move was asked for: wait for it to show, and measure rates afresh.
    fn moved(&mut self) {
        self.cooldown = COOLDOWN_TICKS;
        self.rates.clear();
    }
}

impl NetLoops {
    /// Counters for `loops` loops (at least one); their runtimes are built with [`NetLoops::runtime`] and
    /// registered with [`NetLoops::set_handles`].
    pub fn new(loops: usize, placement: Placement) -> NetLoops {
        let cpu_clock = cfg!(target_os = "linux")
            && std::path::Path::new("/proc/thread-self/schedstat").exists();
        let wall_clock = placement == Placement::FollowLoad && loops >= 2 && !cpu_clock;
        NetLoops {
            placement,
            wall_clock,
            epoch: Instant::now(),
            counters: (0..loops.max(1))
                .map(|_| {
                    Arc::new(LoopCounters {
                        // Running from the start: a runtime's first turn comes without an unpark.
                        running_since: AtomicU64::new(u64::from(wall_clock)),
                        ..LoopCounters::default()
                    })
                })
                .collect(),
            handles: OnceLock::new(),
            next_round_robin: AtomicUsize::new(0),
            moves: AtomicU64::new(0),
        }
    }

    /// How many loops there are.
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// Whether there are none (never: a server has at least one loop).
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }

    fn now_ns(epoch: Instant) -> u64 {
        u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// A current-thread runtime for loop `i`, whose park hooks keep the loop's busy wall time where the
    /// controller needs it.
    pub fn runtime(&self, i: usize) -> std::io::Result<tokio::runtime::Runtime> {
        let mut builder = tokio::runtime::Builder::new_current_thread();
        builder.enable_all();
        if !self.wall_clock {
            return builder.build();
        }
        let (parked, woke) = (self.counters[i].clone(), self.counters[i].clone());
        let epoch = self.epoch;
        builder
            .on_thread_park(move || {
                let since = parked.running_since.swap(0, Ordering::Relaxed);
                if since != 0 {
                    let busy = Self::now_ns(epoch).saturating_sub(since - 1);
                    parked.busy_ns.fetch_add(busy, Ordering::Relaxed);
                }
            })
            .on_thread_unpark(move || {
                woke.running_since
                    .store(Self::now_ns(epoch) + 1, Ordering::Relaxed);
            })
            .build()
    }

    /// Called on loop `i`'s thread before it runs: lets the controller read the thread's CPU time.
    pub fn register_thread(&self, i: usize) {
        #[cfg(target_os = "linux")]
        if let (Some(c), Ok(link)) = (
            self.counters.get(i),
            std::fs::read_link("/proc/thread-self"),
        ) {
            let _ = c
                .cpu_clock
                .set(std::path::Path::new("/proc").join(link).join("schedstat"));
        }
        #[cfg(not(target_os = "linux"))]
        let _ = i;
    }

    /// Registers the loops' runtime handles, in loop order (once).
    pub fn set_handles(&self, handles: Vec<tokio::runtime::Handle>) {
        let _ = self.handles.set(handles);
    }

    /// The handle of loop `i`'s runtime.
    pub fn handle(&self, i: usize) -> Option<&tokio::runtime::Handle> {
        self.handles.get().and_then(|h| h.get(i))
    }

    /// The loop a new connection goes to (and counts it there).
    pub fn place_new(&self) -> usize {
        let n = self.counters.len();
        let i = match self.placement {
            Placement::RoundRobin => self.next_round_robin.fetch_add(1, Ordering::Relaxed) % n,
            // The serving loop with the fewest connections; loop 0 when none serves.
            Placement::FollowLoad => (0..n)
                .map(|i| (i, self.counters[i].connections.load(Ordering::Relaxed)))
                .filter(|&(_, c)| c > 0)
                .min_by_key(|&(_, c)| c)
                .map_or(0, |(i, _)| i),
        };
        self.counters[i].connections.fetch_add(1, Ordering::Relaxed);
        i
    }

    /// A connection of loop `i` closed.
    pub fn closed(&self, i: usize) {
        self.counters[i].connections.fetch_sub(1, Ordering::Relaxed);
    }

    /// Whether a connection of loop `home` should move now, and where to (it then moves: the counts are
    /// updated here).
    pub fn take_leave(&self, home: usize) -> Option<usize> {
        let c = &self.counters[home];
        c.leave
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .ok()?;
        let to = c.leave_to.load(Ordering::Acquire);
        if to == home || to >= self.counters.len() {
            return None;
        }
        c.connections.fetch_sub(1, Ordering::Relaxed);
        self.counters[to]
            .connections
            .fetch_add(1, Ordering::Relaxed);
        self.moves.fetch_add(1, Ordering::Relaxed);
        Some(to)
    }

    /// Asks `m.count` connections of loop `m.from` to move to loop `m.to` (replacing an earlier request of
    /// that loop). Each moves at its next pipeline; a connection waiting for input moves after its next one.
    pub fn request(&self, m: Move) {
        if m.from >= self.counters.len() || m.to >= self.counters.len() || m.from == m.to {
            return;
        }
        let c = &self.counters[m.from];
        c.leave_to.store(m.to, Ordering::Release);
        c.leave.store(m.count, Ordering::Release);
    }

    /// Each loop's busy nanoseconds so far: wall time outside its park, and its thread's CPU time where the
    /// kernel reports it.
    fn busy_totals(&self) -> Vec<(u64, Option<u64>)> {
        let now = Self::now_ns(self.epoch);
        self.counters
            .iter()
            .map(|c| {
                let since = c.running_since.load(Ordering::Relaxed);
                let running = if since == 0 {
                    0
                } else {
                    now.saturating_sub(since - 1)
                };
                let cpu = c.cpu_clock.get().and_then(|path| {
                    // schedstat: time on the CPU (ns), time waiting to run (ns), timeslices.
                    let text = std::fs::read_to_string(path).ok()?;
                    text.split_whitespace().next()?.parse().ok()
                });
                (c.busy_ns.load(Ordering::Relaxed) + running, cpu)
            })
            .collect()
    }

    /// Connections per loop.
    pub fn connections(&self) -> Vec<usize> {
        self.counters
            .iter()
            .map(|c| c.connections.load(Ordering::Relaxed))
            .collect()
    }

    /// Connections moved between loops so far.
    pub fn moves(&self) -> u64 {
        self.moves.load(Ordering::Relaxed)
    }

    /// The placement policy.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Reconsiders the placement every [`TICK`] (runs until its runtime stops; returns at once for
    /// [`Placement::RoundRobin`] or a single loop). `commands` reads the server's count of commands served.
    pub async fn follow_load(self: Arc<Self>, commands: impl Fn() -> u64) {
        if self.placement != Placement::FollowLoad || self.counters.len() < 2 {
            return;
        }
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // An interval's first tick is at once: the first samples are taken a whole tick later.
        tick.tick().await;
        let mut last = (Instant::now(), self.busy_totals(), commands());
        let mut last_idle = machine_idle_ticks();
        let mut controller = Controller::default();
        loop {
            tick.tick().await;
            let now = (
                Instant::now(),
                self.busy_totals(),
                commands(),
                machine_idle_ticks(),
            );
            let wall = now.0.duration_since(last.0).as_nanos() as f64;
            if wall < TICK.as_nanos() as f64 / 2.0 {
                // Too short to tell a busy loop from one that is merely running this controller.
                continue;
            }
            let samples: Vec<LoopSample> = self
                .connections()
                .into_iter()
                .zip(now.1.iter().zip(&last.1))
                .map(|(connections, (b, a))| {
                    let busy_ns = match (b.1, a.1) {
                        (Some(cpu_now), Some(cpu_then)) => cpu_now.saturating_sub(cpu_then),
                        _ => b.0.saturating_sub(a.0),
                    };
                    LoopSample {
                        connections,
                        busy: (busy_ns as f64 / wall).clamp(0.0, 1.0),
                    }
                })
                .collect();
            let rate = now.2.saturating_sub(last.2) as f64 / (wall / 1e9);
            let spare_cores = match (now.3, last_idle) {
                (Some(b), Some(a)) => {
                    b.saturating_sub(a) as f64 / IDLE_TICKS_PER_SEC / (wall / 1e9)
                }
                _ => f64::INFINITY,
            };
            last_idle = now.3;
            last = (now.0, now.1, now.2);
            if let Some(m) = controller.step(&samples, rate, spare_cores) {
                self.request(m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(connections: usize, busy: f64) -> LoopSample {
        LoopSample { connections, busy }
    }

    #[test]
    fn a_saturated_loop_gives_half_its_connections_to_an_idle_one() {
        assert_eq!(
            decide(&[s(50, 0.97), s(0, 0.0)], true, f64::INFINITY),
            Some(Move {
                from: 0,
                to: 1,
                count: 25
            })
        );
        // Onto the idlest loop, whichever it is.
        assert_eq!(
            decide(
                &[s(0, 0.0), s(1, 0.4), s(40, 1.0), s(0, 0.01)],
                true,
                f64::INFINITY
            ),
            Some(Move {
                from: 2,
                to: 0,
                count: 20
            })
        );
    }

    #[test]
    fn a_saturated_loop_evens_out_with_a_busy_one() {
        // (0.9 - 0.5) / 1.8 of 36 connections = 8.
        assert_eq!(
            decide(&[s(36, 0.9), s(10, 0.5)], true, f64::INFINITY),
            Some(Move {
                from: 0,
                to: 1,
                count: 8
            })
        );
    }

    #[test]
    fn no_split_while_the_machine_has_no_idle_core() {
        let hot = [s(50, 0.97), s(0, 0.0)];
        assert_eq!(decide(&hot, true, 0.1), None);
        assert!(decide(&hot, true, MIN_SPARE_CORES).is_some());
        // Gathering does not depend on it.
        assert!(decide(&[s(25, 0.2), s(25, 0.25)], true, 0.0).is_some());
    }

    #[test]
    fn no_move_without_room_or_with_one_connection() {
        assert_eq!(
            decide(&[s(30, 0.95), s(30, 0.8)], true, f64::INFINITY),
            None
        );
        assert_eq!(decide(&[s(1, 1.0), s(0, 0.0)], true, f64::INFINITY), None);
        assert_eq!(decide(&[s(10, 0.7), s(10, 0.6)], true, f64::INFINITY), None);
        assert_eq!(decide(&[s(10, 0.6)], true, f64::INFINITY), None);
        assert_eq!(decide(&[], true, f64::INFINITY), None);
    }

    #[test]
    fn light_loops_consolidate_onto_the_busiest() {
        assert_eq!(
            decide(&[s(25, 0.2), s(25, 0.25)], true, f64::INFINITY),
            Some(Move {
                from: 0,
                to: 1,
                count: 25
            })
        );
        // Loops without connections take no part.
        assert_eq!(
            decide(&[s(0, 0.0), s(3, 0.1), s(4, 0.05)], true, f64::INFINITY),
            Some(Move {
                from: 2,
                to: 1,
                count: 4
            })
        );
        // Not while the rate is near one where a loop serving alone saturated.
        assert_eq!(
            decide(&[s(25, 0.2), s(25, 0.25)], false, f64::INFINITY),
            None
        );
        // One loop serving: nothing to consolidate.
        assert_eq!(decide(&[s(50, 0.4), s(0, 0.0)], true, f64::INFINITY), None);
        assert_eq!(decide(&[s(25, 0.3), s(25, 0.3)], true, f64::INFINITY), None);
    }

    /// Split because one loop saturated at 100,000 commands/s, the loops look light (each runs less than
    /// its share); they gather again only once the rate falls well below that.
    #[test]
    fn loops_split_by_saturation_gather_only_when_the_rate_falls() {
        let mut c = Controller::default();
        let split = c.step(&[s(50, 0.95), s(0, 0.0)], 100_000.0, f64::INFINITY);
        assert_eq!(
            split,
            Some(Move {
                from: 0,
                to: 1,
                count: 25
            })
        );
        for _ in 0..COOLDOWN_TICKS {
            assert_eq!(
                c.step(&[s(25, 0.1), s(25, 0.1)], 100_000.0, f64::INFINITY),
                None
            );
        }
        assert_eq!(
            c.step(&[s(25, 0.2), s(25, 0.2)], 95_000.0, f64::INFINITY),
            None
        );
        let light = [s(25, 0.1), s(25, 0.12)];
        for _ in 1..GATHER_AFTER_TICKS {
            assert_eq!(
                c.step(&light, 50_000.0, f64::INFINITY),
                None,
                "gathers only after a streak"
            );
        }
        assert_eq!(
            c.step(&light, 50_000.0, f64::INFINITY),
            Some(Move {
                from: 0,
                to: 1,
                count: 25
            })
        );
        // Without a saturation seen, light loops gather at any rate, after the streak; a tick that is not
        // light starts the streak again.
        let mut fresh = Controller::default();
        for _ in 1..GATHER_AFTER_TICKS {
            assert_eq!(fresh.step(&light, 1e9, f64::INFINITY), None);
        }
        assert_eq!(
            fresh.step(&[s(25, 0.4), s(25, 0.4)], 1e9, f64::INFINITY),
            None
        );
        for _ in 1..GATHER_AFTER_TICKS {
            assert_eq!(fresh.step(&light, 1e9, f64::INFINITY), None);
        }
        assert!(fresh.step(&light, 1e9, f64::INFINITY).is_some());
    }

    /// Steps `c` through a split's cooldown with `samples` at `rate` (nothing moves meanwhile).
    fn cool_down(c: &mut Controller, samples: &[LoopSample], rate: f64) {
        for _ in 0..COOLDOWN_TICKS {
            assert_eq!(c.step(samples, rate, f64::INFINITY), None, "cooldown");
        }
    }

    /// A fresh controller that split loop 0 (`alone`, at `rate`, a core spare) and went through the
    /// cooldown with `after` at `after_rate`.
    fn split_from(
        alone: &[LoopSample],
        rate: f64,
        after: &[LoopSample],
        after_rate: f64,
    ) -> Controller {
        let mut c = Controller::default();
        assert_eq!(c.step(alone, rate, 0.5), SPLIT);
        cool_down(&mut c, after, after_rate);
        c
    }

    /// Half of 50 connections from loop 0 to loop 1, and all of them back.
    const SPLIT: Option<Move> = Some(Move {
        from: 0,
        to: 1,
        count: 25,
    });
    const BACK: Option<Move> = Some(Move {
        from: 1,
        to: 0,
        count: 25,
    });

    /// Pipeline depth 1 on a small machine: the one loop looks saturated with a core spare, but two loops
    /// serve no more commands (each only busier per command): the split is undone after its trial and not
    /// tried again at that rate during the hold; a heavier load, or the hold's end, gets a new trial.
    #[test]
    fn a_split_that_raises_no_rate_is_undone_and_held() {
        let alone = [s(50, 0.92), s(0, 0.0)];
        let split = [s(25, 0.6), s(25, 0.55)];
        let mut c = split_from(&alone, 60_000.0, &split, 58_000.0);
        for _ in 1..TRIAL_TICKS {
            assert_eq!(c.step(&split, 62_000.0, 0.1), None, "on trial");
        }
        assert_eq!(
            c.step(&split, 62_000.0, 0.1),
            BACK,
            "a 3% gain does not pay for the second loop"
        );
        cool_down(&mut c, &alone, 60_000.0);
        for _ in 0..20 {
            assert_eq!(c.step(&alone, 60_000.0, 0.5), None, "held at this rate");
        }
        // A load heavier by more than RETRY_ABOVE gets a trial of its own (the rate before a split is the
        // mean of the last ticks).
        let heavier = 60_000.0 * (1.0 + RETRY_ABOVE) * 1.1;
        assert_eq!(c.step(&alone, heavier, 0.5), None);
        assert_eq!(c.step(&alone, heavier, 0.5), None);
        assert_eq!(c.step(&alone, heavier, 0.5), SPLIT);
        // And after the hold, the same load too.
        let mut c = split_from(&alone, 60_000.0, &split, 60_000.0);
        for _ in 0..TRIAL_TICKS - 1 {
            assert_eq!(c.step(&split, 60_000.0, 0.1), None);
        }
        assert!(c.step(&split, 60_000.0, 0.1).is_some(), "undone");
        cool_down(&mut c, &alone, 60_000.0);
        for _ in 1..HOLD_TICKS {
            assert_eq!(c.step(&alone, 60_000.0, 0.5), None);
        }
        assert_eq!(c.step(&alone, 60_000.0, 0.5), SPLIT, "the hold is over");
    }

    /// A load that starts after idle ticks: the rate before its split is the loaded ticks' alone, so a split
    /// that raises nothing is undone (the idle ticks' rates would have made it look like a gain).
    #[test]
    fn the_rate_before_a_split_leaves_out_idle_ticks() {
        let mut c = Controller::default();
        let idle = [s(0, 0.0), s(0, 0.0)];
        for _ in 0..5 {
            assert_eq!(c.step(&idle, 0.0, 2.0), None);
        }
        let alone = [s(50, 0.95), s(0, 0.0)];
        let split = [s(25, 0.6), s(25, 0.6)];
        assert_eq!(c.step(&alone, 60_000.0, 0.5), SPLIT);
        cool_down(&mut c, &split, 60_000.0);
        for _ in 1..TRIAL_TICKS {
            assert_eq!(c.step(&split, 60_000.0, 0.1), None);
        }
        assert_eq!(c.step(&split, 60_000.0, 0.1), BACK);
    }

    /// A split that raises the rate (a deep pipeline: the loop had more work than it could serve) stays; one
    /// whose clients went away during its trial is not judged (no undo, no hold).
    #[test]
    fn a_split_that_pays_stays_and_an_unloaded_trial_is_not_judged() {
        let alone = [s(50, 0.97), s(0, 0.0)];
        let split = [s(25, 0.9), s(25, 0.85)];
        let mut c = split_from(&alone, 200_000.0, &split, 250_000.0);
        for _ in 0..TRIAL_TICKS + 20 {
            assert_eq!(c.step(&split, 250_000.0, 0.0), None, "kept");
        }
        let gone = [s(25, 0.01), s(25, 0.0)];
        let mut c = split_from(&alone, 200_000.0, &gone, 100.0);
        for _ in 1..TRIAL_TICKS {
            assert_eq!(c.step(&gone, 100.0, 2.0), None);
        }
        // The trial's last tick: light loops gather after their streak as always (loop 1, the less busy,
        // onto loop 0), but no hold starts.
        assert_eq!(c.step(&gone, 100.0, 2.0), BACK);
        assert!(c.trial.is_none() && c.hold.is_none(), "not judged");
        // So the same load on one loop again gets its trial at once.
        cool_down(&mut c, &alone, 200_000.0);
        assert_eq!(c.step(&alone, 200_000.0, 0.6), SPLIT);
    }

    #[test]
    fn consolidation_leaves_room_under_saturation() {
        // Whatever consolidates must not trigger a split at once: together at most CONSOLIDATE_BELOW busy,
        // well under SATURATED.
        const {
            assert!(CONSOLIDATE_BELOW + ROOM <= SATURATED);
        }
    }

    #[test]
    fn a_connection_moves_once_per_request_and_counts_follow() {
        let net = NetLoops::new(2, Placement::FollowLoad);
        for _ in 0..4 {
            assert_eq!(net.place_new(), 0, "all start on loop 0 while it serves");
        }
        net.request(Move {
            from: 0,
            to: 1,
            count: 2,
        });
        assert_eq!(net.take_leave(1), None, "loop 1 was asked nothing");
        assert_eq!(net.take_leave(0), Some(1));
        assert_eq!(net.take_leave(0), Some(1));
        assert_eq!(net.take_leave(0), None, "only two asked");
        assert_eq!(net.connections(), vec![2, 2]);
        assert_eq!(net.moves(), 2);
        // New connections go to the serving loop with the fewest.
        net.closed(1);
        assert_eq!(net.place_new(), 1);
        assert_eq!(net.connections(), vec![2, 2]);
    }

    #[test]
    fn round_robin_deals_and_never_follows_load() {
        let net = NetLoops::new(3, Placement::RoundRobin);
        let placed: Vec<usize> = (0..6).map(|_| net.place_new()).collect();
        assert_eq!(placed, vec![0, 1, 2, 0, 1, 2]);
    }
}
