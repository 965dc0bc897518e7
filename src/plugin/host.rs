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
    Job, JobAllocation, JobPlan, Node, PluginError, PodMutator, PolicyError, SchedulingPolicy,
    TaskContext, checks,
};

mod bindings {
    /// The current contract (`wit/plugins.wit`, 0.3.0).
    pub mod v3 {
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

mod columns;
mod records;

use bindings::v2::policy::diorch::plugins::{log as log_v2, types as wit_v2};
use bindings::v3::policy::diorch::plugins::{log as log_v3, types as wit};

/// The contract versions the host calls: the current one, and the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Contract {
    #[serde(rename = "0.3.0")]
    V3,
    #[serde(rename = "0.2.0")]
    V2,
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
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
        f.write_str(&self.at(Contract::V3))
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
        let mut cut = cap;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
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
            if version.starts_with("0.3.") {
                Some(Contract::V3)
            } else if version.starts_with("0.2.") {
                Some(Contract::V2)
            } else {
                None
            }
        })
}

/// The log import of both contract versions.
fn add_log(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
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
        let weak = engine.weak();
        let tick = config.epoch_tick;
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                // Ends with the last Engine clone, so hosts can come and go.
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(tick);
                }
            })
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
                config,
            }),
        })
    }

    pub fn config(&self) -> &HostConfig {
        &self.inner.config
    }

    /// Compiles (or finds in the memory or disk cache) a component; blocking, call off the
    /// async runtime.
    fn compile(&self, plugin: &str, bytes: &[u8]) -> Result<(Component, [u8; 32]), PluginError> {
        let hash: [u8; 32] = Sha256::digest(bytes).into();
        if let Some(c) = self.lock_cache().get(&hash) {
            return Ok((c.clone(), hash));
        }
        let component = match self.load_from_disk(&hash) {
            Some(c) => c,
            None => {
                let c = self.compile_bounded(plugin, bytes)?;
                self.save_to_disk(&hash, &c);
                c
            }
        };
        let mut cache = self.lock_cache();
        if cache.len() >= CACHE_CAP {
            cache.clear();
        }
        cache.insert(hash, component.clone());
        Ok((component, hash))
    }

    /// The time budget of compiling `len` bytes (see [`HostConfig::compile_timeout`]).
    pub fn compile_budget(&self, len: usize) -> Duration {
        let config = &self.inner.config;
        let mib = len.div_ceil(1 << 20) as u32;
        config
            .compile_timeout
            .saturating_add(config.compile_per_mib.saturating_mul(mib))
    }

    /// Where the compiled artifact of a component is indexed on disk: keyed by this engine's
    /// configuration (wasmtime's own compatibility hash: version, target, settings), so an
    /// upgrade or a changed setting never loads an artifact compiled for another engine.
    fn artifact_index(
        &self,
        hash: &[u8; 32],
    ) -> Option<(std::path::PathBuf, crate::oci::cache::BlobCache)> {
        use std::hash::{Hash as _, Hasher as _};
        let dir = self.inner.config.cache_dir.as_ref()?;
        let mut engine = std::collections::hash_map::DefaultHasher::new();
        self.inner
            .engine
            .precompile_compatibility_hash()
            .hash(&mut engine);
        let root = dir.join("compiled");
        let index = root
            .join("index")
            .join(format!("{:016x}", engine.finish()))
            .join(hex(hash));
        let blobs = crate::oci::cache::BlobCache::open(&root, COMPILED_CACHE_BUDGET).ok()?;
        Some((index, blobs))
    }

    /// A compiled artifact from the disk cache, verified against the digest its index names.
    fn load_from_disk(&self, hash: &[u8; 32]) -> Option<Component> {
        let (index, blobs) = self.artifact_index(hash)?;
        let digest: crate::oci::Digest =
            std::fs::read_to_string(&index).ok()?.trim().parse().ok()?;
        let artifact = blobs.get_blocking(digest, COMPILED_ARTIFACT_CAP)?;
        // SAFETY: wasmtime requires that deserialized bytes come from `serialize` of a
        // compatible engine. They do: the index is keyed by this engine's compatibility hash
        // and written only by `save_to_disk` below, and the bytes are read only if their sha256 is
        // the one recorded when this process or an earlier one serialized them (wasmtime
        // checks its own header and version too). Writing the cache folder needs the
        // operator's own identity, which could equally replace its binary.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(&self.inner.engine, &artifact) };
        match component {
            Ok(c) => {
                tracing::info!(sha256 = %hex(hash), "compiled component loaded from the disk cache");
                Some(c)
            }
            Err(e) => {
                tracing::warn!(error = %one_line(&e), "cached compiled component refused; compiling");
                let _ = std::fs::remove_file(&index);
                None
            }
        }
    }

    /// Keeps a compiled artifact on disk (best effort: the cache only saves work).
    fn save_to_disk(&self, hash: &[u8; 32], component: &Component) {
        let Some((index, blobs)) = self.artifact_index(hash) else {
            return;
        };
        let artifact = match component.serialize() {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %one_line(&e), "cannot serialize a compiled component");
                return;
            }
        };
        let digest = crate::oci::Digest::of(&artifact);
        let written = blobs.put_blocking(digest, &artifact).and_then(|()| {
            let parent = index.parent().unwrap_or(std::path::Path::new("."));
            std::fs::create_dir_all(parent)?;
            let tmp = index.with_extension(format!("{}.tmp", std::process::id()));
            std::fs::write(&tmp, digest.to_string())?;
            std::fs::rename(&tmp, &index)
        });
        if let Err(error) = written {
            tracing::warn!(%error, "cannot write a compiled component to the disk cache");
        }
    }

    /// Compiles `bytes` within the size cap and the compile budget (blocking). Compiles run one
    /// at a time (the compile gate): a caller waits for the running one, up to the budget of the
    /// largest component, and its own budget starts when its compile does. Cranelift runs on a
    /// thread of its own, which cannot be cancelled: one that outlives its budget finishes on
    /// its own (its work is bounded by the size cap) and its result is dropped; while
    /// [`MAX_COMPILES`] such threads are alive, further compiles are refused.
    fn compile_bounded(&self, plugin: &str, bytes: &[u8]) -> Result<Component, PluginError> {
        let refuse = |message: String| PluginError::LoadLimit {
            plugin: plugin.to_string(),
            message,
        };
        let cap = self.inner.config.max_component_bytes;
        if bytes.len() > cap {
            return Err(refuse(format!(
                "the component has {} bytes; at most {cap} are accepted",
                bytes.len()
            )));
        }
        let compiling = self.inner.compiling.clone();
        if compiling.fetch_add(1, Ordering::AcqRel) >= MAX_COMPILES {
            compiling.fetch_sub(1, Ordering::AcqRel);
            return Err(refuse(format!(
                "{MAX_COMPILES} compiles are still running (earlier ones past their timeout); \
                 try again later"
            )));
        }
        let (started_tx, started_rx) = std::sync::mpsc::sync_channel::<()>(1);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (engine, owned, gate) = (
            self.inner.engine.clone(),
            bytes.to_vec(),
            self.inner.compile_gate.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("wasm-compile".into())
            .spawn(move || {
                let _turn = gate
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                // The caller stopped waiting for its turn: do not compile for nobody.
                if started_tx.send(()).is_ok() {
                    let result = Component::new(&engine, &owned);
                    // The receiver is gone when the wait timed out: nothing to do.
                    let _ = tx.send(result);
                }
                compiling.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            self.inner.compiling.fetch_sub(1, Ordering::AcqRel);
            return Err(host_err(
                plugin,
                format!("cannot start a compile thread: {e}"),
            ));
        }
        let budget = self.compile_budget(bytes.len());
        let queue = budget
            .saturating_add(self.compile_budget(cap))
            .saturating_add(COMPILE_QUEUE_SLACK);
        if started_rx.recv_timeout(queue).is_err() {
            return Err(refuse(format!(
                "compiles are still running after {queue:?} of waiting for this one's turn \
                 (earlier ones past their timeout); try again later"
            )));
        }
        match rx.recv_timeout(budget) {
            Ok(result) => result.map_err(|e| PluginError::Compile {
                plugin: plugin.to_string(),
                message: capped(one_line(&e), ERROR_TEXT_CAP),
            }),
            Err(_) => Err(refuse(format!(
                "compiling the component took longer than {budget:?} ({} bytes)",
                bytes.len()
            ))),
        }
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Component>> {
        // A panic while holding this lock cannot leave the map inconsistent: recover it.
        self.inner
            .compiled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
        // The version its imports name first: a mutator's export has the same type in both,
        // so the type check alone would not tell which one it was built against.
        let (first, second) = match declared_contract(&self.inner.engine, &component) {
            Some(Contract::V2) => (Contract::V2, Contract::V3),
            _ => (Contract::V3, Contract::V2),
        };
        let (contract, pre) = match typed(first, pre.clone()) {
            Ok(typed) => (first, typed),
            Err(first_error) => match typed(second, pre) {
                Ok(typed) => (second, typed),
                // Reported against the current version: what a plugin author should build for.
                Err(second_error) => {
                    return Err(wrong(if first == Contract::V3 {
                        first_error
                    } else {
                        second_error
                    }));
                }
            },
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

/// A loaded scheduling-policy component. Cheap to clone.
#[derive(Clone)]
pub struct WasmPolicy {
    inner: Arc<LoadedPolicy>,
}

struct LoadedPolicy {
    core: LoadedCore,
    pre: PolicyPre,
    /// For inline attempts (WASI stubbed out); `None` when it could not be built.
    inline_pre: Option<PolicyPre>,
    /// Whether `allocate` is tried inline first (see its doc); cleared by an attempt that ran
    /// out of budget, set again by a fast call on the blocking pool.
    inline_ok: AtomicBool,
    /// `allocate` calls answered inline, and calls run on the blocking pool ([`CallPaths`]).
    inline_answers: AtomicU64,
    pooled_runs: AtomicU64,
}

/// A policy's typed pre-instance, in the contract version it was built against.
enum PolicyPre {
    V3(bindings::v3::policy::SchedulingPolicyPre<HostState>),
    V2(bindings::v2::policy::SchedulingPolicyPre<HostState>),
}

impl PolicyPre {
    fn new(
        contract: Contract,
        pre: wasmtime::component::InstancePre<HostState>,
    ) -> wasmtime::Result<PolicyPre> {
        Ok(match contract {
            Contract::V3 => PolicyPre::V3(bindings::v3::policy::SchedulingPolicyPre::new(pre)?),
            Contract::V2 => PolicyPre::V2(bindings::v2::policy::SchedulingPolicyPre::new(pre)?),
        })
    }

    /// The input of a call for `jobs` on `nodes`, in this version's layout.
    fn input(
        &self,
        plugin: &str,
        jobs: &[&Job],
        nodes: &[Node],
    ) -> Result<PolicyInput, PluginError> {
        Ok(match self {
            PolicyPre::V3(_) => PolicyInput::V3(columns::cluster(plugin, jobs, nodes)?),
            PolicyPre::V2(_) => PolicyInput::V2(records::cluster(plugin, jobs, nodes)?),
        })
    }

    /// One `allocate` call on a fresh instance in `store`.
    fn allocate(
        &self,
        store: &mut Store<HostState>,
        input: &PolicyInput,
    ) -> wasmtime::Result<Result<Vec<u32>, PolicyError>> {
        match (self, input) {
            (PolicyPre::V3(pre), PolicyInput::V3(c)) => pre
                .instantiate(&mut *store)?
                .call_allocate(&mut *store, c)
                .map(|r| r.map_err(PolicyError::from)),
            (PolicyPre::V2(pre), PolicyInput::V2(c)) => pre
                .instantiate(&mut *store)?
                .call_allocate(&mut *store, c)
                .map(|r| r.map_err(PolicyError::from)),
            _ => Err(mismatch()),
        }
    }

    /// One `optimize` call on a fresh instance in `store`.
    fn optimize(
        &self,
        store: &mut Store<HostState>,
        input: &PolicyInput,
        previous: &[JobAllocation],
    ) -> wasmtime::Result<Result<Vec<JobAllocation>, PolicyError>> {
        macro_rules! call {
            ($pre:expr, $c:expr, $wit:ident) => {{
                let previous: Vec<$wit::JobAllocation> = previous
                    .iter()
                    .map(|p| $wit::JobAllocation {
                        job: p.job,
                        nodes: p.nodes.clone(),
                    })
                    .collect();
                $pre.instantiate(&mut *store)?
                    .call_optimize(&mut *store, $c, &previous)
                    .map(|r| {
                        r.map(|plan| {
                            plan.into_iter()
                                .map(|p| JobAllocation {
                                    job: p.job,
                                    nodes: p.nodes,
                                })
                                .collect()
                        })
                        .map_err(PolicyError::from)
                    })
            }};
        }
        match (self, input) {
            (PolicyPre::V3(pre), PolicyInput::V3(c)) => call!(pre, c, wit),
            (PolicyPre::V2(pre), PolicyInput::V2(c)) => call!(pre, c, wit_v2),
            _ => Err(mismatch()),
        }
    }
}

/// A policy call's input, in the layout of the contract version it is for.
// One lives on the stack per call, never in a collection: boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
enum PolicyInput {
    V3(wit::Cluster),
    V2(wit_v2::Cluster),
}

/// An input built for one contract version passed to the other: inputs are built by the same
/// `PolicyPre` that calls them (`PolicyPre::input`), and a policy's inline and pool pre-instances
/// are of one version, so this is a host bug, reported as a host error rather than a panic.
fn mismatch() -> wasmtime::Error {
    wasmtime::Error::msg("host bug: a policy input of another contract version")
}

macro_rules! refusal {
    ($wit:ident) => {
        impl From<$wit::Error> for PolicyError {
            fn from(e: $wit::Error) -> PolicyError {
                match e {
                    $wit::Error::NoFit(m) => PolicyError::NoFit(m),
                    $wit::Error::InvalidInput(m) => PolicyError::InvalidInput(m),
                    $wit::Error::Internal(m) => PolicyError::Internal(m),
                }
            }
        }
    };
}

refusal!(wit);
refusal!(wit_v2);

/// A mutator's typed pre-instance, in the contract version it was built against.
enum MutatorPre {
    V3(bindings::v3::mutator::PodMutatorPre<HostState>),
    V2(bindings::v2::mutator::PodMutatorPre<HostState>),
}

impl MutatorPre {
    fn new(
        contract: Contract,
        pre: wasmtime::component::InstancePre<HostState>,
    ) -> wasmtime::Result<MutatorPre> {
        Ok(match contract {
            Contract::V3 => MutatorPre::V3(bindings::v3::mutator::PodMutatorPre::new(pre)?),
            Contract::V2 => MutatorPre::V2(bindings::v2::mutator::PodMutatorPre::new(pre)?),
        })
    }

    /// One `mutate` call on a fresh instance in `store`.
    fn mutate(
        &self,
        store: &mut Store<HostState>,
        ctx: &TaskContext,
        pod_json: &str,
    ) -> wasmtime::Result<Result<String, PolicyError>> {
        // The task context has the same fields in both versions.
        macro_rules! call {
            ($pre:expr, $wit:ident) => {{
                let ctx = $wit::TaskContext {
                    job_key: ctx.job_key.to_string(),
                    task_name: ctx.task_name.clone(),
                    task_type: ctx.task_type.clone(),
                    rank: ctx.rank,
                    task_rank: ctx.task_rank,
                    world_size: ctx.world_size,
                    node: ctx.node.clone(),
                    job_labels: ctx.job_labels.clone(),
                    job_annotations: ctx.job_annotations.clone(),
                    config: ctx.config.clone(),
                };
                $pre.instantiate(&mut *store)?
                    .call_mutate(&mut *store, &ctx, pod_json)
                    .map(|r| r.map_err(PolicyError::from))
            }};
        }
        match self {
            MutatorPre::V3(pre) => call!(pre, wit),
            MutatorPre::V2(pre) => call!(pre, wit_v2),
        }
    }
}

/// An inline attempt did not answer (out of budget, WASI, a trap): the call must run again on
/// the blocking pool with its full deadline.
struct OverBudget;

/// A loaded pod-mutator component. Cheap to clone.
#[derive(Clone)]
pub struct WasmMutator {
    inner: Arc<Loaded<MutatorPre>>,
}

impl WasmPolicy {
    pub fn name(&self) -> &str {
        &self.inner.core.name
    }

    /// Hex sha256 of the component bytes: the plugin's version.
    pub fn sha256(&self) -> &str {
        &self.inner.core.sha256
    }

    pub fn limits(&self) -> Limits {
        self.inner.core.limits
    }

    /// The contract version the component was built against.
    pub fn contract(&self) -> Contract {
        self.inner.core.contract
    }

    /// Raw call: node indices as the plugin returned them, unchecked (blocking).
    pub fn allocate_raw(&self, job: &Job, nodes: &[Node]) -> Result<Vec<u32>, PluginError> {
        let input = self.inner.pre.input(&self.inner.core.name, &[job], nodes)?;
        match self.allocate_call(&input, false) {
            Ok(answer) => answer,
            // Only inline attempts run out of budget.
            Err(OverBudget) => Err(host_err(
                &self.inner.core.name,
                "inline budget in a full call",
            )),
        }
    }

    /// One `allocate` call on a fresh instance; `inline` as in [`LoadedCore::new_store`].
    fn allocate_call(
        &self,
        input: &PolicyInput,
        inline: bool,
    ) -> Result<Result<Vec<u32>, PluginError>, OverBudget> {
        let core = &self.inner.core;
        let pre = match (inline, &self.inner.inline_pre) {
            (false, _) => &self.inner.pre,
            (true, Some(pre)) => pre,
            (true, None) => return Err(OverBudget),
        };
        let mut store = core.new_store(inline);
        let result = pre.allocate(&mut store, input);
        // Only an inline answer is used: any failure (out of budget, a WASI stub, a trap or the
        // memory cap, which the pool run reproduces with its stderr) is left to the pool run.
        if inline && result.is_err() {
            return Err(OverBudget);
        }
        store.data_mut().release_held_logs();
        Ok(match result {
            Ok(Ok(alloc)) => Ok(alloc),
            Ok(Err(e)) => Err(core.refused(e)),
            Err(e) => Err(core.classify(&store, e)),
        })
    }

    /// Checked allocation: node names, one per replica (blocking).
    pub fn allocate_blocking(&self, job: &Job, nodes: &[Node]) -> Result<Vec<String>, PluginError> {
        let alloc = self.allocate_raw(job, nodes)?;
        checks::allocation(&self.inner.core.name, job, nodes, &alloc)
    }

    /// Raw optimize: entries as the plugin returned them, unchecked (blocking).
    pub fn optimize_raw(
        &self,
        jobs: &[Job],
        nodes: &[Node],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PluginError> {
        let core = &self.inner.core;
        let jobs: Vec<&Job> = jobs.iter().collect();
        let input = self.inner.pre.input(&core.name, &jobs, nodes)?;
        let mut store = core.new_store(false);
        match self.inner.pre.optimize(&mut store, &input, previous) {
            Ok(Ok(plan)) => Ok(plan),
            Ok(Err(e)) => Err(core.refused(e)),
            Err(e) => Err(core.classify(&store, e)),
        }
    }

    /// Checked optimize (blocking).
    pub fn optimize_blocking(
        &self,
        jobs: &[Job],
        nodes: &[Node],
        previous: &[JobPlan],
    ) -> Result<Vec<JobPlan>, PluginError> {
        let previous = checks::plan_to_indices(jobs, nodes, previous);
        let plan = self.optimize_raw(jobs, nodes, &previous)?;
        checks::plan(&self.inner.core.name, jobs, nodes, &plan)
    }
}

/// How a policy's `allocate` calls were served so far (see [`WasmPolicy`]'s `allocate`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CallPaths {
    /// Answered by the inline attempt on the calling thread.
    pub inline: u64,
    /// Run on the blocking pool (no inline attempt, or one that did not answer).
    pub pooled: u64,
}

impl WasmPolicy {
    /// How `allocate` calls were served so far.
    pub fn call_paths(&self) -> CallPaths {
        CallPaths {
            inline: self.inner.inline_answers.load(Ordering::Relaxed),
            pooled: self.inner.pooled_runs.load(Ordering::Relaxed),
        }
    }
}

impl SchedulingPolicy for WasmPolicy {
    fn describe(&self) -> String {
        self.inner.core.describe()
    }

    /// Admissions are serialised and an `allocate` usually takes well under a millisecond, so
    /// it is first tried inline, on the calling thread, with a budget of one to two epoch ticks
    /// ([`INLINE_TICKS`]) and WASI stubbed out: a hop to the blocking pool and back (two thread wake-ups, each waiting for a
    /// core on a busy machine) cost the placement bench ~8 % over the built-in policy, more than
    /// the call. An attempt that does not answer (out of budget, WASI, a trap) is thrown away
    /// (calls are deterministic and isolated, so nothing of it is observable; its logs were held
    /// back) and the call runs on the blocking pool with its full deadline; later calls go there
    /// too until one is fast there again. So a plugin holds an async worker for at most about
    /// two ticks (`HostConfig::epoch_tick`, 5 ms).
    fn allocate(
        &self,
        job: Arc<Job>,
        nodes: Arc<[Node]>,
    ) -> BoxFuture<'static, Result<Vec<String>, PluginError>> {
        let this = self.clone();
        let slots = self.inner.core.slots();
        async move {
            let core = &this.inner.core;
            let _slots = slots.await?;
            if this.inner.inline_ok.load(Ordering::Relaxed) {
                let input = this.inner.pre.input(&core.name, &[&job], &nodes)?;
                match this.allocate_call(&input, true) {
                    Ok(answer) => {
                        this.inner.inline_answers.fetch_add(1, Ordering::Relaxed);
                        return checks::allocation(&core.name, &job, &nodes, &answer?);
                    }
                    Err(OverBudget) => this.inner.inline_ok.store(false, Ordering::Relaxed),
                }
            }
            this.inner.pooled_runs.fetch_add(1, Ordering::Relaxed);
            let pooled = this.clone();
            tokio::task::spawn_blocking(move || {
                let started = std::time::Instant::now();
                let answer = pooled.allocate_blocking(&job, &nodes);
                if pooled.inner.inline_pre.is_some()
                    && started.elapsed() < pooled.inner.core.host.config.epoch_tick / 5
                {
                    pooled.inner.inline_ok.store(true, Ordering::Relaxed);
                }
                answer
            })
            .await
            .unwrap_or_else(|e| Err(host_err(&core.name, e)))
        }
        .boxed()
    }

    fn optimize(
        &self,
        jobs: Arc<[Job]>,
        nodes: Arc<[Node]>,
        previous: Vec<JobPlan>,
    ) -> BoxFuture<'static, Result<Vec<JobPlan>, PluginError>> {
        let this = self.clone();
        blocking(&self.inner.core, move || {
            this.optimize_blocking(&jobs, &nodes, &previous)
        })
    }
}

/// Runs Wasm on tokio's blocking pool so reconciles and HTTP never wait behind a plugin, at
/// most `max_concurrent_calls` at once.
fn blocking<T: Send + 'static>(
    core: &LoadedCore,
    f: impl FnOnce() -> Result<T, PluginError> + Send + 'static,
) -> BoxFuture<'static, Result<T, PluginError>> {
    let slots = core.slots();
    let plugin = core.name.clone();
    async move {
        let _slots = slots.await?;
        tokio::task::spawn_blocking(f)
            .await
            .unwrap_or_else(|e| Err(host_err(&plugin, e)))
    }
    .boxed()
}

impl WasmMutator {
    pub fn name(&self) -> &str {
        &self.inner.core.name
    }

    pub fn sha256(&self) -> &str {
        &self.inner.core.sha256
    }

    pub fn limits(&self) -> Limits {
        self.inner.core.limits
    }

    /// The contract version the component was built against.
    pub fn contract(&self) -> Contract {
        self.inner.core.contract
    }

    /// Raw call on JSON text, unchecked (blocking).
    pub fn mutate_raw(&self, ctx: &TaskContext, pod_json: &str) -> Result<String, PluginError> {
        let core = &self.inner.core;
        let mut store = core.new_store(false);
        let result = self.inner.pre.mutate(&mut store, ctx, pod_json);
        match result {
            Ok(Ok(out)) if out.len() > MUTATOR_OUTPUT_CAP => Err(PluginError::MalformedOutput {
                plugin: core.name.to_string(),
                message: format!(
                    "returned a pod of {} bytes; at most {MUTATOR_OUTPUT_CAP} are accepted",
                    out.len()
                ),
            }),
            Ok(Ok(out)) => Ok(out),
            Ok(Err(e)) => Err(core.refused(e)),
            Err(e) => Err(core.classify(&store, e)),
        }
    }

    /// Checked mutation (blocking): the result keeps everything the operator relies on.
    pub fn mutate_blocking(&self, ctx: &TaskContext, pod: &Pod) -> Result<Pod, PluginError> {
        let name = &self.inner.core.name;
        let input = serde_json::to_value(pod).map_err(|e| host_err(name, e))?;
        let out = self.mutate_raw(ctx, &input.to_string())?;
        checks::mutation(name, &input, &out)
    }
}

impl PodMutator for WasmMutator {
    fn describe(&self) -> String {
        self.inner.core.describe()
    }

    fn mutate(&self, ctx: TaskContext, pod: Pod) -> BoxFuture<'static, Result<Pod, PluginError>> {
        let this = self.clone();
        blocking(&self.inner.core, move || this.mutate_blocking(&ctx, &pod))
    }
}

#[cfg(test)]
mod tests;
