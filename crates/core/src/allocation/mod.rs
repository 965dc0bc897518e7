//! The allocator's decisions, with no I/O: the book of held allocations and per-node usage
//! ([`book`]), which optimize results are applied ([`optimize`]), and the admission rules
//! ([`admit`]): a reservation answered again, what a policy's answer leads to, and why the
//! built-in policy decides instead; the re-plan's rules ([`replan`]), and how a shadow policy's
//! answer compares with the active one's ([`shadow`]).
//!
//! Owns: those rules and the plan a policy answers ([`JobPlan`]). Must not touch: policy calls,
//! locks or caches (the operator's allocator performs what these decide).

pub mod admit;
pub mod book;
pub mod optimize;
pub mod replan;
pub mod shadow;

/// A job's placement in a plan: node names in rank order (tasks in spec order, then local
/// rank), for the task replica counts `replicas` gives.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobPlan {
    /// `namespace/name`.
    pub job: String,
    pub nodes: Vec<String>,
    /// New replica count of each task in spec order, within its min/max (an elastic policy
    /// resizing the job); `None` keeps the job's counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Vec<u32>>,
    /// Why, in the policy's words (contract 0.4.0), sanitised; never compared when plans are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
