//! The wasmtime host: one Engine, compiled components cached by sha256, one `InstancePre` per
//! loaded plugin, and a fresh Store per call bounded by a memory cap and an epoch deadline.
//!
//! Owns: Engine configuration, the epoch ticker thread, WASI deny-all context, the log import,
//! conversions between the plain model and the WIT bindings, error classification, and every
//! per-call and load-time bound (see "Bounds" below). Must not touch: output semantics (see
//! `checks`) and which plugin serves what (see `registry`).
//!
//! Bounds. A plugin is untrusted code; whatever it does, a call ends by its deadline (plus one
//! epoch tick) and costs at most its memory cap plus [`HOST_COPY_CAP`] of host memory:
//! - time: the epoch deadline interrupts Wasm code; host calls are not interrupted by it, so no
//!   WASI import may block: clock subscriptions (the only way to sleep or wait in WASI 0.2) and
//!   socket creation and name lookup trap at once ([`DENIED_WASI`]); what remains cannot block
//!   (closed stdin, in-memory stdout/stderr, no preopened directories, frozen clocks);
//! - memory: one cap for all memories and tables of the instance together ([`CapLimiter`]);
//!   data the host copies out of the guest (results, log fields) is capped per call by
//!   wasmtime's hostcall fuel, so aliasing (many list entries pointing at one string) cannot
//!   amplify it; WASI handles, component handles and random bytes are capped;
//! - text: log lines, fields, refusal messages and trap messages are cut before they reach
//!   `tracing`, status or Events;
//! - load: components larger than [`MAX_COMPONENT_BYTES`] are refused before compiling, and a
//!   compile that outlives [`HostConfig::compile_timeout`] is refused.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store,
    Trap,
};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::{
    Job, JobAllocation, JobPlan, Node, PluginError, PodMutator, PolicyAnswer, PolicyError,
    PreemptAnswer, SchedulingPolicy, TaskContext, checks,
};

mod bindings {
    /// The current contract (`wit/plugins.wit`, 0.5.0).
    pub mod v5 {
        pub mod policy {
            wasmtime::component::bindgen!({ path: "wit/plugins.wit", world: "scheduling-policy" });
        }
        pub mod mutator {
            wasmtime::component::bindgen!({
                path: "wit/plugins.wit",
                world: "pod-mutator",
                with: {
                    "diorch:plugins/types": super::policy::diorch::plugins::types,
                    "diorch:plugins/log": super::policy::diorch::plugins::log,
                },
            });
        }
    }
    /// The frozen 0.4.0 contract (`wit/v0.4/plugins.wit`). Its records are 0.5's, field for
    /// field (0.5 only adds the `preempt` records; wasmtime checks component types by
    /// structure, not by package version), so 0.3, 0.4 and 0.5 share one set of Rust types and
    /// one input builder; its log import is its own.
    pub mod v4 {
        pub mod policy {
            wasmtime::component::bindgen!({
                path: "wit/v0.4/plugins.wit",
                world: "scheduling-policy",
                with: { "diorch:plugins/types": crate::plugin::host::bindings::v5::policy::diorch::plugins::types },
            });
        }
        pub mod mutator {
            wasmtime::component::bindgen!({
                path: "wit/v0.4/plugins.wit",
                world: "pod-mutator",
                with: {
                    "diorch:plugins/types": crate::plugin::host::bindings::v5::policy::diorch::plugins::types,
                    "diorch:plugins/log": super::policy::diorch::plugins::log,
                },
            });
        }
    }
    /// The frozen 0.3.0 contract (`wit/v0.3/plugins.wit`). Its input records are 0.5's (see
    /// `v4`); its log import is its own.
    pub mod v3 {
        pub mod policy {
            wasmtime::component::bindgen!({
                path: "wit/v0.3/plugins.wit",
                world: "scheduling-policy",
                with: { "diorch:plugins/types": crate::plugin::host::bindings::v5::policy::diorch::plugins::types },
            });
        }
        pub mod mutator {
            wasmtime::component::bindgen!({
                path: "wit/v0.3/plugins.wit",
                world: "pod-mutator",
                with: {
                    "diorch:plugins/types": crate::plugin::host::bindings::v5::policy::diorch::plugins::types,
                    "diorch:plugins/log": super::policy::diorch::plugins::log,
                },
            });
        }
    }
    /// The frozen 0.2.0 contract (`wit/v0.2/plugins.wit`), for components built against it.
    pub mod v2 {
        pub mod policy {
            wasmtime::component::bindgen!({ path: "wit/v0.2/plugins.wit", world: "scheduling-policy" });
        }
        pub mod mutator {
            wasmtime::component::bindgen!({
                path: "wit/v0.2/plugins.wit",
                world: "pod-mutator",
                with: {
                    "diorch:plugins/types": super::policy::diorch::plugins::types,
                    "diorch:plugins/log": super::policy::diorch::plugins::log,
                },
            });
        }
    }
}

mod calls;
mod columns;
mod compile;
mod records;

pub use calls::{CallPaths, RawAllocation, RawPreemption, WasmMutator, WasmPolicy};
use calls::{LoadedPolicy, MutatorPre, PolicyPre};

use bindings::v2::policy::diorch::plugins::{log as log_v2, types as wit_v2};
use bindings::v3::policy::diorch::plugins::log as log_v3;
use bindings::v4::policy::diorch::plugins::log as log_v4;
use bindings::v5::policy::diorch::plugins::{log as log_v5, types as wit};

/// The contract versions the host calls: the current one, and the three before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Contract {
    #[serde(rename = "0.5.0")]
    V5,
    #[serde(rename = "0.4.0")]
    V4,
    #[serde(rename = "0.3.0")]
    V3,
    #[serde(rename = "0.2.0")]
    V2,
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Contract::V5 => "0.5.0",
            Contract::V4 => "0.4.0",
            Contract::V3 => "0.3.0",
            Contract::V2 => "0.2.0",
        })
    }
}

/// The two worlds a component can implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum World {
    SchedulingPolicy,
    PodMutator,
}

impl World {
    /// The world's name at contract version `contract`.
    pub fn at(self, contract: Contract) -> String {
        let name = match self {
            World::SchedulingPolicy => "scheduling-policy",
            World::PodMutator => "pod-mutator",
        };
        format!("diorch:plugins/{name}@{contract}")
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.at(Contract::V5))
    }
}

/// Per-call bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock budget of one call (instantiation included).
    pub deadline: Duration,
    /// Cap on linear memory (all memories of the instance together).
    pub memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_millis(50),
            memory_bytes: 64 << 20,
        }
    }
}

#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Defaults for plugins without overrides.
    pub limits: Limits,
    /// Epoch tick: the granularity of deadlines.
    pub epoch_tick: Duration,
    /// Log lines a plugin may emit per call; later ones are dropped.
    pub max_log_lines: u32,
    /// Wasm calls run at once (async callers queue); default: the number of cores.
    pub max_concurrent_calls: usize,
    /// Time budget of one component's compile at load: this, plus [`Self::compile_per_mib`]
    /// for every MiB of the component (wall time: Cranelift's worker threads are not the
    /// caller's, so CPU time could not be read for them). Past it the upload is refused.
    pub compile_timeout: Duration,
    /// Compile time allowed per MiB of component on top of [`Self::compile_timeout`]: an
    /// interpreted (Python) component of 18 MB took 6.9 s on a quiet core and 68 s on a loaded
    /// one.
    pub compile_per_mib: Duration,
    /// Largest component accepted (the operator's `--plugin-max-pull-mib`).
    pub max_component_bytes: usize,
    /// Where compiled components are kept across restarts (`None`: in memory only).
    pub cache_dir: Option<std::path::PathBuf>,
    /// Memory the plugin calls may take together, in bytes: a plugin whose memory cap (plus
    /// [`HOST_COPY_CAP`]) times `max_concurrent_calls` exceeds it is refused at load. Default:
    /// [`default_memory_budget`].
    pub memory_budget: usize,
}

impl Default for HostConfig {
    fn default() -> Self {
        let max_concurrent_calls = std::thread::available_parallelism().map_or(2, |n| n.get());
        HostConfig {
            limits: Limits::default(),
            epoch_tick: Duration::from_millis(5),
            max_log_lines: 64,
            max_concurrent_calls,
            compile_timeout: Duration::from_secs(20),
            compile_per_mib: Duration::from_secs(4),
            max_component_bytes: MAX_COMPONENT_BYTES,
            cache_dir: None,
            memory_budget: default_memory_budget(max_concurrent_calls),
        }
    }
}

/// Without a cgroup memory limit, what each concurrent call may take.
const BUDGET_PER_CALL: usize = 256 << 20;

/// Half the container's memory limit (cgroup v2 `memory.max`, else v1
/// `memory.limit_in_bytes`), leaving the other half to the operator itself; without a limit,
/// `BUDGET_PER_CALL` (256 MiB) per concurrent call.
pub fn default_memory_budget(max_concurrent_calls: usize) -> usize {
    let limit = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|path| std::fs::read_to_string(path).ok())
    // "max" (v2) does not parse; v1 says "no limit" with a number near i64::MAX.
    .filter_map(|text| text.trim().parse::<u64>().ok())
    .find(|&bytes| bytes < 1 << 50);
    match limit {
        Some(bytes) => usize::try_from(bytes / 2).unwrap_or(usize::MAX),
        None => BUDGET_PER_CALL.saturating_mul(max_concurrent_calls.max(1)),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// wasmtime's messages can span lines (byte dumps); Events and logs want one line.
fn one_line(e: &wasmtime::Error) -> String {
    format!("{e:#}")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Epoch ticks an inline `allocate` attempt may run (see [`WasmPolicy`]'s `allocate`): the
/// current tick may end at any moment, so with one the budget was anything from 0 to a tick:
/// 11 and 12 of ~1 110 calls of the placement bench went through the pool (each a hop costing
/// milliseconds on the saturated machine); with two, the budget is at least one whole tick, and
/// 1 and 3 did (`PLACEMENT_METRICS=1 SIZES=1000 cargo bench --bench placement`).
const INLINE_TICKS: u64 = 2;

/// Compiled components kept; past this the cache starts over (uploads are rare).
const CACHE_CAP: usize = 64;
/// Bytes of compiled artifacts kept on disk (the deploy/ cache volume is sized for it).
const COMPILED_CACHE_BUDGET: u64 = 1 << 30;
/// Largest compiled artifact read back (an 18 MB Python component compiles to ~40 MB).
const COMPILED_ARTIFACT_CAP: usize = 512 << 20;
const STDERR_CAP: usize = 4096;
/// Caps of one log line: message bytes, fields, and bytes of a field's key and of its value.
const LOG_MESSAGE_CAP: usize = 1024;
const LOG_FIELDS_CAP: usize = 16;
const LOG_KEY_CAP: usize = 64;
const LOG_VALUE_CAP: usize = 256;
/// Bytes of a plugin's refusal text (e.g. `no-fit`) and of a trap message kept in errors, which
/// end up in status, Events and logs.
pub const ERROR_TEXT_CAP: usize = 1024;
/// Default largest component accepted (an interpreted Python component is ~19 MB; a ConfigMap
/// holds ~1 MiB): it bounds compile time and memory, since a compile cannot be cancelled.
pub const MAX_COMPONENT_BYTES: usize = 64 << 20;
/// Compile threads alive at once (one compiling, the others waiting their turn), timed-out ones
/// included (their threads finish on their own): more uploads at once are refused.
const MAX_COMPILES: usize = 16;
/// Added to a queued compile's wait for its turn: a thread's start on a loaded machine.
const COMPILE_QUEUE_SLACK: Duration = Duration::from_secs(5);
/// Bytes the host copies out of the guest in one transfer: a call's results, or one log
/// import's arguments (wasmtime's hostcall fuel; 128 MiB by default). Copies are made from
/// guest memory, but one string can be referenced by any number of list entries, so without
/// this cap a 1 MiB guest could make the host allocate gigabytes.
pub const HOST_COPY_CAP: usize = 4 << 20;
/// Largest pod a mutator may return: etcd's default request limit (1.5 MiB); larger could not
/// be created anyway, and parsing it is the largest host-side copy of a mutator call.
pub const MUTATOR_OUTPUT_CAP: usize = 1536 << 10;
/// WASI resources (streams, pollables) and component handles alive at once in one call.
const MAX_HANDLES: usize = 1024;
/// Bytes of one WASI `get-random-bytes` call (64 MiB by default, copied on the host).
const RANDOM_CAP: u64 = 4096;
/// Core instances, memories and tables one call may create (a Rust component has a handful).
const MAX_INSTANCES: usize = 256;
const MAX_MEMORIES: usize = 64;
const MAX_TABLES: usize = 256;
/// What a table element costs in the memory cap (a pointer).
const TABLE_ELEMENT_BYTES: usize = 8;

/// The version wasmtime-wasi registers its WASI 0.2 interfaces under; guests importing any 0.2.x
/// reach them by semver. The hostile `sleep` and `socket` tests fail if an upgrade moves them
/// and [`DENIED_WASI`] stops shadowing anything.
const WASI_VERSION: &str = "0.2.12";

/// WASI functions that trap with [`Denied`]: a host call is not interrupted by the epoch
/// deadline, so these could hold a thread past it (a clock subscription is how a guest sleeps:
/// `std::thread::sleep` is subscribe-duration + poll), or reach a host resource (sockets are
/// refused by the deny-all context anyway; trapping also keeps them off the host entirely).
const DENIED_WASI: &[(&str, &[&str])] = &[
    (
        "wasi:clocks/monotonic-clock",
        &["subscribe-duration", "subscribe-instant"],
    ),
    ("wasi:sockets/tcp-create-socket", &["create-tcp-socket"]),
    ("wasi:sockets/udp-create-socket", &["create-udp-socket"]),
    ("wasi:sockets/ip-name-lookup", &["resolve-addresses"]),
];

/// A plugin called a WASI function the host denies (see [`DENIED_WASI`]).
#[derive(Debug)]
struct Denied {
    interface: &'static str,
    func: &'static str,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "called {}#{}, which is denied: plugins may not sleep, wait, or use sockets",
            self.interface, self.func
        )
    }
}

impl std::error::Error for Denied {}

/// `text` cut to at most `cap` bytes (on a char boundary), marked when cut.
fn capped(mut text: String, cap: usize) -> String {
    if text.len() > cap {
        let total = text.len();
        text.truncate(text.floor_char_boundary(cap));
        text.push_str(&format!("… [{total} bytes, cut]"));
    }
    text
}

struct HostInner {
    engine: Engine,
    linker: Linker<HostState>,
    config: HostConfig,
    compiled: Mutex<HashMap<[u8; 32], Component>>,
    /// Compile threads alive (see [`MAX_COMPILES`]).
    compiling: Arc<AtomicUsize>,
    /// Held by the one compile that runs: compiles run one at a time, so a large component's
    /// compile never has company on the cores the operator serves from.
    compile_gate: Arc<Mutex<()>>,
    /// Calls running at once. Deadlines are wall-clock, so running more calls than cores would
    /// make them time out under load; extra calls wait here, before their clock starts.
    slots: Arc<tokio::sync::Semaphore>,
    ticker: Arc<EpochTicker>,
}

/// Advances the engine's epoch every tick while a Store is alive (a call runs, or a load
/// checks a component), and sleeps otherwise: deadlines count ticks from a Store's start, so
/// ticks nobody counts are wasted, and an idle operator woke 200 times a second for them.
struct EpochTicker {
    /// Stores alive ([`Ticking`] guards).
    alive: AtomicUsize,
    /// Ticks so far (what the tests watch).
    ticks: AtomicU64,
    thread: std::thread::Thread,
}

/// How long the idle ticker sleeps before it looks whether its engine is gone.
const IDLE_TICKER_CHECK: Duration = Duration::from_secs(1);

impl EpochTicker {
    fn start(engine: &Engine, tick: Duration) -> std::io::Result<Arc<EpochTicker>> {
        let weak = engine.weak();
        let (tx, rx) = std::sync::mpsc::sync_channel::<Arc<EpochTicker>>(1);
        let handle = std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                // The ticker's own handle, sent once the thread exists; none: the host failed.
                let Ok(ticker) = rx.recv() else { return };
                // Ends with the last Engine clone, so hosts can come and go.
                while let Some(engine) = weak.upgrade() {
                    if ticker.alive.load(Ordering::Acquire) == 0 {
                        drop(engine);
                        // An unpark between the load and here makes this return at once.
                        std::thread::park_timeout(IDLE_TICKER_CHECK);
                        continue;
                    }
                    engine.increment_epoch();
                    ticker.ticks.fetch_add(1, Ordering::Relaxed);
                    drop(engine);
                    std::thread::sleep(tick);
                }
            })?;
        let ticker = Arc::new(EpochTicker {
            alive: AtomicUsize::new(0),
            ticks: AtomicU64::new(0),
            thread: handle.thread().clone(),
        });
        // The thread waits for this before its first look; it cannot have ended before.
        let _ = tx.send(ticker.clone());
        Ok(ticker)
    }

    /// A Store starts: ticks count from now until the guard drops.
    fn ticking(self: &Arc<Self>) -> Ticking {
        if self.alive.fetch_add(1, Ordering::AcqRel) == 0 {
            self.thread.unpark();
        }
        Ticking(self.clone())
    }
}

/// Keeps the epoch ticking while a Store lives (it is part of the Store's data).
struct Ticking(Arc<EpochTicker>);

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.alive.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Both call slots a call holds: its plugin's own (see [`LoadedCore::own_slots`]), then the
/// host's. Taken in that order, so a plugin's queued calls never hold a host slot.
struct Slots {
    _own: tokio::sync::OwnedSemaphorePermit,
    _host: tokio::sync::OwnedSemaphorePermit,
}

impl LoadedCore {
    fn slots(&self) -> impl Future<Output = Result<Slots, PluginError>> + Send + 'static {
        let (own, host, plugin) = (
            self.own_slots.clone(),
            self.host.slots.clone(),
            self.name.clone(),
        );
        async move {
            let own = own
                .acquire_owned()
                .await
                .map_err(|e| host_err(&plugin, e))?;
            let host = host
                .acquire_owned()
                .await
                .map_err(|e| host_err(&plugin, e))?;
            Ok(Slots {
                _own: own,
                _host: host,
            })
        }
    }
}

/// The plugin host. Cheap to clone; all clones share the Engine and the compile cache.
#[derive(Clone)]
pub struct PluginHost {
    inner: Arc<HostInner>,
}

/// One call of the log import: level, message, fields.
type LogLine = (tracing::Level, String, Vec<(String, String)>);

/// Store data: WASI (deny-all), the memory limiter and logging budget.
struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: CapLimiter,
    plugin: Arc<str>,
    logs_left: u32,
    /// Log lines held back during an inline attempt (see [`WasmPolicy`]'s `allocate`): they are
    /// emitted only if the attempt's answer is used, so a retried call does not log twice.
    held_logs: Option<Vec<LogLine>>,
    /// What the guest wrote to stderr (a Rust panic message), quoted in trap errors.
    stderr: MemoryOutputPipe,
    /// The epoch advances while this Store lives.
    _ticking: Ticking,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// One memory cap for the instance: `StoreLimits::memory_size` caps each memory on its own, so a
/// component with several core instances (each with its memory) or a module with several
/// memories could take the cap that many times. This sums every memory and table growth of the
/// Store (growth from 0 at instantiation included) and refuses, as a trap, what passes the cap.
/// `hit` tells a failed call apart as a memory-cap hit.
struct CapLimiter {
    cap: usize,
    used: usize,
    hit: bool,
}

impl CapLimiter {
    fn new(cap: usize) -> CapLimiter {
        CapLimiter {
            cap,
            used: 0,
            hit: false,
        }
    }

    fn grow(&mut self, bytes: usize) -> wasmtime::Result<bool> {
        match self.used.checked_add(bytes) {
            Some(total) if total <= self.cap => {
                // A growth allowed here that then fails stays counted: stricter, never looser.
                self.used = total;
                Ok(true)
            }
            _ => {
                self.hit = true;
                wasmtime::bail!(
                    "memory cap of {} bytes reached ({} in use, {bytes} more asked)",
                    self.cap,
                    self.used
                )
            }
        }
    }
}

impl ResourceLimiter for CapLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow(desired.saturating_sub(current))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow(
            desired
                .saturating_sub(current)
                .saturating_mul(TABLE_ELEMENT_BYTES),
        )
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

/// Clocks frozen at the Unix epoch: plugins must not depend on time.
struct FrozenClock;

impl wasmtime_wasi::HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

impl HostState {
    // The arguments were copied out of the guest before this runs; wasmtime's hostcall fuel
    // (`HOST_COPY_CAP`) bounded that copy. Here they are cut before anything keeps them.
    fn log(&mut self, level: tracing::Level, message: String, fields: Vec<(String, String)>) {
        if self.logs_left == 0 {
            return;
        }
        self.logs_left -= 1;
        let (message, fields) = cap_log_line(message, fields);
        if let Some(held) = &mut self.held_logs {
            held.push((level, message, fields));
            return;
        }
        emit(&self.plugin, level, &message, &fields);
    }
}

/// The log import's level, whichever contract version called it.
macro_rules! log_host {
    ($log:ident) => {
        impl $log::Host for HostState {
            fn log(&mut self, level: $log::Level, message: String, fields: Vec<(String, String)>) {
                let level = match level {
                    $log::Level::Trace => tracing::Level::TRACE,
                    $log::Level::Debug => tracing::Level::DEBUG,
                    $log::Level::Info => tracing::Level::INFO,
                    $log::Level::Warn => tracing::Level::WARN,
                    $log::Level::Error => tracing::Level::ERROR,
                };
                HostState::log(self, level, message, fields);
            }
        }
    };
}

log_host!(log_v5);
log_host!(log_v4);
log_host!(log_v3);
log_host!(log_v2);

/// A log line as it may reach `tracing`: the message, each field's key and value, and the
/// number of fields cut (a last field `…` says how many were dropped).
fn cap_log_line(message: String, fields: Vec<(String, String)>) -> (String, Vec<(String, String)>) {
    let total = fields.len();
    let mut kept: Vec<(String, String)> = fields
        .into_iter()
        .take(LOG_FIELDS_CAP)
        .map(|(k, v)| (capped(k, LOG_KEY_CAP), capped(v, LOG_VALUE_CAP)))
        .collect();
    if total > LOG_FIELDS_CAP {
        kept.push((
            "…".to_string(),
            format!("{} more fields dropped", total - LOG_FIELDS_CAP),
        ));
    }
    (capped(message, LOG_MESSAGE_CAP), kept)
}

fn emit(plugin: &str, level: tracing::Level, message: &str, fields: &[(String, String)]) {
    // tracing needs static field names: the plugin's own fields travel as one list; and a
    // static level per call site.
    match level {
        tracing::Level::TRACE => tracing::trace!(plugin, ?fields, "{message}"),
        tracing::Level::DEBUG => tracing::debug!(plugin, ?fields, "{message}"),
        tracing::Level::INFO => tracing::info!(plugin, ?fields, "{message}"),
        tracing::Level::WARN => tracing::warn!(plugin, ?fields, "{message}"),
        tracing::Level::ERROR => tracing::error!(plugin, ?fields, "{message}"),
    }
}

impl HostState {
    fn release_held_logs(&mut self) {
        for (level, message, fields) in self.held_logs.take().unwrap_or_default() {
            emit(&self.plugin, level, &message, &fields);
        }
    }
}

impl wit::Host for HostState {}
impl wit_v2::Host for HostState {}

/// Refuses a policy input any of whose lists or strings is longer than the WIT's u32 indices
/// reach: the encoders' `as u32` casts rely on it.
fn within_u32_indices(plugin: &str, lengths: &[usize]) -> Result<(), PluginError> {
    if lengths.iter().any(|&n| u32::try_from(n).is_err()) {
        return Err(host_err(
            plugin,
            "policy input too large for the WIT's u32 indices",
        ));
    }
    Ok(())
}

fn host_err(plugin: &str, e: impl fmt::Display) -> PluginError {
    PluginError::Host {
        plugin: plugin.to_string(),
        message: e.to_string(),
    }
}

/// Written bytes of a memory or table reset by copying instead of unmapping (with PAGEMAP_SCAN).
const KEEP_RESIDENT: usize = 2 << 20;

/// Component instances the pool holds at once (calls, load-time smoke calls and checks).
const POOLED_INSTANCES: u32 = 64;

/// Instance slots reused from call to call: a fresh Store per call then costs no mmap/munmap
/// of a 4 GiB reservation and few page faults (the memory's image stays mapped in its slot), which
/// in a busy multi-threaded operator made an `allocate` take ~4× what it takes in isolation.
fn pooling(pagemap_scan: bool) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::new();
    if pagemap_scan {
        pool.pagemap_scan(wasmtime::Enabled::Yes)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT);
    }
    pool.total_component_instances(POOLED_INSTANCES)
        // A Rust component: its module plus wit-component's shims; leave room.
        .total_core_instances(POOLED_INSTANCES * 8)
        .total_memories(POOLED_INSTANCES * 2)
        .total_tables(POOLED_INSTANCES * 8)
        .max_tables_per_module(4)
        // The largest per-plugin cap; each call's own cap is its Store's limiter.
        .max_memory_size(crate::plugin::spec::MAX_MEMORY_MIB << 20);
    pool
}

/// Shadows the [`DENIED_WASI`] functions of wasmtime-wasi's linker with ones that trap.
fn deny_wasi(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    for &(interface, funcs) in DENIED_WASI {
        let mut instance = linker.instance(&format!("{interface}@{WASI_VERSION}"))?;
        for &func in funcs {
            instance.func_new(func, move |_, _, _, _| {
                Err(wasmtime::Error::new(Denied { interface, func }))
            })?;
        }
    }
    linker.allow_shadowing(false);
    Ok(())
}

/// The contract version a component's imports of this package name (`diorch:plugins/…@0.2.x`),
/// if any.
fn declared_contract(engine: &Engine, component: &Component) -> Option<Contract> {
    component
        .component_type()
        .imports(engine)
        .find_map(|(name, _)| {
            let version = name.strip_prefix("diorch:plugins/")?.split_once('@')?.1;
            if version.starts_with("0.5.") {
                Some(Contract::V5)
            } else if version.starts_with("0.4.") {
                Some(Contract::V4)
            } else if version.starts_with("0.3.") {
                Some(Contract::V3)
            } else if version.starts_with("0.2.") {
                Some(Contract::V2)
            } else {
                None
            }
        })
}

/// The log import of every contract version.
fn add_log(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    log_v5::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    log_v4::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    log_v3::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    log_v2::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)
}

impl PluginHost {
    pub fn new(config: HostConfig) -> Result<PluginHost, PluginError> {
        let mut wasm = Config::new();
        wasm.wasm_component_model(true);
        wasm.epoch_interruption(true);
        // NaN bit patterns are the one non-deterministic corner of Wasm.
        wasm.cranelift_nan_canonicalization(true);
        // Where the kernel can say which pages a call wrote (PAGEMAP_SCAN, Linux 6.7+), those
        // are copied back from the image and stay mapped; elsewhere a slot is reset by madvise.
        // Where the pool's address space cannot be reserved (an RLIMIT_AS), each call maps its
        // own memory: slower, but the host still serves.
        let strategies = [
            ("pooled, pages reset by PAGEMAP_SCAN", Some(pooling(true))),
            ("pooled", Some(pooling(false))),
            ("on demand", None),
        ];
        let mut failures = Vec::new();
        let mut engine = None;
        for (strategy, pool) in strategies {
            let pooled = pool.is_some();
            wasm.allocation_strategy(match pool {
                Some(pool) => InstanceAllocationStrategy::Pooling(pool),
                None => InstanceAllocationStrategy::OnDemand,
            });
            match Engine::new(&wasm) {
                Ok(e) => {
                    if !pooled {
                        tracing::warn!(failures = %failures.join("; "),
                            "cannot reserve the Wasm instance pool; every call maps its own memory");
                    } else {
                        tracing::debug!(strategy, "Wasm instance pool ready");
                    }
                    engine = Some(e);
                    break;
                }
                Err(e) => failures.push(format!("{strategy}: {}", one_line(&e))),
            }
        }
        let engine = engine.ok_or_else(|| host_err("-", failures.join("; ")))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| host_err("-", e))?;
        deny_wasi(&mut linker).map_err(|e| host_err("-", e))?;
        add_log(&mut linker).map_err(|e| host_err("-", e))?;
        let ticker = EpochTicker::start(&engine, config.epoch_tick)
            .map_err(|e| host_err("-", format!("cannot start the epoch ticker: {e}")))?;
        Ok(PluginHost {
            inner: Arc::new(HostInner {
                engine,
                linker,
                compiled: Mutex::new(HashMap::new()),
                compiling: Arc::new(AtomicUsize::new(0)),
                compile_gate: Arc::new(Mutex::new(())),
                slots: Arc::new(tokio::sync::Semaphore::new(
                    config.max_concurrent_calls.max(1),
                )),
                ticker,
                config,
            }),
        })
    }

    pub fn config(&self) -> &HostConfig {
        &self.inner.config
    }

    /// Compiles `bytes` afresh (no cache, so the time is real) and lists what it declares.
    pub fn inspect(&self, bytes: &[u8]) -> Result<ComponentInfo, PluginError> {
        let started = std::time::Instant::now();
        let component = self.compile_bounded("-", bytes)?;
        let compile_time = started.elapsed();
        let ty = component.component_type();
        let engine = &self.inner.engine;
        Ok(ComponentInfo {
            sha256: Sha256::digest(bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            imports: ty.imports(engine).map(|(n, _)| n.to_string()).collect(),
            exports: ty.exports(engine).map(|(n, _)| n.to_string()).collect(),
            compile_time,
        })
    }

    /// Compiles a component and checks it against `world` at the current contract version,
    /// else at 0.2.0: `typed` builds the typed pre-instance of a version (the world check is
    /// wasmtime's import/export type check).
    fn load<P>(
        &self,
        name: &str,
        bytes: &[u8],
        limits: Option<Limits>,
        world: World,
        typed: impl Fn(Contract, wasmtime::component::InstancePre<HostState>) -> wasmtime::Result<P>,
    ) -> Result<Loaded<P>, PluginError> {
        let (component, hash) = self.compile(name, bytes)?;
        let wrong = |e: wasmtime::Error| PluginError::WrongWorld {
            plugin: name.to_string(),
            world,
            message: one_line(&e),
        };
        let pre = self
            .inner
            .linker
            .instantiate_pre(&component)
            .map_err(wrong)?;
        // The version its imports name first: a mutator's export has the same type in every
        // version, so the type check alone would not tell which one it was built against.
        let declared = declared_contract(&self.inner.engine, &component);
        let order = declared.into_iter().chain(
            [Contract::V5, Contract::V4, Contract::V3, Contract::V2]
                .into_iter()
                .filter(|c| Some(*c) != declared),
        );
        let mut current_error = None;
        let mut typed_pre = None;
        for contract in order {
            match typed(contract, pre.clone()) {
                Ok(typed) => {
                    typed_pre = Some((contract, typed));
                    break;
                }
                // Reported against the current version: what a plugin author should build for.
                Err(e) if contract == Contract::V5 => current_error = Some(e),
                Err(_) => {}
            }
        }
        let Some((contract, pre)) = typed_pre else {
            return Err(wrong(current_error.unwrap_or_else(|| {
                wasmtime::Error::msg("matches no contract version")
            })));
        };
        Ok(Loaded {
            core: self.loaded_core(name, hash, limits, contract),
            pre,
        })
    }

    /// Compiles and checks a policy component (blocking).
    pub fn load_policy_blocking(
        &self,
        name: &str,
        bytes: &[u8],
        limits: Option<Limits>,
    ) -> Result<WasmPolicy, PluginError> {
        let Loaded { core, pre } =
            self.load(name, bytes, limits, World::SchedulingPolicy, PolicyPre::new)?;
        // A cache hit: `load` compiled it.
        let (component, _) = self.compile(name, bytes)?;
        let inline_pre = match self.inline_pre(&component, core.contract) {
            Ok(pre) => Some(pre),
            Err(e) => {
                tracing::debug!(plugin = name, error = %one_line(&e),
                    "no inline attempts for this plugin; its calls run on the blocking pool");
                None
            }
        };
        Ok(WasmPolicy {
            inner: Arc::new(LoadedPolicy {
                core,
                pre,
                inline_ok: AtomicBool::new(inline_pre.is_some()),
                inline_pre,
                inline_answers: AtomicU64::new(0),
                pooled_runs: AtomicU64::new(0),
            }),
        })
    }

    /// The pre-instance of inline attempts: the log import, and every WASI import a stub that
    /// fails the attempt. wasmtime-wasi's sync WASI runs its async core with `block_on` on the
    /// current tokio runtime, which must not happen on a runtime thread; a call that touches
    /// WASI (e.g. a panic message on stderr) is served by the pool instead.
    fn inline_pre(&self, component: &Component, contract: Contract) -> wasmtime::Result<PolicyPre> {
        let mut linker = Linker::new(&self.inner.engine);
        add_log(&mut linker)?;
        linker.define_unknown_imports_as_traps(component)?;
        PolicyPre::new(contract, linker.instantiate_pre(component)?)
    }

    /// Compiles and checks a mutator component (blocking).
    pub fn load_mutator_blocking(
        &self,
        name: &str,
        bytes: &[u8],
        limits: Option<Limits>,
    ) -> Result<WasmMutator, PluginError> {
        let inner = self.load(name, bytes, limits, World::PodMutator, MutatorPre::new)?;
        Ok(WasmMutator {
            inner: Arc::new(inner),
        })
    }

    /// [`Self::load_policy_blocking`] on a blocking thread.
    pub async fn load_policy(
        &self,
        name: &str,
        bytes: Arc<[u8]>,
        limits: Option<Limits>,
    ) -> Result<WasmPolicy, PluginError> {
        let (host, owned) = (self.clone(), name.to_string());
        tokio::task::spawn_blocking(move || host.load_policy_blocking(&owned, &bytes, limits))
            .await
            .map_err(|e| host_err(name, e))?
    }

    /// [`Self::load_mutator_blocking`] on a blocking thread.
    pub async fn load_mutator(
        &self,
        name: &str,
        bytes: Arc<[u8]>,
        limits: Option<Limits>,
    ) -> Result<WasmMutator, PluginError> {
        let (host, owned) = (self.clone(), name.to_string());
        tokio::task::spawn_blocking(move || host.load_mutator_blocking(&owned, &bytes, limits))
            .await
            .map_err(|e| host_err(name, e))?
    }

    fn loaded_core(
        &self,
        name: &str,
        hash: [u8; 32],
        limits: Option<Limits>,
        contract: Contract,
    ) -> LoadedCore {
        LoadedCore {
            contract,
            host: self.inner.clone(),
            name: name.into(),
            sha256: hex(&hash),
            limits: limits.unwrap_or(self.inner.config.limits),
            own_slots: Arc::new(tokio::sync::Semaphore::new(
                self.inner.config.max_concurrent_calls.div_ceil(2).max(1),
            )),
        }
    }
}

/// What a component declares (see [`PluginHost::inspect`]).
#[derive(Debug, Clone)]
pub struct ComponentInfo {
    pub sha256: String,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    pub compile_time: Duration,
}

/// What every loaded plugin shares, whatever its world.
struct LoadedCore {
    host: Arc<HostInner>,
    /// The contract version the component was built against, and is called in.
    contract: Contract,
    name: Arc<str>,
    sha256: String,
    limits: Limits,
    /// This plugin's calls at once: half the host's slots (at least one), so a plugin whose
    /// calls all run to their deadline leaves the other half to other plugins.
    own_slots: Arc<tokio::sync::Semaphore>,
}

struct Loaded<P> {
    core: LoadedCore,
    pre: P,
}

impl LoadedCore {
    /// A fresh Store for one call. `inline`: an inline attempt, interrupted at the second epoch
    /// tick from now instead of the plugin's deadline, with its logs held back.
    fn new_store(&self, inline: bool) -> Store<HostState> {
        let stderr = MemoryOutputPipe::new(STDERR_CAP);
        let mut wasi = WasiCtxBuilder::new();
        wasi.wall_clock(FrozenClock)
            .monotonic_clock(FrozenClock)
            .secure_random(wasmtime_wasi::Deterministic::new(vec![0x5a; 64]))
            .insecure_random(wasmtime_wasi::Deterministic::new(vec![0xa5; 64]))
            .insecure_random_seed(0)
            .max_random_size(RANDOM_CAP)
            .stderr(stderr.clone());
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_HANDLES);
        let state = HostState {
            wasi: wasi.build(),
            table,
            limiter: CapLimiter::new(self.limits.memory_bytes),
            plugin: self.name.clone(),
            logs_left: self.host.config.max_log_lines,
            held_logs: inline.then(Vec::new),
            stderr,
            _ticking: self.host.ticker.ticking(),
        };
        let mut store = Store::new(&self.host.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(HOST_COPY_CAP);
        store.set_max_component_handles(MAX_HANDLES);
        let tick = self.host.config.epoch_tick.as_nanos().max(1);
        // Round up, plus one: the current epoch may be about to end.
        let ticks = self.limits.deadline.as_nanos().div_ceil(tick) + 1;
        store.set_epoch_deadline(if inline {
            INLINE_TICKS
        } else {
            u64::try_from(ticks).unwrap_or(u64::MAX)
        });
        store
    }

    fn classify(&self, store: &Store<HostState>, error: wasmtime::Error) -> PluginError {
        let plugin = self.name.to_string();
        if store.data().limiter.hit {
            return PluginError::MemoryCap {
                plugin,
                cap_bytes: self.limits.memory_bytes,
            };
        }
        if let Some(denied) = error.downcast_ref::<Denied>() {
            return PluginError::Trap {
                plugin,
                message: denied.to_string(),
            };
        }
        let message = match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => {
                return PluginError::Timeout {
                    plugin,
                    deadline: self.limits.deadline,
                };
            }
            Some(trap) => {
                let said = String::from_utf8_lossy(&store.data().stderr.contents())
                    .trim()
                    .to_string();
                if said.is_empty() {
                    trap.to_string()
                } else {
                    format!("{trap} (stderr: {said})")
                }
            }
            // Includes wasmtime's "too much data is being copied between the host and the
            // guest" when a result or log line passes `HOST_COPY_CAP`.
            None => one_line(&error),
        };
        PluginError::Trap {
            plugin,
            message: capped(message, ERROR_TEXT_CAP),
        }
    }

    /// The plugin's own refusal; its text is cut (a `no-fit` text reaches status and Events).
    fn refused(&self, e: PolicyError) -> PluginError {
        let cap = |m: String| capped(m, ERROR_TEXT_CAP);
        PluginError::Refused {
            plugin: self.name.to_string(),
            error: match e {
                PolicyError::NoFit(m) => PolicyError::NoFit(cap(m)),
                PolicyError::InvalidInput(m) => PolicyError::InvalidInput(cap(m)),
                PolicyError::Internal(m) => PolicyError::Internal(cap(m)),
            },
        }
    }

    fn describe(&self) -> String {
        format!("{}@{}", self.name, &self.sha256[..12])
    }
}

#[cfg(test)]
mod tests;
