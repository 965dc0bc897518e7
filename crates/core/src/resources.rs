//! Kubernetes resource arithmetic: quantities, what a pod asks of its node (as kube-scheduler
//! computes it) and what a node offers. Shared by the allocator and the sandbox's simulated
//! scheduler, so both count capacity the same way.
//!
//! Owns no state and does no I/O.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
/// The GPU resource DI-engine jobs ask for.
pub const GPU: &str = "nvidia.com/gpu";
/// The pod count a node allows, counted like a resource (each pod takes 1).
pub const PODS: &str = "pods";

/// kube-scheduler's scoring defaults for containers that request nothing (100m CPU, 200 MiB).
pub const NON_ZERO_CPU_MILLI: i128 = 100;
pub const NON_ZERO_MEMORY_MILLI: i128 = 200 * 1024 * 1024 * 1000;

/// Amounts per resource name, in milli-units (1 CPU = 1000, 1 byte = 1000), rounded up as
/// Kubernetes' `MilliValue` does.
///
/// Sorted by name, one entry per name, held in a vector of exactly its entries: the allocator
/// keeps one of these per counted pod, and a `BTreeMap` leaf is ~450 bytes however few names
/// it holds. The common names are not allocated at all (see [`ResourceName`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources(Vec<(ResourceName, i128)>);

/// A resource name: the names every pod asks for are borrowed statics, others owned.
pub type ResourceName = Cow<'static, str>;

/// Names worth not allocating: what nearly every pod and node lists.
const COMMON_NAMES: [&str; 6] = [CPU, MEMORY, GPU, PODS, "ephemeral-storage", "hugepages-2Mi"];

/// `name` as a [`ResourceName`], borrowed when it is a common one.
pub fn resource_name(name: &str) -> ResourceName {
    match COMMON_NAMES.iter().find(|n| **n == name) {
        Some(n) => Cow::Borrowed(n),
        None => Cow::Owned(name.to_string()),
    }
}

impl Resources {
    /// Parses a ResourceList. Unparsable quantities are skipped: the API server validates them.
    pub fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Self {
        // A ResourceList is a sorted map already, so the entries come sorted and unique.
        let mut r = Resources(
            list.into_iter()
                .flatten()
                .filter_map(|(k, q)| parse_quantity(&q.0).map(|v| (resource_name(k), v)))
                .collect(),
        );
        r.shrink_to_fit();
        r
    }

    /// Drops spare room (for values kept long, one per pod).
    pub fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit();
    }

    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_ref().cmp(name))
    }

    pub fn get(&self, name: &str) -> i128 {
        self.find(name).map_or(0, |i| self.0[i].1)
    }

    /// The amount of `name`, if it is listed (also when it is zero).
    pub fn amount(&self, name: &str) -> Option<i128> {
        self.find(name).ok().map(|i| self.0[i].1)
    }

    /// Sets `name` to `value`.
    pub fn set(&mut self, name: &str, value: i128) {
        *self.slot(name) = value;
    }

    /// Sets `name` to `value` unless it is listed already.
    pub fn set_default(&mut self, name: &str, value: i128) {
        if let Err(i) = self.find(name) {
            self.0.insert(i, (resource_name(name), value));
        }
    }

    /// The amount of `name`, listed as zero first if it is not.
    fn slot(&mut self, name: &str) -> &mut i128 {
        let i = match self.find(name) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (resource_name(name), 0));
                i
            }
        };
        &mut self.0[i].1
    }

    /// Names and amounts, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i128)> + '_ {
        self.0.iter().map(|(k, v)| (k.as_ref(), *v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Drops the names whose amount is zero.
    pub fn retain_nonzero(&mut self) {
        self.0.retain(|(_, v)| *v != 0);
    }

    pub fn add(&mut self, other: &Resources) {
        self.combine(other, |a, b| a + b);
    }

    pub fn sub(&mut self, other: &Resources) {
        self.combine(other, |a, b| a - b);
    }

    fn max_with(&mut self, other: &Resources) {
        self.combine(other, i128::max);
    }

    /// Sets each of `other`'s names to `f(own amount or 0, other's amount)`.
    fn combine(&mut self, other: &Resources, f: impl Fn(i128, i128) -> i128) {
        // In place when every name is listed already: the common case (a node's sum gaining a
        // pod that asks for the same resources).
        if other.0.iter().all(|(k, _)| self.find(k).is_ok()) {
            for (k, v) in other.iter() {
                if let Ok(i) = self.find(k) {
                    let e = &mut self.0[i].1;
                    *e = f(*e, v);
                }
            }
            return;
        }
        // Else one linear merge of the two sorted lists: inserting name by name would move
        // the tail each time, quadratic in a pod that lists thousands of names.
        let mut out = Vec::with_capacity(self.0.len() + other.0.len());
        let mut own = std::mem::take(&mut self.0).into_iter().peekable();
        let mut theirs = other.0.iter().peekable();
        loop {
            let order = match (own.peek(), theirs.peek()) {
                (Some((a, _)), Some((b, _))) => a.as_ref().cmp(b.as_ref()),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => break,
            };
            match order {
                std::cmp::Ordering::Less => out.extend(own.next()),
                std::cmp::Ordering::Greater => {
                    out.extend(theirs.next().map(|(k, v)| (k.clone(), f(0, *v))));
                }
                std::cmp::Ordering::Equal => {
                    if let (Some((k, a)), Some((_, b))) = (own.next(), theirs.next()) {
                        out.push((k, f(a, *b)));
                    }
                }
            }
        }
        self.0 = out;
    }
}

/// Later entries win, as collecting into a map does.
impl<S: AsRef<str>> FromIterator<(S, i128)> for Resources {
    fn from_iter<I: IntoIterator<Item = (S, i128)>>(iter: I) -> Resources {
        let mut r = Resources::default();
        for (k, v) in iter {
            r.set(k.as_ref(), v);
        }
        r
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
    for (k, v) in Resources::from_list(res.and_then(|r| r.limits.as_ref())).iter() {
        out.set_default(k, v);
    }
    if non_zero {
        out.set_default(CPU, NON_ZERO_CPU_MILLI);
        out.set_default(MEMORY, NON_ZERO_MEMORY_MILLI);
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A few names, common and not, so operations meet the same names often.
    fn name() -> impl Strategy<Value = String> {
        prop::sample::select(vec![CPU, MEMORY, GPU, PODS, "example.com/fpga", "a", "zz"])
            .prop_map(str::to_string)
    }

    #[derive(Clone, Debug)]
    enum Op {
        Set(String, i128),
        SetDefault(String, i128),
        Add(Vec<(String, i128)>),
        Sub(Vec<(String, i128)>),
        Max(Vec<(String, i128)>),
        RetainNonzero,
    }

    fn op() -> impl Strategy<Value = Op> {
        let list = || prop::collection::vec((name(), -5i128..5), 0..4);
        prop_oneof![
            (name(), -5i128..5).prop_map(|(n, v)| Op::Set(n, v)),
            (name(), -5i128..5).prop_map(|(n, v)| Op::SetDefault(n, v)),
            list().prop_map(Op::Add),
            list().prop_map(Op::Sub),
            list().prop_map(Op::Max),
            Just(Op::RetainNonzero),
        ]
    }

    proptest! {
        /// Every operation does what it does to a map of names, and the entries stay sorted
        /// and unique whatever order the names came in.
        #[test]
        fn resources_behave_as_a_sorted_map(ops in prop::collection::vec(op(), 0..24)) {
            let mut r = Resources::default();
            let mut model: BTreeMap<String, i128> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Set(n, v) => {
                        r.set(&n, v);
                        model.insert(n, v);
                    }
                    Op::SetDefault(n, v) => {
                        r.set_default(&n, v);
                        model.entry(n).or_insert(v);
                    }
                    Op::Add(list) => {
                        let other: Resources = list.iter().map(|(n, v)| (n, *v)).collect();
                        r.add(&other);
                        for (n, v) in other.iter() {
                            *model.entry(n.to_string()).or_insert(0) += v;
                        }
                    }
                    Op::Sub(list) => {
                        let other: Resources = list.iter().map(|(n, v)| (n, *v)).collect();
                        r.sub(&other);
                        for (n, v) in other.iter() {
                            *model.entry(n.to_string()).or_insert(0) -= v;
                        }
                    }
                    Op::Max(list) => {
                        let other: Resources = list.iter().map(|(n, v)| (n, *v)).collect();
                        r.max_with(&other);
                        for (n, v) in other.iter() {
                            let e = model.entry(n.to_string()).or_insert(0);
                            *e = (*e).max(v);
                        }
                    }
                    Op::RetainNonzero => {
                        r.retain_nonzero();
                        model.retain(|_, v| *v != 0);
                    }
                }
                let seen: Vec<(String, i128)> = r.iter().map(|(n, v)| (n.to_string(), v)).collect();
                let want: Vec<(String, i128)> = model.clone().into_iter().collect();
                prop_assert_eq!(seen, want);
                for n in ["cpu", "memory", "a", "missing"] {
                    prop_assert_eq!(r.get(n), model.get(n).copied().unwrap_or(0));
                    prop_assert_eq!(r.amount(n), model.get(n).copied());
                }
            }
            // Equal maps are equal resources, however they were built.
            let rebuilt: Resources = model.iter().rev().map(|(n, v)| (n, *v)).collect();
            prop_assert_eq!(rebuilt, r);
        }
    }

    /// A pod listing many names across containers costs a linear merge per container, not a
    /// shifting insert per name (the result is checked; the bound is the merge's, not a timer).
    #[test]
    fn adding_interleaved_long_lists_merges_them() {
        let odd: Resources = (0..20_000)
            .map(|i| (format!("x.io/r{:06}", 2 * i + 1), 1))
            .collect();
        let even: Resources = (0..20_000)
            .map(|i| (format!("x.io/r{:06}", 2 * i), 2))
            .collect();
        let mut total = odd.clone();
        total.add(&even);
        assert_eq!(total.len(), 40_000);
        assert!(total.0.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(total.get("x.io/r000000"), 2);
        assert_eq!(total.get("x.io/r000001"), 1);
        total.sub(&odd);
        assert_eq!(total.get("x.io/r000001"), 0);
        assert_eq!(total.get("x.io/r039998"), 2);
    }

    #[test]
    fn a_parsed_list_holds_just_its_entries_and_borrows_common_names() {
        let list: BTreeMap<String, Quantity> = [
            ("cpu", "500m"),
            ("memory", "1Gi"),
            ("example.com/fpga", "2"),
            ("bad", "x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect();
        let r = Resources::from_list(Some(&list));
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            [
                (CPU, 500),
                ("example.com/fpga", 2000),
                (MEMORY, 1024 * 1024 * 1024 * 1000)
            ]
        );
        assert_eq!(r.0.capacity(), r.len(), "no spare room kept per pod");
        assert!(matches!(r.0[0].0, Cow::Borrowed(_)));
        assert!(matches!(r.0[1].0, Cow::Owned(_)));
        assert_eq!(r.clone().0.capacity(), r.len());
    }
}
