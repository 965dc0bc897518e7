use super::*;
use crate::binpack::BinPack;
use crate::testutil::{gpu_node, job};

/// A running low-priority job: tasks as (name, replicas, GPUs each), every replica on `node`,
/// every task elastic down to one replica; may be shrunk and evicted.
fn running(key: &str, tasks: &[(&str, u32, u32)], node: u32, lost_seconds: u64) -> Running {
    let mut j = job(key, tasks);
    j.current = vec![Some(node); j.total_replicas()];
    Running {
        job: j,
        may_shrink: true,
        may_evict: true,
        lost_seconds,
        checkpoint_age_seconds: None,
    }
}

/// Not elastic: every task at its minimum.
fn rigid(mut r: Running) -> Running {
    for t in &mut r.job.tasks {
        t.min_replicas = t.replicas;
    }
    r
}

fn urgent(gpus_per_replica: u32, replicas: u32) -> Job {
    let mut j = job("ns/urgent", &[("learner", replicas, gpus_per_replica)]);
    j.priority = 100;
    j
}

/// Two 8-GPU nodes, each full (the running jobs' usage is taken from `free`).
fn full_nodes(running: &[Running]) -> Vec<Node> {
    let mut nodes = vec![gpu_node("n0", 8), gpu_node("n1", 8)];
    for r in running {
        for (slot, t) in r.placed_slots() {
            let n = r.job.current[slot].unwrap_or_default() as usize;
            nodes[n].free.take(&r.job.tasks[t].requests);
        }
    }
    nodes
}

#[test]
fn elastic_replicas_shrink_highest_ranks_first_and_no_job_is_evicted() {
    let jobs = [
        running("ns/a", &[("learner", 1, 1), ("collector", 7, 1)], 0, 900),
        running("ns/b", &[("learner", 1, 1), ("collector", 7, 1)], 1, 900),
    ];
    let nodes = full_nodes(&jobs);
    let p = preempt(&BinPack, &urgent(1, 4), &jobs, &nodes, Mode::Shrink).unwrap();
    assert_eq!(p.evictions, Vec::<usize>::new());
    // Exactly the room needed, from one job: 4 of a's collectors go.
    assert_eq!(
        p.shrinks,
        vec![Shrink {
            job: 0,
            replicas: vec![1, 3]
        }]
    );
    assert_eq!(p.nodes, vec![0; 4]);
}

#[test]
fn a_shrink_never_goes_below_min_replicas_and_evicts_only_when_that_is_not_enough() {
    // Shrinking both jobs to their minimum frees 2 + 2 GPUs per node: not 6 on one node.
    let mut a = running("ns/a", &[("learner", 2, 2), ("collector", 4, 1)], 0, 100);
    let mut b = running("ns/b", &[("learner", 2, 2), ("collector", 4, 1)], 1, 50);
    a.job.tasks[1].min_replicas = 2;
    b.job.tasks[1].min_replicas = 2;
    let jobs = [a, b];
    let nodes = full_nodes(&jobs);
    let p = preempt(&BinPack, &urgent(6, 1), &jobs, &nodes, Mode::Shrink).unwrap();
    // b loses less work: it is evicted, and a keeps all its replicas.
    assert_eq!(p.evictions, vec![1]);
    assert_eq!(p.shrinks, vec![]);
    assert_eq!(p.nodes, vec![1]);
}

#[test]
fn the_victim_is_the_job_that_loses_the_least_work() {
    let jobs = [
        rigid(running("ns/a", &[("learner", 8, 1)], 0, 3_000)),
        rigid(running("ns/b", &[("learner", 8, 1)], 1, 600)),
    ];
    let nodes = full_nodes(&jobs);
    let p = preempt(&BinPack, &urgent(1, 8), &jobs, &nodes, Mode::Shrink).unwrap();
    assert_eq!(p.evictions, vec![1]);
    // A checkpoint makes the other job the cheaper one.
    let mut jobs = jobs;
    jobs[0].lost_seconds = 60;
    let p = preempt(&BinPack, &urgent(1, 8), &jobs, &nodes, Mode::Shrink).unwrap();
    assert_eq!(p.evictions, vec![0]);
    assert_eq!(jobs[1].gpu_seconds_lost(), 8 * 600);
}

#[test]
fn lower_priority_goes_first_whatever_it_loses() {
    let mut jobs = [
        rigid(running("ns/a", &[("learner", 8, 1)], 0, 10)),
        rigid(running("ns/b", &[("learner", 8, 1)], 1, 5_000)),
    ];
    jobs[0].job.priority = 50;
    let nodes = full_nodes(&jobs);
    let p = preempt(&BinPack, &urgent(1, 8), &jobs, &nodes, Mode::Shrink).unwrap();
    assert_eq!(p.evictions, vec![1]);
}

#[test]
fn jobs_the_host_protects_are_untouched() {
    // a is too young to evict (minimum run time) and b is in a cool-down: no room is made.
    let mut jobs = [
        rigid(running("ns/a", &[("learner", 8, 1)], 0, 10)),
        running("ns/b", &[("learner", 1, 1), ("collector", 7, 1)], 1, 10),
    ];
    jobs[0].may_evict = false;
    jobs[1].may_shrink = false;
    jobs[1].may_evict = false;
    let nodes = full_nodes(&jobs);
    assert_eq!(
        preempt(&BinPack, &urgent(1, 4), &jobs, &nodes, Mode::Shrink),
        None
    );
    // a may still be shrunk, not evicted: a rigid job cannot be, so nothing still.
    jobs[0].may_shrink = true;
    assert_eq!(
        preempt(&BinPack, &urgent(1, 4), &jobs, &nodes, Mode::Shrink),
        None
    );
    // b's cool-down over: it shrinks.
    jobs[1].may_shrink = true;
    let p = preempt(&BinPack, &urgent(1, 4), &jobs, &nodes, Mode::Shrink).unwrap();
    assert_eq!(p.shrinks[0].job, 1);
}

#[test]
fn non_preemptible_and_equal_or_higher_priority_jobs_are_never_touched() {
    let mut jobs = [
        running("ns/a", &[("learner", 1, 1), ("collector", 7, 1)], 0, 900),
        running("ns/b", &[("learner", 1, 1), ("collector", 7, 1)], 1, 900),
    ];
    jobs[0].job.preemptible = false;
    jobs[1].job.priority = 100;
    let nodes = full_nodes(&jobs);
    assert_eq!(
        preempt(&BinPack, &urgent(1, 1), &jobs, &nodes, Mode::Shrink),
        None
    );
    assert_eq!(
        preempt(&BinPack, &urgent(1, 1), &jobs, &nodes, Mode::Evict),
        None
    );
    jobs[1].job.priority = 101;
    assert_eq!(
        preempt(&BinPack, &urgent(1, 1), &jobs, &nodes, Mode::Shrink),
        None
    );
    jobs[1].job.priority = 99;
    assert!(preempt(&BinPack, &urgent(1, 1), &jobs, &nodes, Mode::Shrink).is_some());
}

#[test]
fn no_preemption_is_made_when_the_job_would_still_not_fit() {
    let jobs = [
        running("ns/a", &[("learner", 1, 1), ("collector", 7, 1)], 0, 900),
        running("ns/b", &[("learner", 1, 1), ("collector", 7, 1)], 1, 900),
    ];
    let nodes = full_nodes(&jobs);
    // 9 GPUs on one node: no node has that many.
    assert_eq!(
        preempt(&BinPack, &urgent(9, 1), &jobs, &nodes, Mode::Shrink),
        None
    );
    // 17 GPUs: more than the cluster.
    assert_eq!(
        preempt(&BinPack, &urgent(1, 17), &jobs, &nodes, Mode::Shrink),
        None
    );
}

#[test]
fn evict_mode_evicts_whole_jobs_where_shrinking_would_do() {
    let jobs = [
        running("ns/a", &[("learner", 1, 1), ("collector", 7, 1)], 0, 900),
        running("ns/b", &[("learner", 1, 1), ("collector", 7, 1)], 1, 300),
    ];
    let nodes = full_nodes(&jobs);
    let p = preempt(&BinPack, &urgent(1, 2), &jobs, &nodes, Mode::Evict).unwrap();
    assert_eq!(p.shrinks, vec![]);
    assert_eq!(p.evictions, vec![1]);
}

#[test]
fn evictions_the_job_can_start_without_are_given_back() {
    // The cheapest job (a, 2 GPUs) does not free enough; b does alone: a is not evicted.
    let jobs = [
        rigid(running("ns/a", &[("learner", 2, 1)], 0, 10)),
        rigid(running("ns/c", &[("learner", 6, 1)], 0, 5_000)),
        rigid(running("ns/b", &[("learner", 8, 1)], 1, 100)),
    ];
    let nodes = full_nodes(&jobs);
    let p = preempt(&BinPack, &urgent(1, 8), &jobs, &nodes, Mode::Shrink).unwrap();
    assert_eq!(p.evictions, vec![2]);
}

#[test]
fn shrinks_the_job_can_start_without_are_given_back_after_an_eviction() {
    // Everything shrunk frees 6 GPUs per node, not the 8 one replica needs; b's eviction is
    // enough, and nobody is shrunk.
    let jobs = [
        running("ns/a", &[("learner", 1, 1), ("collector", 7, 1)], 0, 900),
        running("ns/b", &[("learner", 1, 1), ("collector", 7, 1)], 1, 300),
    ];
    let nodes = full_nodes(&jobs);
    let p = preempt(&BinPack, &urgent(8, 1), &jobs, &nodes, Mode::Shrink).unwrap();
    assert_eq!(p.evictions, vec![1]);
    assert_eq!(p.shrinks, vec![]);
    assert_eq!(p.nodes, vec![1]);
}

#[test]
fn replicas_without_a_node_free_nothing_and_cpu_jobs_are_not_free_to_evict() {
    let mut a = rigid(running("ns/a", &[("learner", 8, 1)], 0, 100));
    a.job.current[0] = None;
    assert_eq!(a.gpus(), 7);
    // A CPU-only job's cost is its core-seconds.
    let cpu = rigid(running("ns/cpu", &[("worker", 4, 0)], 0, 100));
    assert_eq!(cpu.gpu_seconds_lost(), 0);
    assert_eq!(cpu.cost(), (0, 8 * 100));
}

#[test]
fn room_spread_over_nodes_shrinks_several_jobs_the_least_each() {
    let jobs = [
        running("ns/a", &[("learner", 1, 1), ("collector", 7, 1)], 0, 900),
        running("ns/b", &[("learner", 1, 1), ("collector", 7, 1)], 1, 900),
    ];
    let nodes = full_nodes(&jobs);
    // 8 single-GPU replicas: a gives all it can (6 collectors), b the 2 still missing.
    let p = preempt(&BinPack, &urgent(1, 8), &jobs, &nodes, Mode::Shrink).unwrap();
    assert_eq!(p.evictions, Vec::<usize>::new());
    assert_eq!(
        p.shrinks,
        vec![
            Shrink {
                job: 0,
                replicas: vec![1, 1]
            },
            Shrink {
                job: 1,
                replicas: vec![1, 5]
            }
        ]
    );
}

#[test]
fn an_answer_that_bends_a_rule_is_refused_and_a_good_one_frees_its_room() {
    let mut jobs = [
        running("ns/a", &[("learner", 1, 1), ("collector", 7, 1)], 0, 900),
        rigid(running("ns/b", &[("learner", 8, 1)], 1, 900)),
    ];
    let nodes = full_nodes(&jobs);
    let u = urgent(1, 4);
    let good = preempt(&BinPack, &u, &jobs, &nodes, Mode::Shrink).unwrap();
    let freed = check(&u, &jobs, &nodes, &good).expect("the built-in answer keeps the rules");
    assert_eq!(freed[0].free.gpus, 4, "a's 4 highest collectors freed");
    assert_eq!(freed[1].free.gpus, 0);
    let evict_b = Preemption {
        nodes: vec![1; 4],
        shrinks: vec![],
        evictions: vec![1],
    };
    assert_eq!(
        check(&u, &jobs, &nodes, &evict_b).expect("ok")[1].free.gpus,
        8
    );

    let refused =
        |plan: Preemption, jobs: &[Running]| check(&u, jobs, &nodes, &plan).expect_err("refused");
    let shrink = |job: usize, replicas: Vec<u32>| Preemption {
        nodes: vec![0; 4],
        shrinks: vec![Shrink { job, replicas }],
        evictions: vec![],
    };
    assert!(refused(shrink(5, vec![1, 3]), &jobs).contains("candidate 5 of 2"));
    assert!(refused(shrink(0, vec![1, 0]), &jobs).contains("not within 1..=7"));
    assert!(refused(shrink(0, vec![1, 8]), &jobs).contains("not within 1..=7"));
    assert!(refused(shrink(0, vec![1, 7]), &jobs).contains("removes nothing"));
    assert!(refused(shrink(0, vec![1]), &jobs).contains("1 counts for 2 tasks"));
    let twice = Preemption {
        nodes: vec![0; 4],
        shrinks: vec![Shrink {
            job: 0,
            replicas: vec![1, 3],
        }],
        evictions: vec![0],
    };
    assert!(refused(twice, &jobs).contains("twice"));
    let wrong_len = Preemption {
        nodes: vec![0; 3],
        ..evict_b.clone()
    };
    assert!(refused(wrong_len, &jobs).contains("3 nodes for 4 replicas"));
    jobs[1].may_evict = false;
    assert!(refused(evict_b.clone(), &jobs).contains("may not be evicted"));
    jobs[1].may_evict = true;
    jobs[1].job.priority = 100;
    assert!(refused(evict_b.clone(), &jobs).contains("priority 100"));
    jobs[1].job.priority = 0;
    jobs[1].job.preemptible = false;
    assert!(refused(evict_b, &jobs).contains("preemptible false"));
    jobs[0].may_shrink = false;
    assert!(refused(shrink(0, vec![1, 3]), &jobs).contains("may not be shrunk"));
}
