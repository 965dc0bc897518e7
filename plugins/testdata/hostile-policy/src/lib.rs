//! Test-only policy that misbehaves when the job key's name says so; any other key is bin-packed
//! normally, so the same component also serves good calls. Modes (`ns/<mode>`):
//! - `loop`: a busy loop; `recurse`: stack overflow; `trap`: a panic; `oom`: a 1 GiB vector;
//! - `sleep`: `std::thread::sleep(30 s)` (WASI monotonic-clock subscribe + poll);
//! - `socket`: opens a TCP connection and a UDP socket (WASI sockets);
//! - `huge-no-fit`: a 2 MiB `no-fit` text; `huge-answer`: a 2 Mi-entry answer (8 MiB);
//! - `log-flood`: 200 log lines of 64 KiB with 64 fields of 1 KiB keys and values, then a good
//!   answer; `log-amplify`: one log line whose 64 fields all alias one 512 KiB string, so the
//!   host would copy 64 MiB (under wasmtime's default cap of 128 MiB) out of 512 KiB of guest
//!   memory;
//! - `unknown-node`, `wrong-count`, `not-ready`: answers the host must refuse;
//! - `huge-reason`: a good answer with a 1 MiB reason (under the host's copy cap, so it is cut, not refused); `control-reason`: a good answer whose
//!   reason carries newlines, a NUL, terminal escapes and a bidi override.
//!
//! `preempt` (contract 0.5.0) misbehaves by the same key: `evict-out-of-range` evicts a job
//! index past the candidates, `evict-twice` evicts the first candidate twice, `shrink-wrong-length`
//! shrinks it with no replica counts, `shrink-too-far` shrinks its every task to 0 replicas;
//! any other key preempts as the built-in bin-packing does.

use std::hint::black_box;
use std::mem::ManuallyDrop;
use std::time::Duration;

use diorch_plugin_sdk::log::{Level, log};
use diorch_plugin_sdk::{
    Job, JobAllocation, Node, NodeInfo, NodeView, PluginError, Policy, PolicyLogic, Preemption,
    Running, Shrink,
};
use diorch_policies::binpack::BinPack;

pub struct Hostile;

fn recurse(n: u64) -> u64 {
    if black_box(n) == u64::MAX {
        return 0;
    }
    black_box(recurse(n + 1)) + 1
}

fn log_flood() {
    let message = "m".repeat(64 << 10);
    let key = "k".repeat(1 << 10);
    let value = "v".repeat(1 << 10);
    let fields: Vec<(&str, &str)> = (0..64).map(|_| (key.as_str(), value.as_str())).collect();
    for _ in 0..200 {
        log(Level::Info, &message, &fields);
    }
}

fn log_amplify() {
    let mut big = ManuallyDrop::new("a".repeat(512 << 10));
    let (ptr, len, cap) = (big.as_mut_ptr(), big.len(), big.capacity());
    // 64 Strings sharing one buffer: never dropped (ManuallyDrop), so never freed twice.
    let alias = || unsafe { String::from_raw_parts(ptr, len, cap) };
    let fields = ManuallyDrop::new((0..64).map(|_| (alias(), alias())).collect::<Vec<_>>());
    diorch_plugin_sdk::policy_bindings::diorch::plugins::log::log(Level::Warn, "amplify", &fields);
}

impl Policy for Hostile {
    fn allocate(job: &Job, nodes: &[NodeView<'_>]) -> Result<Vec<u32>, PluginError> {
        let name = job.key.rsplit('/').next().unwrap_or_default();
        match name {
            "loop" => {
                let mut i = 0u64;
                loop {
                    i = black_box(i.wrapping_add(1));
                }
            }
            "oom" => {
                let v = vec![1u8; 1 << 30];
                Ok(vec![u32::from(black_box(v)[12345]); job.total_replicas()])
            }
            "trap" => panic!("hostile policy traps on purpose"),
            "recurse" => Ok(vec![recurse(0) as u32]),
            "sleep" => {
                std::thread::sleep(Duration::from_secs(30));
                BinPack.allocate(job, nodes)
            }
            "socket" => {
                let tcp = std::net::TcpStream::connect("10.0.0.1:443");
                let udp = std::net::UdpSocket::bind("0.0.0.0:0");
                Err(PluginError::Internal(format!(
                    "sockets: tcp {:?}, udp {:?}",
                    tcp.err(),
                    udp.err()
                )))
            }
            "huge-no-fit" => Err(PluginError::NoFit("no room ".repeat(256 << 10))),
            "huge-answer" => Ok(vec![0; 2 << 20]),
            "log-flood" => {
                log_flood();
                BinPack.allocate(job, nodes)
            }
            "log-amplify" => {
                log_amplify();
                BinPack.allocate(job, nodes)
            }
            "unknown-node" => Ok(vec![nodes.len() as u32 + 7; job.total_replicas()]),
            "wrong-count" => Ok(vec![0; job.total_replicas() + 1]),
            "not-ready" => {
                let i = nodes.iter().position(|n| !n.ready()).unwrap_or(0);
                Ok(vec![i as u32; job.total_replicas()])
            }
            _ => BinPack.allocate(job, nodes),
        }
    }

    fn explain_allocate(job: &Job, nodes: &[NodeView<'_>], answer: &[u32]) -> Option<String> {
        match job.key.rsplit('/').next().unwrap_or_default() {
            "huge-reason" => Some("why ".repeat(256 << 10)),
            "control-reason" => Some(
                "line one\nline two\r\0\u{1b}[31mred\u{1b}[0m \u{202e}desrever\u{7f} end".into(),
            ),
            _ => BinPack.explain_allocate(job, nodes, answer),
        }
    }

    fn optimize(
        jobs: &[Job],
        nodes: &[NodeView<'_>],
        previous: &[JobAllocation],
    ) -> Result<Vec<JobAllocation>, PluginError> {
        BinPack.optimize(jobs, nodes, previous)
    }

    fn preempt(
        job: &Job,
        candidates: &[Running],
        nodes: &[Node],
    ) -> Result<Option<Preemption>, PluginError> {
        let good = BinPack.preempt(job, candidates, nodes);
        // Where the job would go on a plain bin-pack of the nodes as they are (it may not fit:
        // the host refuses the shape before it looks at the room).
        let placed = good
            .as_ref()
            .map(|p| p.nodes.clone())
            .unwrap_or_else(|| vec![0; job.total_replicas()]);
        let bad = |shrinks: Vec<Shrink>, evictions: Vec<usize>| {
            Ok(Some(Preemption {
                nodes: placed.clone(),
                shrinks,
                evictions,
            }))
        };
        match job.key.rsplit('/').next().unwrap_or_default() {
            "evict-out-of-range" => bad(vec![], vec![candidates.len()]),
            "evict-twice" => bad(vec![], vec![0, 0]),
            "shrink-wrong-length" => bad(
                vec![Shrink {
                    job: 0,
                    replicas: vec![],
                }],
                vec![],
            ),
            "shrink-too-far" => bad(
                vec![Shrink {
                    job: 0,
                    replicas: vec![0; candidates.first().map_or(1, |c| c.job.tasks.len())],
                }],
                vec![],
            ),
            _ => Ok(good),
        }
    }
}

diorch_plugin_sdk::export_policy!(Hostile);
