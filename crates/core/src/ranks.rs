//! Stable global ranks of a job's replicas (see docs/design/controller.md).
//!
//! DI-engine finds its own address at `DI_NODES[DI_RANK]`, so a replica's rank must never change
//! while it lives, and must come back when its pod is re-created. The rank table maps each rank
//! to the pod name (slot) holding it; it is persisted in `status.ranks`. Pure data; no I/O.
//!
//! Neither source of ranks is trusted to size the table: `status.ranks` can be written by anyone
//! with status write access, and a pod's `diengine/rank` annotation by anyone who can edit pods
//! in the job's namespace. The table never grows past `api::limits::MAX_JOB_REPLICAS` entries,
//! and a rank annotation outside the job's size is ignored and reported, never allocated.

use std::collections::BTreeSet;

use crate::api::limits::MAX_JOB_REPLICAS;

/// Most entries a rank table holds: a job never runs more replicas than this, and the table
/// never outgrows the most slots its job ever had.
pub const MAX_RANKS: usize = MAX_JOB_REPLICAS as usize;

/// Longest annotation text quoted back in a report.
const MAX_QUOTED: usize = 32;

/// A pod's `diengine/rank` annotation that `adopt` did not use because it is not a rank of the
/// job: not a number, negative, or at or past the job's size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IgnoredRank {
    pub pod: String,
    /// The annotation, cut to a few dozen characters.
    pub value: String,
}

/// Index = global rank; entry = pod name of the slot holding it, or `""` for a free rank.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankTable(Vec<String>);

impl RankTable {
    /// The table as persisted in `status.ranks` (absent = empty).
    /// Entries past [`MAX_RANKS`] cannot be a job's and are dropped.
    pub fn from_status(ranks: Option<&[String]>) -> RankTable {
        let ranks = ranks.unwrap_or_default();
        let mut table = RankTable(ranks.iter().take(MAX_RANKS).cloned().collect());
        table.dedup();
        table.trim();
        table
    }

    /// The table for `desired` slots (pod names in spec order): slots that keep existing keep
    /// their rank, removed slots free theirs, new slots take the lowest free rank in order, and
    /// trailing free ranks are trimmed.
    pub fn plan(&self, desired: &[String]) -> RankTable {
        let wanted: BTreeSet<&str> = desired.iter().map(String::as_str).collect();
        let mut entries: Vec<String> = self
            .0
            .iter()
            .map(|pod| {
                if wanted.contains(pod.as_str()) {
                    pod.clone()
                } else {
                    String::new()
                }
            })
            .collect();
        let placed: BTreeSet<String> = entries.iter().filter(|p| !p.is_empty()).cloned().collect();
        let mut free = entries
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_empty())
            .map(|(i, _)| i)
            .collect::<Vec<_>>()
            .into_iter();
        for pod in desired.iter().filter(|p| !placed.contains(p.as_str())) {
            match free.next() {
                Some(rank) => entries[rank] = pod.clone(),
                None => entries.push(pod.clone()),
            }
        }
        let mut table = RankTable(entries);
        table.trim();
        table
    }

    /// Adds pods the table does not know at the rank their `diengine/rank` annotation gives, when
    /// that rank is free: a pod created just before its status write was lost keeps its rank.
    /// Pods with no usable rank are left to `plan`.
    ///
    /// `size` is the job's size: no rank at or past it (nor past [`MAX_RANKS`]) is taken. Such
    /// annotations, and ones that are not a rank at all, come back as [`IgnoredRank`]s to report;
    /// a pod without the annotation is simply left to `plan`.
    pub fn adopt<'a>(
        &self,
        pods: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
        size: usize,
    ) -> (RankTable, Vec<IgnoredRank>) {
        let size = size.min(MAX_RANKS);
        let mut entries = self.0.clone();
        let mut ignored = Vec::new();
        let mut sorted: Vec<(&str, Option<&str>)> = pods.into_iter().collect();
        sorted.sort();
        for (pod, annotation) in sorted {
            let Some(annotation) = annotation else {
                continue;
            };
            let rank = match annotation.parse::<usize>() {
                Ok(rank) if rank < size => rank,
                _ => {
                    ignored.push(IgnoredRank {
                        pod: pod.to_string(),
                        value: quote(annotation),
                    });
                    continue;
                }
            };
            if entries.iter().any(|p| p == pod) {
                continue;
            }
            if rank >= entries.len() {
                // Bounded: rank < size <= MAX_RANKS.
                entries.resize(rank + 1, String::new());
            }
            if let Some(entry) = entries.get_mut(rank).filter(|e| e.is_empty()) {
                *entry = pod.to_string();
            }
        }
        (RankTable(entries), ignored)
    }

    /// The rank of `pod`, if it holds one.
    pub fn rank_of(&self, pod: &str) -> Option<usize> {
        self.0.iter().position(|p| p == pod)
    }

    /// Entries by rank (`""` = free), as persisted in `status.ranks`.
    pub fn entries(&self) -> &[String] {
        &self.0
    }

    /// Number of ranks up to the highest one in use (the length of `DI_NODES`).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Keeps only the first rank of a pod listed twice (a hand-edited status).
    fn dedup(&mut self) {
        let mut seen = BTreeSet::new();
        for entry in &mut self.0 {
            if !entry.is_empty() && !seen.insert(entry.clone()) {
                entry.clear();
            }
        }
    }

    fn trim(&mut self) {
        while self.0.last().is_some_and(String::is_empty) {
            self.0.pop();
        }
    }
}

/// `text` cut to [`MAX_QUOTED`] bytes at a character boundary, with an ellipsis when cut.
fn quote(text: &str) -> String {
    if text.len() <= MAX_QUOTED {
        return text.to_string();
    }
    format!("{}…", &text[..text.floor_char_boundary(MAX_QUOTED)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn table(v: &[&str]) -> RankTable {
        RankTable::from_status(Some(&names(v)))
    }

    #[test]
    fn first_plan_numbers_slots_in_spec_order_like_di_orchestrator() {
        let plan = RankTable::default().plan(&names(&[
            "j-learner-0",
            "j-evaluator-0",
            "j-collector-0",
            "j-collector-1",
        ]));
        assert_eq!(
            plan.entries(),
            names(&[
                "j-learner-0",
                "j-evaluator-0",
                "j-collector-0",
                "j-collector-1"
            ])
        );
        assert_eq!(plan.rank_of("j-collector-1"), Some(3));
    }

    #[test]
    fn scale_up_appends_new_slots_in_task_order() {
        // DI-orchestrator's e2e: 1,1,2 → 2,2,3 gives the new pods ranks 4, 5, 6.
        let before = table(&[
            "j-learner-0",
            "j-evaluator-0",
            "j-collector-0",
            "j-collector-1",
        ]);
        let after = before.plan(&names(&[
            "j-learner-0",
            "j-learner-1",
            "j-evaluator-0",
            "j-evaluator-1",
            "j-collector-0",
            "j-collector-1",
            "j-collector-2",
        ]));
        assert_eq!(after.rank_of("j-learner-1"), Some(4));
        assert_eq!(after.rank_of("j-evaluator-1"), Some(5));
        assert_eq!(after.rank_of("j-collector-2"), Some(6));
        for (rank, pod) in before.entries().iter().enumerate() {
            assert_eq!(after.rank_of(pod), Some(rank), "{pod} moved");
        }
    }

    #[test]
    fn scale_in_frees_ranks_and_scale_up_fills_the_gap_first() {
        let before = table(&[
            "j-learner-0",
            "j-learner-1",
            "j-collector-0",
            "j-collector-1",
        ]);
        let shrunk = before.plan(&names(&["j-learner-0", "j-collector-0", "j-collector-1"]));
        assert_eq!(
            shrunk.entries(),
            names(&["j-learner-0", "", "j-collector-0", "j-collector-1"])
        );
        assert_eq!(shrunk.len(), 4, "DI_NODES keeps an empty entry for the gap");
        let grown = shrunk.plan(&names(&[
            "j-learner-0",
            "j-collector-0",
            "j-collector-1",
            "j-collector-2",
        ]));
        assert_eq!(grown.rank_of("j-collector-2"), Some(1));
        assert_eq!(grown.rank_of("j-collector-1"), Some(3));
    }

    #[test]
    fn trailing_free_ranks_are_trimmed() {
        let before = table(&["j-learner-0", "j-collector-0", "j-collector-1"]);
        let shrunk = before.plan(&names(&["j-learner-0", "j-collector-0"]));
        assert_eq!(shrunk.entries(), names(&["j-learner-0", "j-collector-0"]));
        assert!(RankTable::default().plan(&[]).is_empty());
    }

    #[test]
    fn replanning_the_same_slots_changes_nothing() {
        let before = table(&["a-0", "", "b-0", "b-1"]);
        let same = before.plan(&names(&["a-0", "b-0", "b-1"]));
        assert_eq!(same, before);
    }

    #[test]
    fn table_is_rebuilt_from_pod_annotations() {
        let (table, ignored) = RankTable::default().adopt(
            [
                ("j-collector-1", Some("3")),
                ("j-learner-0", Some("0")),
                ("j-evaluator-0", Some("x")),
                ("j-collector-0", Some("3")),
            ],
            4,
        );
        assert_eq!(
            ignored,
            [IgnoredRank {
                pod: "j-evaluator-0".into(),
                value: "x".into()
            }]
        );
        // collector-0 and collector-1 both claim 3: the first by name keeps it.
        assert_eq!(
            table.entries(),
            names(&["j-learner-0", "", "", "j-collector-0"])
        );
        let plan = table.plan(&names(&[
            "j-learner-0",
            "j-evaluator-0",
            "j-collector-0",
            "j-collector-1",
        ]));
        assert_eq!(plan.rank_of("j-evaluator-0"), Some(1));
        assert_eq!(plan.rank_of("j-collector-1"), Some(2));
        assert_eq!(plan.rank_of("j-collector-0"), Some(3));
    }

    #[test]
    fn adopt_keeps_known_ranks_and_fills_only_free_ones() {
        let table = table(&["j-a-0", "", "j-b-0"]);
        let (adopted, ignored) = table.adopt(
            [
                ("j-a-0", Some("5")), // known: keeps rank 0
                ("j-c-0", Some("2")), // taken by j-b-0: left to plan
                ("j-d-0", Some("1")), // free: adopted
                ("j-e-0", Some("4")), // past the end: adopted, gap kept
            ],
            6,
        );
        assert!(ignored.is_empty(), "{ignored:?}");
        assert_eq!(
            adopted.entries(),
            names(&["j-a-0", "j-d-0", "j-b-0", "", "j-e-0"])
        );
    }

    #[test]
    fn a_pod_listed_twice_in_status_keeps_its_first_rank() {
        let table = table(&["a-0", "a-0", "b-0", ""]);
        assert_eq!(table.entries(), names(&["a-0", "", "b-0"]));
    }

    #[test]
    fn rank_annotations_outside_the_job_are_ignored_and_reported_never_allocated() {
        let huge = "9".repeat(10_000);
        let pods = [
            ("j-a-0", Some("2000000000")),
            ("j-a-1", Some("-1")),
            ("j-a-2", Some("two")),
            ("j-a-3", Some(huge.as_str())),
            ("j-a-4", Some("4")), // the job's size is 4: ranks 0..=3
            ("j-a-5", Some("18446744073709551615")),
            ("j-a-6", None), // no annotation: left to plan, nothing to report
            ("j-a-7", Some("3")),
        ];
        let (table, ignored) = RankTable::default().adopt(pods, 4);
        assert_eq!(table.entries(), names(&["", "", "", "j-a-7"]));
        let reported: Vec<(&str, &str)> = ignored
            .iter()
            .map(|i| (i.pod.as_str(), i.value.as_str()))
            .collect();
        let cut = format!("{}…", "9".repeat(32));
        assert_eq!(
            reported,
            [
                ("j-a-0", "2000000000"),
                ("j-a-1", "-1"),
                ("j-a-2", "two"),
                ("j-a-3", cut.as_str()),
                ("j-a-4", "4"),
                ("j-a-5", "18446744073709551615"),
            ]
        );
        // Whatever size the caller claims, the table stays within the job-wide maximum.
        let (table, ignored) =
            RankTable::default().adopt([("j-a-0", Some("2000000000"))], usize::MAX);
        assert!(table.is_empty());
        assert_eq!(ignored.len(), 1);
        let (table, _) = RankTable::default().adopt([("j-a-0", Some("3999"))], usize::MAX);
        assert_eq!(table.len(), MAX_RANKS);
    }

    #[test]
    fn a_status_rank_table_is_cut_to_the_job_wide_maximum() {
        let mut long = vec![String::new(); 3 * MAX_RANKS];
        long[1] = "j-a-0".into();
        long[MAX_RANKS + 7] = "j-a-1".into();
        let table = RankTable::from_status(Some(&long));
        assert_eq!(table.entries(), names(&["", "j-a-0"]));
        assert_eq!(table.rank_of("j-a-1"), None);
    }

    #[test]
    fn quoted_annotations_are_cut_on_a_character_boundary() {
        let text = "é".repeat(40); // two bytes each: byte 32 is a boundary, 33 is not
        assert_eq!(quote(&text), format!("{}…", "é".repeat(16)));
        let odd = format!("a{}", "é".repeat(40));
        assert_eq!(quote(&odd), format!("a{}…", "é".repeat(15)));
        assert_eq!(quote("12"), "12");
    }
}
