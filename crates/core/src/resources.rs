//! Kubernetes resource arithmetic: quantities, what a pod asks of its node (as kube-scheduler
//! computes it) and what a node offers. Shared by the allocator and the sandbox's simulated
//! scheduler, so both count capacity the same way.
//!
//! Owns no state and does no I/O.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
/// The GPU resource DI-engine jobs ask for.
pub const GPU: &str = "nvidia.com/gpu";

/// kube-scheduler's scoring defaults for containers that request nothing (100m CPU, 200 MiB).
pub const NON_ZERO_CPU_MILLI: i128 = 100;
pub const NON_ZERO_MEMORY_MILLI: i128 = 200 * 1024 * 1024 * 1000;

/// Amounts per resource name, in milli-units (1 CPU = 1000, 1 byte = 1000), rounded up as
/// Kubernetes' `MilliValue` does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources(pub BTreeMap<String, i128>);

impl Resources {
    /// Parses a ResourceList. Unparsable quantities are skipped: the API server validates them.
    pub fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Self {
        let map = list
            .into_iter()
            .flatten()
            .filter_map(|(k, q)| parse_quantity(&q.0).map(|v| (k.clone(), v)))
            .collect();
        Resources(map)
    }

    pub fn get(&self, name: &str) -> i128 {
        self.0.get(name).copied().unwrap_or(0)
    }

    pub fn add(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            *self.0.entry(k.clone()).or_insert(0) += v;
        }
    }

    pub fn sub(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            *self.0.entry(k.clone()).or_insert(0) -= v;
        }
    }

    fn max_with(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            let e = self.0.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }
}

/// Parses a Kubernetes quantity (`500m`, `2`, `1.5Gi`, `1e3`, `128Mi`) into milli-units,
/// rounding up. `None` when it is not a valid quantity or does not fit.
pub fn parse_quantity(s: &str) -> Option<i128> {
    let s = s.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(num_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let digits = format!("{int_part}{frac_part}");
    let mantissa: i128 = digits.parse().ok()?;
    // value = mantissa * 10^-frac * 2^bin * 10^dec
    let (bin, dec): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        exp => {
            let e = exp.strip_prefix(['e', 'E'])?;
            (0, e.parse().ok()?)
        }
    };
    let frac_digits = i32::try_from(frac_part.len()).ok()?;
    // Milli-units add 3 to the decimal exponent.
    let exp10 = dec + 3 - frac_digits;
    let mut num = mantissa.checked_mul(1i128.checked_shl(bin)?)?;
    let mut den: i128 = 1;
    if exp10 >= 0 {
        num = num.checked_mul(10i128.checked_pow(exp10.unsigned_abs())?)?;
    } else {
        den = 10i128.checked_pow(exp10.unsigned_abs())?;
    }
    let value = (num + den - 1) / den;
    Some(if negative { -value } else { value })
}

/// The parts of a container that count toward its pod's requests.
#[derive(Clone, Copy, Debug, Default)]
pub struct ContainerShape<'a> {
    pub resources: Option<&'a ResourceRequirements>,
    /// `Always` marks a sidecar init container.
    pub restart_policy: Option<&'a str>,
}

impl<'a> From<&'a Container> for ContainerShape<'a> {
    fn from(c: &'a Container) -> Self {
        ContainerShape {
            resources: c.resources.as_ref(),
            restart_policy: c.restart_policy.as_deref(),
        }
    }
}

/// One container's requests: limits stand in for requests that are not set, as API defaulting does.
fn container_requests(c: ContainerShape<'_>, non_zero: bool) -> Resources {
    let res = c.resources;
    let mut out = Resources::from_list(res.and_then(|r| r.requests.as_ref()));
    for (k, v) in Resources::from_list(res.and_then(|r| r.limits.as_ref())).0 {
        out.0.entry(k).or_insert(v);
    }
    if non_zero {
        out.0.entry(CPU.to_string()).or_insert(NON_ZERO_CPU_MILLI);
        out.0
            .entry(MEMORY.to_string())
            .or_insert(NON_ZERO_MEMORY_MILLI);
    }
    out
}

/// What a pod asks of its node, as kube-scheduler computes it: the larger of the sum of its
/// containers (plus sidecars) and each init container (plus the sidecars started before it),
/// plus the pod overhead. `non_zero` applies the scoring defaults to containers that request
/// no CPU or memory.
pub fn requests<'a>(
    containers: impl IntoIterator<Item = ContainerShape<'a>>,
    init_containers: impl IntoIterator<Item = ContainerShape<'a>>,
    overhead: Option<&BTreeMap<String, Quantity>>,
    non_zero: bool,
) -> Resources {
    let mut total = Resources::default();
    for c in containers {
        total.add(&container_requests(c, non_zero));
    }
    let mut sidecars = Resources::default();
    let mut init_max = Resources::default();
    for c in init_containers {
        let sidecar = c.restart_policy == Some("Always");
        let mut req = container_requests(c, non_zero);
        if sidecar {
            // A sidecar keeps running next to the app containers and later init containers.
            total.add(&req);
            sidecars.add(&req);
            req = sidecars.clone();
        } else {
            req.add(&sidecars);
        }
        init_max.max_with(&req);
    }
    total.max_with(&init_max);
    if let Some(overhead) = overhead {
        total.add(&Resources::from_list(Some(overhead)));
    }
    total
}

/// [`requests`] of a pod spec (e.g. a task's template).
pub fn pod_spec_requests(spec: &PodSpec, non_zero: bool) -> Resources {
    requests(
        spec.containers.iter().map(ContainerShape::from),
        spec.init_containers
            .iter()
            .flatten()
            .map(ContainerShape::from),
        spec.overhead.as_ref(),
        non_zero,
    )
}

/// [`requests`] of a pod.
pub fn pod_requests(pod: &Pod, non_zero: bool) -> Resources {
    pod.spec
        .as_ref()
        .map(|spec| pod_spec_requests(spec, non_zero))
        .unwrap_or_default()
}

/// Node allocatable (falling back to capacity) as resources.
pub fn node_allocatable(node: &Node) -> Resources {
    let status = node.status.as_ref();
    let list = status
        .and_then(|s| s.allocatable.as_ref())
        .or_else(|| status.and_then(|s| s.capacity.as_ref()));
    Resources::from_list(list)
}
