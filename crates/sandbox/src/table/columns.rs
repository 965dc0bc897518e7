//! Which printer renders a resource (`Printer`) and the column definitions the apiserver serves
//! for it (`pkg/printers/internalversion/printers.go`, CRD printer columns, the default
//! `Name`/`Created At`), wide columns included.
//!
//! Column definitions only: must not compute cells.

use crate::registry::{PrinterColumn, ResourceInfo};

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATION_TIMESTAMP_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// Which convertor renders a resource's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Printer {
    Pod,
    Node,
    Service,
    Endpoints,
    ConfigMap,
    Secret,
    ServiceAccount,
    Namespace,
    CoreEvent,
    EventsEvent,
    Lease,
    PriorityClass,
    WebhookConfiguration,
    /// A custom resource: CRD printer columns evaluated by JSONPath.
    Custom,
    /// `rest.DefaultTableConvertor`: Name, Created At.
    Default,
}

pub(super) fn printer_for(info: &ResourceInfo) -> Printer {
    if info.is_custom() {
        return Printer::Custom;
    }
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Pod") => Printer::Pod,
        ("", "Node") => Printer::Node,
        ("", "Service") => Printer::Service,
        ("", "Endpoints") => Printer::Endpoints,
        ("", "ConfigMap") => Printer::ConfigMap,
        ("", "Secret") => Printer::Secret,
        ("", "ServiceAccount") => Printer::ServiceAccount,
        ("", "Namespace") => Printer::Namespace,
        ("", "Event") => Printer::CoreEvent,
        ("events.k8s.io", "Event") => Printer::EventsEvent,
        ("coordination.k8s.io", "Lease") => Printer::Lease,
        ("scheduling.k8s.io", "PriorityClass") => Printer::PriorityClass,
        ("admissionregistration.k8s.io", _) => Printer::WebhookConfiguration,
        _ => Printer::Default,
    }
}

fn col(name: &str, type_: &str, priority: i32, description: &str) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        format: String::new(),
        description: description.into(),
        priority,
        json_path: String::new(),
    }
}

fn name_col() -> PrinterColumn {
    PrinterColumn {
        format: "name".into(),
        ..col("Name", "string", 0, NAME_DESCRIPTION)
    }
}

fn age_col() -> PrinterColumn {
    col("Age", "string", 0, CREATION_TIMESTAMP_DESCRIPTION)
}

/// The column definitions the apiserver serves for this resource (all priorities).
pub fn columns_for(info: &ResourceInfo) -> Vec<PrinterColumn> {
    match printer_for(info) {
        Printer::Pod => vec![
            name_col(),
            col(
                "Ready",
                "string",
                0,
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            col(
                "Status",
                "string",
                0,
                "The aggregate status of the containers in this pod.",
            ),
            col(
                "Restarts",
                "string",
                0,
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            age_col(),
            col(
                "IP",
                "string",
                1,
                "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
            ),
            col(
                "Node",
                "string",
                1,
                "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
            ),
            col(
                "Nominated Node",
                "string",
                1,
                "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.",
            ),
            col(
                "Readiness Gates",
                "string",
                1,
                "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates",
            ),
        ],
        Printer::Node => {
            let addresses = "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).";
            vec![
                name_col(),
                col("Status", "string", 0, "The status of the node"),
                col("Roles", "string", 0, "The roles of the node"),
                age_col(),
                col(
                    "Version",
                    "string",
                    0,
                    "Kubelet Version reported by the node.",
                ),
                col("Internal-IP", "string", 1, addresses),
                col("External-IP", "string", 1, addresses),
                col(
                    "OS-Image",
                    "string",
                    1,
                    "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
                ),
                col(
                    "Kernel-Version",
                    "string",
                    1,
                    "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
                ),
                col(
                    "Container-Runtime",
                    "string",
                    1,
                    "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
                ),
            ]
        }
        Printer::Service => vec![
            name_col(),
            col(
                "Type",
                "string",
                0,
                "type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer. \"ClusterIP\" allocates a cluster-internal IP address for load-balancing to endpoints. Endpoints are determined by the selector or if that is not specified, by manual construction of an Endpoints object or EndpointSlice objects. If clusterIP is \"None\", no virtual IP is allocated and the endpoints are published as a set of endpoints rather than a virtual IP. \"NodePort\" builds on ClusterIP and allocates a port on every node which routes to the same endpoints as the clusterIP. \"LoadBalancer\" builds on NodePort and creates an external load-balancer (if supported in the current cloud) which routes to the same endpoints as the clusterIP. \"ExternalName\" aliases this service to the specified externalName. Several other fields do not apply to ExternalName services. More info: https://kubernetes.io/docs/concepts/services-networking/service/#publishing-services-service-types",
            ),
            col(
                "Cluster-IP",
                "string",
                0,
                "clusterIP is the IP address of the service and is usually assigned randomly. If an address is specified manually, is in-range (as per system configuration), and is not in use, it will be allocated to the service; otherwise creation of the service will fail. This field may not be changed through updates unless the type field is also being changed to ExternalName (which requires this field to be blank) or the type field is being changed from ExternalName (in which case this field may optionally be specified, as describe above).  Valid values are \"None\", empty string (\"\"), or a valid IP address. Setting this to \"None\" makes a \"headless service\" (no virtual IP), which is useful when direct endpoint connections are preferred and proxying is not required.  Only applies to types ClusterIP, NodePort, and LoadBalancer. If this field is specified when creating a Service of type ExternalName, creation will fail. This field will be wiped when updating a Service to type ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies",
            ),
            col(
                "External-IP",
                "string",
                0,
                "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.  These IPs are not managed by Kubernetes.  The user is responsible for ensuring that traffic arrives at a node with this IP.  A common example is external load-balancers that are not part of the Kubernetes system.",
            ),
            col(
                "Port(s)",
                "string",
                0,
                "The list of ports that are exposed by this service. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies",
            ),
            age_col(),
            col(
                "Selector",
                "string",
                1,
                "Route service traffic to pods with label keys and values matching this selector. If empty or not present, the service is assumed to have an external process managing its endpoints, which Kubernetes will not modify. Only applies to types ClusterIP, NodePort, and LoadBalancer. Ignored if type is ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/",
            ),
        ],
        Printer::Endpoints => vec![
            name_col(),
            col(
                "Endpoints",
                "string",
                0,
                "The set of all endpoints is the union of all subsets. Addresses are placed into subsets according to the IPs they share. A single address with multiple ports, some of which are ready and some of which are not (because they come from different containers) will result in the address being displayed in different subsets for the different ports. No address will appear in both Addresses and NotReadyAddresses in the same subset. Sets of addresses and ports that comprise a service.",
            ),
            age_col(),
        ],
        Printer::ConfigMap => vec![
            name_col(),
            col(
                "Data",
                "string",
                0,
                "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.",
            ),
            age_col(),
        ],
        Printer::Secret => vec![
            name_col(),
            col(
                "Type",
                "string",
                0,
                "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types",
            ),
            col(
                "Data",
                "string",
                0,
                "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4",
            ),
            age_col(),
        ],
        Printer::ServiceAccount => vec![
            name_col(),
            col(
                "Secrets",
                "string",
                0,
                "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use. Pods are only limited to this list if this service account has a \"kubernetes.io/enforce-mountable-secrets\" annotation set to \"true\". The \"kubernetes.io/enforce-mountable-secrets\" annotation is deprecated since v1.32. Prefer separate namespaces to isolate access to mounted secrets. This field should not be used to find auto-generated service account token secrets for use outside of pods. Instead, tokens can be requested directly using the TokenRequest API, or service account token secrets can be manually created. More info: https://kubernetes.io/docs/concepts/configuration/secret",
            ),
            age_col(),
        ],
        Printer::Namespace => vec![
            name_col(),
            col("Status", "string", 0, "The status of the namespace"),
            age_col(),
        ],
        Printer::CoreEvent | Printer::EventsEvent => vec![
            col(
                "Last Seen",
                "string",
                0,
                "The time at which the most recent occurrence of this event was recorded.",
            ),
            col(
                "Type",
                "string",
                0,
                "Type of this event (Normal, Warning), new types could be added in the future",
            ),
            col(
                "Reason",
                "string",
                0,
                "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
            ),
            col(
                "Object",
                "string",
                0,
                "The object that this event is about.",
            ),
            col(
                "Subobject",
                "string",
                1,
                "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.",
            ),
            col(
                "Source",
                "string",
                1,
                "The component reporting this event. Should be a short machine understandable string.",
            ),
            col(
                "Message",
                "string",
                0,
                "A human-readable description of the status of this operation.",
            ),
            col(
                "First Seen",
                "string",
                1,
                "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
            ),
            col(
                "Count",
                "string",
                1,
                "The number of times this event has occurred.",
            ),
            PrinterColumn {
                priority: 1,
                ..name_col()
            },
        ],
        Printer::Lease => vec![
            name_col(),
            col(
                "Holder",
                "string",
                0,
                "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field.",
            ),
            age_col(),
        ],
        Printer::PriorityClass => vec![
            name_col(),
            col(
                "Value",
                "integer",
                0,
                "value represents the integer value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec.",
            ),
            col(
                "Global-Default",
                "boolean",
                0,
                "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class. Only one PriorityClass can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used as the default priority.",
            ),
            age_col(),
            col(
                "PreemptionPolicy",
                "string",
                0,
                "preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset.",
            ),
        ],
        Printer::WebhookConfiguration => vec![
            name_col(),
            col(
                "Webhooks",
                "integer",
                0,
                "Webhooks is a list of webhooks and the affected resources and operations.",
            ),
            age_col(),
        ],
        Printer::Custom => {
            let mut columns = vec![name_col()];
            if info.printer_columns.is_empty() {
                // apiextensions serves this default when a version declares no columns.
                columns.push(PrinterColumn {
                    json_path: ".metadata.creationTimestamp".into(),
                    ..col("Age", "date", 0, CREATION_TIMESTAMP_DESCRIPTION)
                });
            } else {
                columns.extend(info.printer_columns.iter().map(|c| PrinterColumn {
                    description: if c.description.is_empty() {
                        format!(
                            "Custom resource definition column (in JSONPath format): {}",
                            c.json_path
                        )
                    } else {
                        c.description.clone()
                    },
                    ..c.clone()
                }));
            }
            columns
        }
        Printer::Default => vec![
            name_col(),
            col("Created At", "date", 0, CREATION_TIMESTAMP_DESCRIPTION),
        ],
    }
}
