//! Preemption, as the allocator carries it out: when a job does not fit, the built-in policy
//! may take room from running preemptible jobs of lower priority (`--preemption`). The victim
//! choice is `diorch_policies::preempt`'s; this module says who may be a victim at all (the
//! rules no policy answer can bend: lower priority, preemptible, placed and confirmed, nothing
//! in flight, out of its cool-down, and for an eviction past its minimum run time), reserves
//! the room for the job at once (so two urgent jobs never take the same room), and hands each
//! victim its shrink or eviction through the controller.
//!
//! Owns: the ledger's evictions and cool-downs. Must not touch: the planner's handling of a
//! preempted job (core's `planner`), the victim choice (`diorch_policies`).

use std::time::Instant;

use diorch_core::api::{DIJob, Phase};
use diorch_core::placement::{Admission, Preempted, Preemption as Action, SlotNodes, Why};
use diorch_core::planner::{MAX_MESSAGE_BYTES, clip, time_in_phase};
use diorch_policies::preempt::{self as choice, Running};

use super::*;

/// What a victim's cached spec says, read without decoding its pod templates.
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    preemptible: bool,
}

/// Seconds of work evicting `job` loses: since its last reported checkpoint, but never more
/// than its pods have run (`run_seconds`), whatever the report said; a checkpoint "in the
/// future" loses nothing, which only makes the job itself the likelier victim.
pub(super) fn lost_seconds(job: &DIJob, run_seconds: u64, now: jiff::Timestamp) -> u64 {
    let Some(at) = job
        .status
        .as_ref()
        .and_then(|s| s.last_checkpoint_time.as_ref())
    else {
        return run_seconds;
    };
    let since = u64::try_from(now.duration_since(at.0).as_secs()).unwrap_or(0);
    since.min(run_seconds)
}

/// Seconds since `job`'s last reported checkpoint, bounded by its run as [`lost_seconds`] is;
/// `None` when it never reported one (what a policy plugin is told, contract 0.5.0).
pub(super) fn checkpoint_age(job: &DIJob, run_seconds: u64, now: jiff::Timestamp) -> Option<u64> {
    job.status.as_ref()?.last_checkpoint_time.as_ref()?;
    Some(lost_seconds(job, run_seconds, now))
}

/// A victim offered to the policy, with what carrying out its part needs.
struct Offered {
    key: ObjectKey,
    job: DIJob,
}

impl Allocator {
    /// Room for `job`, which does not fit on `nodes` (the built-in policy said so), taken from
    /// lower-priority jobs; `None` when preemption is off or none lets it start at once.
    pub(super) fn preempt(
        &self,
        ledger: &mut Ledger,
        job: &DIJob,
        model: &plugin::Job,
        nodes: &[plugin::Node],
        fallback: Option<String>,
    ) -> Option<Admission> {
        let mode = match self.settings.preemption {
            Preemption::Off => return None,
            Preemption::Evict => choice::Mode::Evict,
            Preemption::Shrink => choice::Mode::Shrink,
        };
        let key = job_key(job);
        let (offered, running, held_back) = self.offer(ledger, &key, model, nodes);
        tracing::debug!(job = %key, candidates = running.len(),
            may_shrink = running.iter().filter(|r| r.may_shrink).count(),
            may_evict = running.iter().filter(|r| r.may_evict).count(), held_back,
            "the job does not fit; looking for room to take");
        let builtin = self.policies.builtin();
        let by = Checked::builtin(builtin).by().to_string();
        let plan = if running.is_empty() {
            None
        } else {
            builtin.preempt(model, &running, nodes, mode)
        };
        let placed = plan.and_then(|plan| {
            self.carry_out(
                ledger,
                job,
                model,
                nodes,
                &offered,
                &running,
                plan,
                &by,
                fallback,
                Why::default(),
            )
        });
        let later = held_back || running.iter().any(|r| !r.may_evict || !r.may_shrink);
        if placed.is_none() && later {
            // Victims may become allowed (cool-downs, minimum run times) without anything
            // freeing: the next re-plan asks again.
            ledger.preempt_later.insert(key);
        } else {
            ledger.preempt_later.remove(&key);
        }
        placed
    }

    /// Room for `job`, which a policy plugin's `allocate` found no room for, as the plugin's
    /// `preempt` answers (contract 0.5.0; older components answer none at once). The call is
    /// made without the ledger's lock; an answer made on a ledger that changed meanwhile is not
    /// carried out, and the job is asked again at once. Returns the guard it holds again.
    pub(super) async fn preempt_by_plugin<'a>(
        &'a self,
        ledger: tokio::sync::MutexGuard<'a, Ledger>,
        job: &DIJob,
        policy: &Checked<Arc<dyn SchedulingPolicy>>,
        model: &Arc<plugin::Job>,
        nodes: &Arc<[plugin::Node]>,
        why: &Why,
    ) -> (tokio::sync::MutexGuard<'a, Ledger>, Option<Admission>) {
        let evict_only = match self.settings.preemption {
            Preemption::Off => return (ledger, None),
            Preemption::Evict => true,
            Preemption::Shrink => false,
        };
        let key = job_key(job);
        let (offered, mut running, held_back) = self.offer(&ledger, &key, model, nodes);
        if evict_only {
            // The contract has no mode: a candidate that may not shrink is one only evicted.
            for r in &mut running {
                r.may_shrink = false;
            }
        }
        let mut ledger = ledger;
        let later = held_back || running.iter().any(|r| !r.may_evict || !r.may_shrink);
        if running.is_empty() {
            if later {
                ledger.preempt_later.insert(key);
            }
            return (ledger, None);
        }
        let version = ledger.book.version();
        drop(ledger);
        let by = policy.by().to_string();
        let answer = policy
            .preempt(model.clone(), running.clone().into(), nodes.clone())
            .await;
        let mut ledger = self.ledger.lock().await;
        let answer = match answer {
            Ok(Some(answer)) => answer,
            Ok(None) => {
                if later {
                    ledger.preempt_later.insert(key);
                }
                return (ledger, None);
            }
            Err(e) => {
                tracing::warn!(job = %key, policy = %by, reason = e.reason(),
                    error = %clip(&e.to_string(), MAX_MESSAGE_BYTES),
                    "the policy's preemption failed; the job waits");
                return (ledger, None);
            }
        };
        if ledger.book.version() != version {
            tracing::debug!(job = %key, policy = %by,
                "the cluster changed during the preempt call; asking again");
            let _ = self.retry.unbounded_send(key);
            return (ledger, None);
        }
        let index = view::node_index(nodes);
        let Some(plan_nodes) = answer
            .nodes
            .iter()
            .map(|n| index.get(n.as_str()).copied())
            .collect::<Option<Vec<u32>>>()
        else {
            return (ledger, None);
        };
        let plan = choice::Preemption {
            nodes: plan_nodes,
            shrinks: answer
                .shrinks
                .into_iter()
                .map(|(job, replicas)| choice::Shrink { job, replicas })
                .collect(),
            evictions: answer.evictions,
        };
        let policy_why = Why {
            sha256: why.sha256.clone(),
            reason: answer.reason,
        };
        let placed = self.carry_out(
            &mut ledger,
            job,
            model,
            nodes,
            &offered,
            &running,
            plan,
            &by,
            None,
            policy_why,
        );
        if placed.is_none() && later {
            ledger.preempt_later.insert(key);
        }
        (ledger, placed)
    }

    /// Asks the jobs a preemption could not serve yet again (after each re-plan).
    pub(super) async fn preempt_again(&self) {
        let keys: Vec<ObjectKey> = {
            let mut ledger = self.ledger.lock().await;
            ledger.preempt_later.drain().collect()
        };
        for key in keys {
            let _ = self.retry.unbounded_send(key);
        }
    }

    /// The running jobs `key` may take room from, as the policy sees them (`running`) and as
    /// carrying it out needs them (`offered`), index for index; and whether a job of lower
    /// priority was held back by something that passes (in flight, cooling down).
    fn offer(
        &self,
        ledger: &Ledger,
        key: &ObjectKey,
        model: &plugin::Job,
        nodes: &[plugin::Node],
    ) -> (Vec<Offered>, Vec<Running>, bool) {
        let now = self.settings.clock.now();
        let wall = self.settings.clock.wall();
        let node_index = view::node_index(nodes);
        let mut offered: Vec<Offered> = Vec::new();
        let mut running: Vec<Running> = Vec::new();
        let mut held_back = false;
        // Only the jobs below this one, found from the ledger, not a pass over every job.
        let mut below: Vec<&ObjectKey> = ledger
            .priorities
            .iter()
            .filter(|(victim, p)| **p < model.priority && *victim != key)
            .map(|(victim, _)| victim)
            .collect();
        below.sort();
        for victim in below {
            let victim = victim.clone();
            if !ledger.book.get(&victim).is_some_and(|h| h.confirmed) {
                continue;
            }
            let reference = reflector::ObjectRef::new(&victim.name).within(&victim.namespace);
            let Some(cached) = self.jobs.get(&reference) else {
                continue;
            };
            let Ok(head) = serde_json::from_str::<Head>(cached.spec.get()) else {
                continue;
            };
            if !head.preemptible {
                continue;
            }
            if !self.may_be_victim(ledger, &victim, now) {
                held_back = true;
                continue;
            }
            let Ok(decoded) = cached.decode() else {
                continue;
            };
            if !holds_placement(&decoded) || validate::validate(&decoded).is_err() {
                continue;
            }
            let phase = decoded.status.as_ref().and_then(|s| s.phase);
            let run_seconds = if phase == Some(Phase::Running) {
                u64::try_from(time_in_phase(
                    &decoded.metadata,
                    decoded.status.as_ref(),
                    wall,
                ))
                .unwrap_or(0)
            } else {
                0
            };
            let lost_seconds = lost_seconds(&decoded, run_seconds, wall);
            let age = decoded.metadata.creation_timestamp.as_ref().map_or(0, |t| {
                u64::try_from(wall.duration_since(t.0).as_secs()).unwrap_or(0)
            });
            let victim_model = self.model_of(&decoded, &node_index, age);
            running.push(Running {
                job: victim_model,
                // Only a running job: one still starting has its pods on the way.
                may_shrink: matches!(phase, Some(Phase::Running)),
                may_evict: phase == Some(Phase::Running)
                    && run_seconds >= self.settings.preemption_min_run_time.as_secs(),
                lost_seconds,
                checkpoint_age_seconds: checkpoint_age(&decoded, run_seconds, wall),
            });
            offered.push(Offered {
                key: victim,
                job: decoded,
            });
        }
        (offered, running, held_back)
    }

    /// Checks a preemption answered for `job` (the rules in `diorch_policies::preempt::check`,
    /// then that the job fits the room it frees) and carries it out; `None` (the job waits)
    /// when it fails them.
    #[allow(clippy::too_many_arguments)]
    fn carry_out(
        &self,
        ledger: &mut Ledger,
        job: &DIJob,
        model: &plugin::Job,
        nodes: &[plugin::Node],
        offered: &[Offered],
        running: &[Running],
        plan: choice::Preemption,
        by: &str,
        fallback: Option<String>,
        policy_why: Why,
    ) -> Option<Admission> {
        let key = job_key(job);
        let now = self.settings.clock.now();
        let by = by.to_string();
        let freed = match choice::check(model, running, nodes, &plan) {
            Ok(freed) => freed,
            Err(e) => {
                tracing::warn!(job = %key, policy = %by, error = %clip(&e, MAX_MESSAGE_BYTES),
                    "a preemption breaks the rules; the job waits");
                return None;
            }
        };
        let slots = SlotNodes::new(
            plan.nodes
                .iter()
                .map(|&i| {
                    nodes
                        .get(i as usize)
                        .map(|n| n.name.clone())
                        .unwrap_or_default()
                })
                .collect(),
        );
        if let Err(e) = Checked::new((), by.clone()).fits(model, &freed, slots.as_slice()) {
            tracing::warn!(job = %key, policy = %by, error = %clip(&e.to_string(), MAX_MESSAGE_BYTES),
                "a preemption does not make the room the job needs; it waits");
            return None;
        }

        let ours = model.priority;
        let mut done = Vec::new();
        for shrink in &plan.shrinks {
            let (Some(o), Some(r)) = (offered.get(shrink.job), running.get(shrink.job)) else {
                continue;
            };
            let before: Vec<u32> = r.job.tasks.iter().map(|t| t.replicas).collect();
            let sizes: Vec<String> = r
                .job
                .tasks
                .iter()
                .zip(&shrink.replicas)
                .filter(|(t, n)| t.replicas != **n)
                .map(|(t, n)| format!("{} {} → {n}", t.name, t.replicas))
                .collect();
            let message = clip(
                &format!(
                    "{} to make room for {key} (priority {ours} > {})",
                    sizes.join(", "),
                    r.job.priority
                ),
                MAX_MESSAGE_BYTES,
            );
            // The survivors keep their nodes: per task, the first `n` slots of the old ones.
            let old = placed_slots(&o.job);
            let mut kept = Vec::new();
            let mut offset = 0usize;
            for (task, &n) in r.job.tasks.iter().zip(&shrink.replicas) {
                let at = offset..offset + task.replicas as usize;
                let task_slots = old.as_slice().get(at).unwrap_or_default();
                kept.extend(task_slots.iter().take(n as usize).cloned());
                offset += task.replicas as usize;
            }
            let kept = SlotNodes::new(kept);
            let sized = diorch_core::build::with_task_replicas(&o.job, &shrink.replicas);
            ledger.book.hold(
                o.key.clone(),
                Held {
                    uid: o.job.metadata.uid.clone().unwrap_or_default(),
                    usage: usage_of(&sized, &kept),
                    slots: kept.clone(),
                    confirmed: true,
                    since: now,
                },
            );
            let preempted = Preempted {
                action: Action::Shrink {
                    nodes: kept.clone(),
                    replicas: shrink.replicas.clone(),
                    before,
                },
                for_job: key.to_string(),
                by: by.clone(),
                message: message.clone(),
            };
            ledger.proposals.insert(
                o.key.clone(),
                Proposal {
                    slots: kept,
                    replicas: Some(shrink.replicas.clone()),
                    by: by.clone(),
                    fallback: None,
                    why: Why::default(),
                    preempted: Some(preempted),
                },
            );
            self.cool_down(ledger, &o.key, now);
            self.count_preemption("shrink");
            tracing::info!(job = %o.key, for_job = %key, %message, "preemption shrinks the job");
            done.push(format!("shrank {} ({})", o.key, sizes.join(", ")));
        }
        let mut lost_total = 0u64;
        for &i in &plan.evictions {
            let (Some(o), Some(r)) = (offered.get(i), running.get(i)) else {
                continue;
            };
            let lost = r.gpu_seconds_lost();
            lost_total = lost_total.saturating_add(lost);
            let message = clip(
                &format!(
                    "evicted to make room for {key} (priority {ours} > {}); {lost} GPU-seconds \
                     of work since its last checkpoint (else since its pods started) are lost",
                    r.job.priority
                ),
                MAX_MESSAGE_BYTES,
            );
            // Its room is the job's now: the victim holds nothing until placed again.
            ledger.book.hold(
                o.key.clone(),
                Held {
                    uid: o.job.metadata.uid.clone().unwrap_or_default(),
                    usage: Vec::new(),
                    slots: SlotNodes::default(),
                    confirmed: true,
                    since: now,
                },
            );
            ledger.proposals.remove(&o.key);
            ledger.evictions.insert(
                o.key.clone(),
                Preempted {
                    action: Action::Evict,
                    for_job: key.to_string(),
                    by: by.clone(),
                    message: message.clone(),
                },
            );
            self.cool_down(ledger, &o.key, now);
            self.count_preemption("evict");
            self.metrics
                .allocator
                .work_lost_gpu_seconds
                .inc_by(lost as f64);
            tracing::info!(job = %o.key, for_job = %key, lost_gpu_seconds = lost, "preemption evicts the job");
            done.push(format!("evicted {} ({lost} GPU-seconds lost)", o.key));
        }
        for o in plan
            .shrinks
            .iter()
            .map(|s| s.job)
            .chain(plan.evictions.iter().copied())
            .filter_map(|i| offered.get(i))
        {
            let _ = self.retry.unbounded_send(o.key.clone());
        }
        let words = match &policy_why.reason {
            Some(reason) => format!("; the policy says: {reason}"),
            None => String::new(),
        };
        let why = Why {
            sha256: policy_why.sha256,
            reason: diorch_core::reason::sanitize(&format!(
                "made room by preempting lower-priority jobs: {}{words}",
                done.join("; ")
            )),
        };
        tracing::info!(job = %key, policy = %by, shrinks = plan.shrinks.len(),
            evictions = plan.evictions.len(), lost_gpu_seconds = lost_total, "preemption places the job");
        Some(self.place(ledger, job, slots, &by, fallback, why))
    }

    /// Grows jobs shrunk by a preemption back to their counts from before it, where room has
    /// freed and their cool-down is over (the survivors stay where they are; the new replicas
    /// go where the built-in policy puts them). Under the built-in goodput policy its
    /// measurements decide instead. Returns how many jobs grow.
    pub(super) async fn grow_back(&self) -> usize {
        if self.policies.builtin() == NativePolicy::Goodput {
            return 0;
        }
        let builtin = Checked::builtin(self.policies.builtin());
        let by = builtin.by().to_string();
        let mut ledger = self.ledger.lock().await;
        let now = self.settings.clock.now();
        let wall = self.settings.clock.wall();
        let mut grown = 0;
        for cached in self.jobs.state() {
            // Most jobs were never shrunk: their status is not decoded. One that does not
            // decode fails its reconcile, and is not grown.
            if !cached.status_mentions("preemption") {
                continue;
            }
            let Ok(Some(status)) = cached.status() else {
                continue;
            };
            let Some(shrunk) = status.preemption.as_ref() else {
                continue;
            };
            let Some(before) = shrunk.replicas_before.as_ref() else {
                continue;
            };
            let key = ObjectKey::of(&cached.metadata);
            if !self.may_be_victim(&ledger, &key, now) {
                continue;
            }
            let Ok(job) = cached.decode() else { continue };
            if !holds_placement(&job) || validate::validate(&job).is_err() {
                continue;
            }
            let counts: Vec<u32> = (0..job.spec.tasks.len())
                .map(|i| u32::try_from(diorch_core::build::task_replicas(&job, i)).unwrap_or(0))
                .collect();
            let target: Vec<u32> = job
                .spec
                .tasks
                .iter()
                .zip(&counts)
                .map(|(t, &n)| {
                    let want = before
                        .get(&diorch_core::build::task_name(t))
                        .copied()
                        .unwrap_or(t.replicas)
                        .min(t.max_replicas())
                        .max(t.min_replicas());
                    u32::try_from(want).unwrap_or(0).max(n)
                })
                .collect();
            if target == counts {
                continue;
            }
            let sized = diorch_core::build::with_task_replicas(&job, &target);
            let nodes = self.model_nodes(&ledger, &key);
            let node_index = view::node_index(&nodes);
            let age = job.metadata.creation_timestamp.as_ref().map_or(0, |t| {
                u64::try_from(wall.duration_since(t.0).as_secs()).unwrap_or(0)
            });
            let model = self.model_of(&sized, &node_index, age);
            let Answer::Slots(slots) = answer_of(builtin.allocate_now(&model, &nodes)) else {
                continue;
            };
            let sizes: Vec<String> = model
                .tasks
                .iter()
                .zip(&counts)
                .filter(|(t, n)| t.replicas != **n)
                .map(|(t, n)| format!("{} {n} → {}", t.name, t.replicas))
                .collect();
            let reason = format!(
                "grown back after the preemption for {}: {}",
                shrunk.for_job,
                sizes.join(", ")
            );
            ledger.book.hold(
                key.clone(),
                Held {
                    uid: job.metadata.uid.clone().unwrap_or_default(),
                    usage: usage_of(&sized, &slots),
                    slots: slots.clone(),
                    confirmed: true,
                    since: now,
                },
            );
            ledger.proposals.insert(
                key.clone(),
                Proposal {
                    slots,
                    replicas: Some(target),
                    by: by.clone(),
                    fallback: None,
                    why: Why {
                        sha256: None,
                        reason: diorch_core::reason::sanitize(&reason),
                    },
                    preempted: None,
                },
            );
            ledger.last_moved.insert(key.clone(), now);
            self.count_decision(&by, "grown_back");
            tracing::info!(job = %key, policy = %by, %reason, "the job grows back");
            let _ = self.retry.unbounded_send(key);
            grown += 1;
        }
        grown
    }

    /// Whether a placed job may lose room now: its allocation confirmed in its status,
    /// nothing of it in flight, not in a cool-down.
    fn may_be_victim(&self, ledger: &Ledger, key: &ObjectKey, now: Instant) -> bool {
        ledger
            .book
            .get(key)
            .is_some_and(|h| h.confirmed && !h.slots.is_empty())
            && !ledger.proposals.contains_key(key)
            && !ledger.evictions.contains_key(key)
            && !ledger.calling.contains_key(key)
            && !self.cooling(ledger, key, now)
    }

    /// Whether `key` was preempted less than the cool-down ago.
    pub(super) fn cooling(&self, ledger: &Ledger, key: &ObjectKey, now: Instant) -> bool {
        ledger.preempted_at.get(key).is_some_and(|at| {
            now.saturating_duration_since(*at) < self.settings.preemption_cooldown
        })
    }

    fn cool_down(&self, ledger: &mut Ledger, key: &ObjectKey, now: Instant) {
        // Cool-downs past their end are forgotten here, so the map stays as small as the
        // preemptions of one cool-down.
        let period = self.settings.preemption_cooldown;
        ledger
            .preempted_at
            .retain(|_, at| now.saturating_duration_since(*at) < period);
        ledger.preempted_at.insert(key.clone(), now);
    }

    fn count_preemption(&self, action: &'static str) {
        self.metrics
            .allocator
            .preemptions
            .get_or_create(&crate::metrics::PreemptionLabels { action })
            .inc();
    }

    /// The eviction handed to `job`'s reconcile while its status still holds an allocation;
    /// once it does not, the eviction is done: the victim's empty hold goes (its terminating
    /// pods count from their requests until gone) and it is admitted as any waiting job.
    pub(super) async fn eviction(&self, job: &DIJob) -> Option<Admission> {
        let key = job_key(job);
        let mut ledger = self.ledger.lock().await;
        let evicted = ledger.evictions.get(&key)?;
        let still_placed = holds_placement(job)
            && job
                .status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .is_some_and(|a| a.iter().any(|n| !n.is_empty()));
        if still_placed {
            return Some(Admission::Preempted(evicted.clone()));
        }
        ledger.evictions.remove(&key);
        ledger.book.release(&key);
        None
    }
}
