//! Server-side Table rendering (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), the
//! only way `kubectl get` learns a resource's columns.
//!
//! Owns the column definitions and cell rules of the real apiserver's printers
//! (`pkg/printers/internalversion/printers.go`), the CRD table convertor
//! (`apiextensions-apiserver/.../tableconvertor`) with its minimal JSONPath, the default
//! `Name`/`Created At` convertor, and `duration.HumanDuration`. Like the apiserver's printer
//! storage, it always renders the wide columns: kubectl hides priority > 0 columns itself.
//! It must not touch storage or HTTP: callers pass the objects and write the result.

use std::collections::{BTreeMap, BTreeSet};

use crate::gofmt::go_float;
use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::registry::{PrinterColumn, ResourceInfo};

/// The `includeObject` query parameter: what each row carries in `object`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableError {
    /// The apiserver answers this with a 400 BadRequest carrying exactly this message.
    #[error("unrecognized includeObject value: {0:?}")]
    UnrecognizedIncludeObject(String),
}

/// Parses `includeObject`; absent or empty means `Metadata`, as in the apiserver.
pub fn parse_include_object(q: Option<&str>) -> Result<IncludeObject, TableError> {
    match q.unwrap_or("") {
        "" | "Metadata" => Ok(IncludeObject::Metadata),
        "None" => Ok(IncludeObject::None),
        "Object" => Ok(IncludeObject::Object),
        other => Err(TableError::UnrecognizedIncludeObject(other.to_string())),
    }
}

/// A `meta.k8s.io/v1` Table for a list (or a single object: pass one object and its
/// resourceVersion). Rows keep the order of `objects`.
pub fn render_table(
    info: &ResourceInfo,
    objects: &[&Value],
    include: IncludeObject,
    now: Timestamp,
    resource_version: &str,
    continue_token: Option<&str>,
) -> Value {
    let columns = columns_for(info);
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| render_row(info, &columns, obj, include, now))
        .collect();
    let mut metadata = Map::new();
    if !resource_version.is_empty() {
        metadata.insert("resourceVersion".into(), resource_version.into());
    }
    if let Some(token) = continue_token.filter(|t| !t.is_empty()) {
        metadata.insert("continue".into(), token.into());
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": column_definitions(&columns),
        "rows": rows,
    })
}

/// The Table sent as the object of one watch event when the client asked for Tables
/// (`kubectl get -w`). The apiserver sends the column definitions with the first event
/// only (`with_headers`) and `null` afterwards; `metadata.resourceVersion` is the object's.
pub fn render_table_row_event(
    info: &ResourceInfo,
    object: &Value,
    include: IncludeObject,
    now: Timestamp,
    with_headers: bool,
) -> Value {
    let columns = columns_for(info);
    let row = render_row(info, &columns, object, include, now);
    let mut metadata = Map::new();
    if let Some(rv) = object["metadata"]["resourceVersion"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        metadata.insert("resourceVersion".into(), rv.into());
    }
    let definitions = if with_headers {
        column_definitions(&columns)
    } else {
        Value::Null
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": [row],
    })
}

/// Exactly `k8s.io/apimachinery/pkg/util/duration.HumanDuration`.
pub fn human_duration(d: std::time::Duration) -> String {
    human_duration_nanos(i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}

/// HumanDuration over a signed span: timestamps slightly in the future (clock skew) read
/// "0s", further ones "<invalid>".
fn human_duration_nanos(nanos: i128) -> String {
    const SEC: i128 = 1_000_000_000;
    // Go's int(d.Seconds()) truncates towards zero.
    let seconds = nanos / SEC;
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = nanos / (60 * SEC);
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = nanos / (3600 * SEC);
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{}h", hours / 24, h)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{}d", hours / 24 / 365, dy)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// Evaluates a printer-column JSONPath (`.a.b`, `.a[0].b`, `.a[*].b`, `.a['x.y']`,
/// `.metadata.labels.x\.y`; surrounding `{}` tolerated). `None` when nothing matches or the
/// path cannot be parsed. A path with `[*]` yields an array of every match; the Table cell
/// uses only the first match, as the apiserver's CRD table convertor does.
pub fn eval_jsonpath(obj: &Value, path: &str) -> Option<Value> {
    let segments = parse_jsonpath(path)?;
    let results = find_results(obj, &segments);
    if segments.iter().any(|s| matches!(s, Segment::All)) {
        if results.is_empty() {
            return None;
        }
        return Some(Value::Array(results.into_iter().cloned().collect()));
    }
    results.first().map(|v| (*v).clone())
}

#[derive(Debug, PartialEq)]
enum Segment {
    Field(String),
    Index(i64),
    All,
}

fn parse_jsonpath(path: &str) -> Option<Vec<Segment>> {
    let trimmed = path.trim();
    let inner = trimmed
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(trimmed)
        .trim();
    let chars: Vec<char> = inner.chars().collect();
    let mut segments = Vec::new();
    let mut i = 0;
    // A leading `$` is the root, as in `{$.spec}`.
    if chars.first() == Some(&'$') {
        i = 1;
    }
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let mut name = String::new();
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        name.push(chars[i + 1]);
                        i += 2;
                    } else {
                        name.push(chars[i]);
                        i += 1;
                    }
                }
                if name.is_empty() {
                    // `.` alone is the current object; `..` (recursive descent) is unsupported.
                    if i < chars.len() && chars[i] == '.' {
                        return None;
                    }
                    continue;
                }
                segments.push(Segment::Field(name));
            }
            '[' => {
                let close = chars[i..].iter().position(|c| *c == ']')? + i;
                let body: String = chars[i + 1..close].iter().collect();
                let body = body.trim();
                if body == "*" {
                    segments.push(Segment::All);
                } else if let Some(key) = body
                    .strip_prefix('\'')
                    .and_then(|b| b.strip_suffix('\''))
                    .or_else(|| body.strip_prefix('"').and_then(|b| b.strip_suffix('"')))
                {
                    segments.push(Segment::Field(key.to_string()));
                } else {
                    segments.push(Segment::Index(body.parse().ok()?));
                }
                i = close + 1;
            }
            _ => return None,
        }
    }
    Some(segments)
}

fn find_results<'a>(obj: &'a Value, segments: &[Segment]) -> Vec<&'a Value> {
    let mut current = vec![obj];
    for segment in segments {
        let mut next = Vec::new();
        for value in current {
            match segment {
                Segment::Field(name) => {
                    if let Some(v) = value.as_object().and_then(|m| m.get(name)) {
                        next.push(v);
                    }
                }
                Segment::Index(idx) => {
                    if let Some(items) = value.as_array() {
                        let len = items.len() as i64;
                        let at = if *idx < 0 { len + idx } else { *idx };
                        if (0..len).contains(&at) {
                            next.extend(items.get(at as usize));
                        }
                    }
                }
                Segment::All => match value {
                    Value::Array(items) => next.extend(items.iter()),
                    Value::Object(map) => next.extend(map.values()),
                    _ => {}
                },
            }
        }
        current = next;
    }
    current
}

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATION_TIMESTAMP_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// Which convertor renders a resource's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Printer {
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
    WebhookConfiguration,
    /// A custom resource: CRD printer columns evaluated by JSONPath.
    Custom,
    /// `rest.DefaultTableConvertor`: Name, Created At.
    Default,
}

fn printer_for(info: &ResourceInfo) -> Printer {
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

fn column_definitions(columns: &[PrinterColumn]) -> Value {
    Value::Array(
        columns
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "type": c.type_,
                    "format": c.format,
                    "description": c.description,
                    "priority": c.priority,
                })
            })
            .collect(),
    )
}

fn render_row(
    info: &ResourceInfo,
    columns: &[PrinterColumn],
    obj: &Value,
    include: IncludeObject,
    now: Timestamp,
) -> Value {
    let mut row = Map::new();
    let cells = match printer_for(info) {
        Printer::Pod => pod_cells(obj, now),
        Printer::Node => node_cells(obj, now),
        Printer::Service => service_cells(obj, now),
        Printer::Endpoints => vec![name(obj), format_endpoints(obj).into(), age(obj, now)],
        Printer::ConfigMap => {
            let count = map_len(&obj["data"]) + map_len(&obj["binaryData"]);
            vec![name(obj), count.into(), age(obj, now)]
        }
        Printer::Secret => vec![
            name(obj),
            str_of(&obj["type"]).into(),
            map_len(&obj["data"]).into(),
            age(obj, now),
        ],
        Printer::ServiceAccount => {
            let secrets = obj["secrets"].as_array().map_or(0, Vec::len) as i64;
            vec![name(obj), secrets.into(), age(obj, now)]
        }
        Printer::Namespace => vec![
            name(obj),
            str_of(&obj["status"]["phase"]).into(),
            age(obj, now),
        ],
        Printer::CoreEvent => event_cells(obj, now),
        Printer::EventsEvent => event_cells(&events_to_core(obj), now),
        Printer::Lease => vec![
            name(obj),
            str_of(&obj["spec"]["holderIdentity"]).into(),
            age(obj, now),
        ],
        Printer::WebhookConfiguration => vec![
            name(obj),
            json!(obj["webhooks"].as_array().map_or(0, Vec::len)),
            age(obj, now),
        ],
        Printer::Custom => custom_cells(columns, obj, now),
        Printer::Default => vec![
            name(obj),
            rfc3339_or_zero(&obj["metadata"]["creationTimestamp"]).into(),
        ],
    };
    row.insert("cells".into(), Value::Array(cells));
    if printer_for(info) == Printer::Pod {
        let condition = match str_of(&obj["status"]["phase"]) {
            "Succeeded" => Some(("Succeeded", "The pod has completed successfully.")),
            "Failed" => Some(("Failed", "The pod failed.")),
            _ => None,
        };
        if let Some((reason, message)) = condition {
            row.insert(
                "conditions".into(),
                json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]),
            );
        }
    }
    row.insert("object".into(), row_object(info, obj, include));
    Value::Object(row)
}

fn row_object(info: &ResourceInfo, obj: &Value, include: IncludeObject) -> Value {
    match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
        IncludeObject::Object => {
            let mut full = obj.clone();
            if let Some(map) = full.as_object_mut() {
                map.entry("kind")
                    .or_insert_with(|| info.kind.clone().into());
                map.entry("apiVersion")
                    .or_insert_with(|| info.api_version().into());
            }
            full
        }
    }
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn name(obj: &Value) -> Value {
    str_of(&obj["metadata"]["name"]).into()
}

fn map_len(v: &Value) -> i64 {
    v.as_object().map_or(0, Map::len) as i64
}

fn parse_time(v: &Value) -> Option<Timestamp> {
    v.as_str().and_then(|s| s.parse::<Timestamp>().ok())
}

/// `translateTimestampSince`: `<unknown>` for a missing (zero) time.
fn since(v: &Value, now: Timestamp) -> String {
    match parse_time(v) {
        Some(t) => since_ts(t, now),
        None => "<unknown>".into(),
    }
}

fn since_ts(t: Timestamp, now: Timestamp) -> String {
    human_duration_nanos(now.duration_since(t).as_nanos())
}

fn age(obj: &Value, now: Timestamp) -> Value {
    since(&obj["metadata"]["creationTimestamp"], now).into()
}

/// `CreationTimestamp.Time.UTC().Format(time.RFC3339)`; the zero time when absent.
fn rfc3339_or_zero(v: &Value) -> String {
    match parse_time(v) {
        Some(t) => t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => "0001-01-01T00:00:00Z".into(),
    }
}

fn is_present(v: &Value) -> bool {
    v.is_object()
}

/// `labels.FormatLabels`: sorted `k=v` pairs, `<none>` when empty.
fn format_labels(v: &Value) -> String {
    let pairs: BTreeMap<&str, &str> = v
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.as_str(), str_of(v))).collect())
        .unwrap_or_default();
    if pairs.is_empty() {
        return "<none>".into();
    }
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn pod_cells(pod: &Value, now: Timestamp) -> Vec<Value> {
    let spec = &pod["spec"];
    let status = &pod["status"];
    let phase = str_of(&status["phase"]);
    let mut reason = phase.to_string();
    if let Some(r) = status["reason"].as_str().filter(|r| !r.is_empty()) {
        reason = r.to_string();
    }
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    for c in &conditions {
        if str_of(&c["type"]) == "PodScheduled" && str_of(&c["reason"]) == "SchedulingGated" {
            reason = "SchedulingGated".into();
        }
    }

    let init_specs = spec["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let restartable: BTreeSet<&str> = init_specs
        .iter()
        .filter(|c| str_of(&c["restartPolicy"]) == "Always")
        .map(|c| str_of(&c["name"]))
        .collect();
    let total = spec["containers"].as_array().map_or(0, Vec::len)
        + init_specs
            .iter()
            .filter(|c| str_of(&c["restartPolicy"]) == "Always")
            .count();

    let mut restarts: i64 = 0;
    let mut restartable_restarts: i64 = 0;
    let mut ready = 0usize;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_restartable_restart: Option<Timestamp> = None;
    let later = |a: Option<Timestamp>, b: Option<Timestamp>| match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };

    let mut initializing = false;
    let init_statuses = status["initContainerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, cs) in init_statuses.iter().enumerate() {
        let count = cs["restartCount"].as_i64().unwrap_or(0);
        let finished = parse_time(&cs["lastState"]["terminated"]["finishedAt"]);
        restarts += count;
        last_restart = later(last_restart, finished);
        let is_restartable = restartable.contains(str_of(&cs["name"]));
        if is_restartable {
            restartable_restarts += count;
            last_restartable_restart = later(last_restartable_restart, finished);
        }
        let terminated = &cs["state"]["terminated"];
        let waiting = &cs["state"]["waiting"];
        if is_present(terminated) && terminated["exitCode"].as_i64().unwrap_or(0) == 0 {
            continue;
        }
        if is_restartable && cs["started"].as_bool() == Some(true) {
            if cs["ready"].as_bool() == Some(true) {
                ready += 1;
            }
            continue;
        }
        if is_present(terminated) {
            let r = str_of(&terminated["reason"]);
            reason = if r.is_empty() {
                let signal = terminated["signal"].as_i64().unwrap_or(0);
                if signal != 0 {
                    format!("Init:Signal:{signal}")
                } else {
                    format!(
                        "Init:ExitCode:{}",
                        terminated["exitCode"].as_i64().unwrap_or(0)
                    )
                }
            } else {
                format!("Init:{r}")
            };
        } else if is_present(waiting)
            && !str_of(&waiting["reason"]).is_empty()
            && str_of(&waiting["reason"]) != "PodInitializing"
        {
            reason = format!("Init:{}", str_of(&waiting["reason"]));
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }

    let initialized = conditions
        .iter()
        .any(|c| str_of(&c["type"]) == "Initialized" && str_of(&c["status"]) == "True");
    if !initializing || initialized {
        restarts = restartable_restarts;
        last_restart = last_restartable_restart;
        let mut has_running = false;
        let statuses = status["containerStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for cs in statuses.iter().rev() {
            restarts += cs["restartCount"].as_i64().unwrap_or(0);
            last_restart = later(
                last_restart,
                parse_time(&cs["lastState"]["terminated"]["finishedAt"]),
            );
            let waiting = &cs["state"]["waiting"];
            let terminated = &cs["state"]["terminated"];
            if is_present(waiting) && !str_of(&waiting["reason"]).is_empty() {
                reason = str_of(&waiting["reason"]).to_string();
            } else if is_present(terminated) && !str_of(&terminated["reason"]).is_empty() {
                reason = str_of(&terminated["reason"]).to_string();
            } else if is_present(terminated) {
                let signal = terminated["signal"].as_i64().unwrap_or(0);
                reason = if signal != 0 {
                    format!("Signal:{signal}")
                } else {
                    format!("ExitCode:{}", terminated["exitCode"].as_i64().unwrap_or(0))
                };
            } else if cs["ready"].as_bool() == Some(true) && is_present(&cs["state"]["running"]) {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = conditions
                .iter()
                .any(|c| str_of(&c["type"]) == "Ready" && str_of(&c["status"]) == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }

    let deleting = !pod["metadata"]["deletionTimestamp"].is_null();
    if deleting && str_of(&status["reason"]) == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since_ts(t, now)),
        _ => restarts.to_string(),
    };

    let pod_ip = status["podIPs"][0]["ip"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("<none>");
    let node = spec["nodeName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("<none>");
    let nominated = status["nominatedNodeName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("<none>");
    let gates = spec["readinessGates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_count = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .find(|c| c["type"] == g["conditionType"])
                    .is_some_and(|c| str_of(&c["status"]) == "True")
            })
            .count();
        format!("{true_count}/{}", gates.len())
    };

    vec![
        name(pod),
        format!("{ready}/{total}").into(),
        reason.into(),
        restarts_cell.into(),
        age(pod, now),
        pod_ip.into(),
        node.into(),
        nominated.into(),
        readiness_gates.into(),
    ]
}

fn node_cells(node: &Value, now: Timestamp) -> Vec<Value> {
    let status = &node["status"];
    let mut states: Vec<String> = Vec::new();
    // Later duplicates win, as with the Go map built from the conditions.
    if let Some(ready) = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().rev().find(|c| str_of(&c["type"]) == "Ready"))
    {
        if str_of(&ready["status"]) == "True" {
            states.push("Ready".into());
        } else {
            states.push("NotReady".into());
        }
    }
    if states.is_empty() {
        states.push("Unknown".into());
    }
    if node["spec"]["unschedulable"].as_bool() == Some(true) {
        states.push("SchedulingDisabled".into());
    }
    let mut roles = BTreeSet::new();
    if let Some(labels) = node["metadata"]["labels"].as_object() {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.insert(role.to_string());
                }
            } else if k == "kubernetes.io/role" && !str_of(v).is_empty() {
                roles.insert(str_of(v).to_string());
            }
        }
    }
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    };
    let address = |kind: &str| -> String {
        status["addresses"]
            .as_array()
            .and_then(|a| a.iter().find(|x| str_of(&x["type"]) == kind))
            .map_or_else(
                || "<none>".to_string(),
                |x| str_of(&x["address"]).to_string(),
            )
    };
    let info = &status["nodeInfo"];
    let or_unknown = |v: &Value| -> Value {
        let s = str_of(v);
        if s.is_empty() { "<unknown>" } else { s }.into()
    };
    vec![
        name(node),
        states.join(",").into(),
        roles.into(),
        age(node, now),
        str_of(&info["kubeletVersion"]).into(),
        address("InternalIP").into(),
        address("ExternalIP").into(),
        or_unknown(&info["osImage"]),
        or_unknown(&info["kernelVersion"]),
        or_unknown(&info["containerRuntimeVersion"]),
    ]
}

fn string_list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| str_of(s).to_string()).collect())
        .unwrap_or_default()
}

fn service_cells(svc: &Value, now: Timestamp) -> Vec<Value> {
    let spec = &svc["spec"];
    let svc_type = str_of(&spec["type"]);
    let cluster_ip = spec["clusterIPs"][0].as_str().unwrap_or("<none>");
    let external_ips = string_list(&spec["externalIPs"]);
    let external = match svc_type {
        "ClusterIP" | "NodePort" => {
            if external_ips.is_empty() {
                "<none>".to_string()
            } else {
                external_ips.join(",")
            }
        }
        "LoadBalancer" => {
            // The apiserver renders wide, so the load-balancer list is never clipped.
            let lb: BTreeSet<String> = svc["status"]["loadBalancer"]["ingress"]
                .as_array()
                .map(|ing| {
                    ing.iter()
                        .filter_map(|i| {
                            let ip = str_of(&i["ip"]);
                            let host = str_of(&i["hostname"]);
                            if !ip.is_empty() {
                                Some(ip.to_string())
                            } else if !host.is_empty() {
                                Some(host.to_string())
                            } else {
                                None
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            let mut all: Vec<String> = lb.into_iter().collect();
            if !external_ips.is_empty() {
                all.extend(external_ips);
                all.join(",")
            } else if !all.is_empty() {
                all.join(",")
            } else {
                "<pending>".to_string()
            }
        }
        "ExternalName" => str_of(&spec["externalName"]).to_string(),
        _ => "<unknown>".to_string(),
    };
    let ports: Vec<String> = spec["ports"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let port = p["port"].as_i64().unwrap_or(0);
                    let protocol = str_of(&p["protocol"]);
                    match p["nodePort"].as_i64().filter(|n| *n > 0) {
                        Some(node_port) => format!("{port}:{node_port}/{protocol}"),
                        None => format!("{port}/{protocol}"),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let ports = if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    };
    vec![
        name(svc),
        svc_type.into(),
        cluster_ip.into(),
        external.into(),
        ports.into(),
        age(svc, now),
        format_labels(&spec["selector"]).into(),
    ]
}

fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `formatEndpoints(endpoints, nil)`: at most three addresses, then "+ N more...".
fn format_endpoints(ep: &Value) -> String {
    let subsets = ep["subsets"].as_array().cloned().unwrap_or_default();
    if subsets.is_empty() {
        return "<none>".into();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0usize;
    for ss in &subsets {
        let addresses = ss["addresses"].as_array().cloned().unwrap_or_default();
        let ports = ss["ports"].as_array().cloned().unwrap_or_default();
        if ports.is_empty() {
            count += addresses.len();
            for a in &addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(str_of(&a["ip"]).to_string());
            }
            continue;
        }
        for port in &ports {
            count += addresses.len();
            for a in &addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(join_host_port(
                    str_of(&a["ip"]),
                    port["port"].as_i64().unwrap_or(0),
                ));
            }
        }
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", count.saturating_sub(MAX))
    } else {
        joined
    }
}

/// Maps an `events.k8s.io/v1` Event onto the core field names the printer reads (the
/// apiserver prints both from the same internal type).
fn events_to_core(ev: &Value) -> Value {
    json!({
        "metadata": ev["metadata"],
        "involvedObject": ev["regarding"],
        "reason": ev["reason"],
        "message": ev["note"],
        "type": ev["type"],
        "source": ev["deprecatedSource"],
        "firstTimestamp": ev["deprecatedFirstTimestamp"],
        "lastTimestamp": ev["deprecatedLastTimestamp"],
        "count": ev["deprecatedCount"],
        "eventTime": ev["eventTime"],
        "series": ev["series"],
        "reportingComponent": ev["reportingController"],
        "reportingInstance": ev["reportingInstance"],
    })
}

fn event_cells(ev: &Value, now: Timestamp) -> Vec<Value> {
    let first = if parse_time(&ev["firstTimestamp"]).is_some() {
        since(&ev["firstTimestamp"], now)
    } else {
        since(&ev["eventTime"], now)
    };
    let mut last = if parse_time(&ev["lastTimestamp"]).is_some() {
        since(&ev["lastTimestamp"], now)
    } else {
        first.clone()
    };
    let mut count = ev["count"].as_i64().unwrap_or(0);
    if is_present(&ev["series"]) {
        last = since(&ev["series"]["lastObservedTime"], now);
        count = ev["series"]["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        // Singleton events don't carry a count in the new API.
        count = 1;
    }
    let involved = &ev["involvedObject"];
    let kind = str_of(&involved["kind"]).to_lowercase();
    let target = match str_of(&involved["name"]) {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let first_non_empty = |a: &str, b: &str| if a.is_empty() { b } else { a }.to_string();
    let component = first_non_empty(
        str_of(&ev["source"]["component"]),
        str_of(&ev["reportingComponent"]),
    );
    let host = first_non_empty(
        str_of(&ev["source"]["host"]),
        str_of(&ev["reportingInstance"]),
    );
    let source = if host.is_empty() {
        component
    } else {
        format!("{component}, {host}")
    };
    vec![
        last.into(),
        str_of(&ev["type"]).into(),
        str_of(&ev["reason"]).into(),
        target.into(),
        str_of(&involved["fieldPath"]).into(),
        source.into(),
        str_of(&ev["message"]).trim().into(),
        first.into(),
        count.into(),
        name(ev),
    ]
}

fn custom_cells(columns: &[PrinterColumn], obj: &Value, now: Timestamp) -> Vec<Value> {
    let mut cells = vec![name(obj)];
    for column in columns.iter().skip(1) {
        let first = parse_jsonpath(&column.json_path)
            .and_then(|segments| find_results(obj, &segments).first().map(|v| (*v).clone()));
        let cell = match first {
            None => Value::Null,
            Some(value) if column.type_ == "string" => {
                print_result(&value).map_or(Value::Null, Value::from)
            }
            Some(value) => typed_cell(&column.type_, &value, now),
        };
        cells.push(cell);
    }
    cells
}

/// jsonpath `PrintResults` of one value: strings raw, maps and lists as compact JSON (Go's
/// encoder escapes `<`, `>`, `&`), scalars as Go's `fmt.Print` would.
fn print_result(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => go_float(f),
            _ => n.to_string(),
        }),
        Value::Array(_) | Value::Object(_) => Some(
            serde_json::to_string(value)
                .unwrap_or_default()
                .replace('<', "\\u003c")
                .replace('>', "\\u003e")
                .replace('&', "\\u0026"),
        ),
    }
}

/// `cellForJSONValue` of the CRD table convertor.
fn typed_cell(type_: &str, value: &Value, now: Timestamp) -> Value {
    match type_ {
        "integer" => match value {
            Value::Number(n) => n
                .as_i64()
                // Go converts float64 to int64 by truncation.
                .or_else(|| n.as_f64().map(|f| f as i64))
                .map_or(Value::Null, Value::from),
            _ => Value::Null,
        },
        "number" => value.as_f64().map_or(Value::Null, Value::from),
        "boolean" => value.as_bool().map_or(Value::Null, Value::from),
        "date" => match value.as_str() {
            Some("") | Some("null") => "<unknown>".into(),
            Some(s) => match s.parse::<Timestamp>() {
                Ok(t) => since_ts(t, now).into(),
                Err(_) => "<invalid>".into(),
            },
            None => Value::Null,
        },
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{CustomResourceInfo, builtin_resources};
    use std::sync::Arc;
    use std::time::Duration;

    fn now() -> Timestamp {
        "2025-01-01T12:00:00Z".parse().unwrap()
    }

    fn builtin(group: &str, kind: &str) -> ResourceInfo {
        builtin_resources()
            .into_iter()
            .find(|r| r.group == group && r.kind == kind)
            .unwrap()
    }

    fn pod_row(pod: &Value) -> Vec<Value> {
        let table = render_table(
            &builtin("", "Pod"),
            &[pod],
            IncludeObject::Metadata,
            now(),
            "7",
            None,
        );
        table["rows"][0]["cells"].as_array().unwrap().clone()
    }

    fn pod(status: Value) -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "default", "creationTimestamp": "2025-01-01T11:55:00Z"},
            "spec": {"containers": [{"name": "a"}], "nodeName": "node-1"},
            "status": status,
        })
    }

    #[test]
    fn human_duration_matches_apimachinery() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (182, "3m2s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 5 * 60, "3h5m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (51 * 3600, "2d3h"),
            (48 * 3600, "2d"),
            (8 * 86400, "8d"),
            (729 * 86400, "729d"),
            (730 * 86400, "2y"),
            (731 * 86400, "2y1d"),
            (8 * 365 * 86400, "8y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(Duration::from_secs(secs)), want, "{secs}s");
        }
        assert_eq!(human_duration_nanos(-1_500_000_000), "0s");
        assert_eq!(human_duration_nanos(-2_000_000_000), "<invalid>");
    }

    #[test]
    fn running_pod_cells() {
        let p = pod(json!({
            "phase": "Running",
            "podIPs": [{"ip": "10.0.0.5"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}}]
        }));
        let cells = pod_row(&p);
        assert_eq!(
            cells,
            vec![
                json!("p"),
                json!("1/1"),
                json!("Running"),
                json!("0"),
                json!("5m"),
                json!("10.0.0.5"),
                json!("node-1"),
                json!("<none>"),
                json!("<none>")
            ]
        );
    }

    #[test]
    fn pod_status_reasons() {
        let creating = pod(json!({"phase": "Pending", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}));
        assert_eq!(pod_row(&creating)[2], "ContainerCreating");
        assert_eq!(pod_row(&creating)[1], "0/1");

        let completed = pod(json!({"phase": "Succeeded", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}));
        assert_eq!(pod_row(&completed)[2], "Completed");

        let error = pod(json!({"phase": "Failed", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}));
        assert_eq!(pod_row(&error)[2], "Error");

        let no_reason = pod(json!({"phase": "Failed", "containerStatuses": [
            {"name": "a", "state": {"terminated": {"exitCode": 137}}}]}));
        assert_eq!(pod_row(&no_reason)[2], "ExitCode:137");

        let mut terminating = pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "a", "ready": true, "state": {"running": {}}}]}));
        terminating["metadata"]["deletionTimestamp"] = json!("2025-01-01T11:59:00Z");
        assert_eq!(pod_row(&terminating)[2], "Terminating");

        // A finished pod being deleted keeps its terminal status.
        let mut done = completed.clone();
        done["metadata"]["deletionTimestamp"] = json!("2025-01-01T11:59:00Z");
        assert_eq!(pod_row(&done)[2], "Completed");

        let pending = json!({"metadata": {"name": "q"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}, "status": {"phase": "Pending"}});
        let cells = pod_row(&pending);
        assert_eq!(cells[1], "0/2");
        assert_eq!(cells[2], "Pending");
        assert_eq!(cells[4], "<unknown>");
        assert_eq!(cells[6], "<none>");
    }

    #[test]
    fn pod_restarts_and_init_containers() {
        let p = pod(
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}], "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2025-01-01T11:58:00Z"}}}]}),
        );
        let cells = pod_row(&p);
        assert_eq!(cells[2], "CrashLoopBackOff");
        assert_eq!(cells[3], "3 (2m ago)");

        let mut init = pod(json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "i1", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "i2", "state": {"running": {}}}]}));
        init["spec"]["initContainers"] = json!([{"name": "i1"}, {"name": "i2"}, {"name": "i3"}]);
        assert_eq!(pod_row(&init)[2], "Init:1/3");

        let mut failed_init = pod(json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "i1", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}));
        failed_init["spec"]["initContainers"] = json!([{"name": "i1"}]);
        let cells = pod_row(&failed_init);
        assert_eq!(cells[2], "Init:CrashLoopBackOff");
        assert_eq!(cells[3], "2");

        // A started sidecar counts towards READY and the total.
        let mut sidecar = pod(json!({"phase": "Running",
            "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
            "initContainerStatuses": [{"name": "s", "started": true, "ready": true, "restartCount": 1, "state": {"running": {}}}],
            "containerStatuses": [{"name": "a", "ready": true, "state": {"running": {}}}]}));
        sidecar["spec"]["initContainers"] = json!([{"name": "s", "restartPolicy": "Always"}]);
        let cells = pod_row(&sidecar);
        assert_eq!(cells[1], "2/2");
        assert_eq!(cells[2], "Running");
        assert_eq!(cells[3], "1");
    }

    #[test]
    fn completed_pod_row_condition_and_metadata_object() {
        let p = pod(json!({"phase": "Succeeded"}));
        let table = render_table(
            &builtin("", "Pod"),
            &[&p],
            IncludeObject::Metadata,
            now(),
            "42",
            Some("tok"),
        );
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(
            table["metadata"],
            json!({"resourceVersion": "42", "continue": "tok"})
        );
        assert_eq!(table["columnDefinitions"][3]["name"], "Restarts");
        assert_eq!(table["columnDefinitions"][5]["priority"], 1);
        assert_eq!(table["columnDefinitions"][0]["format"], "name");
        let row = &table["rows"][0];
        assert_eq!(row["conditions"][0]["reason"], "Succeeded");
        assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(row["object"]["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(row["object"]["metadata"]["namespace"], "default");
    }

    #[test]
    fn include_object_parsing() {
        assert_eq!(parse_include_object(None), Ok(IncludeObject::Metadata));
        assert_eq!(
            parse_include_object(Some("Object")),
            Ok(IncludeObject::Object)
        );
        assert_eq!(parse_include_object(Some("None")), Ok(IncludeObject::None));
        assert_eq!(
            parse_include_object(Some("bogus")).unwrap_err().to_string(),
            "unrecognized includeObject value: \"bogus\""
        );
    }

    #[test]
    fn node_service_configmap_secret_namespace_lease() {
        let node = json!({"metadata": {"name": "n1", "creationTimestamp": "2024-12-30T12:00:00Z",
            "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "worker"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "False"}],
                "addresses": [{"type": "InternalIP", "address": "192.168.0.2"}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Sim"}}});
        let t = render_table(
            &builtin("", "Node"),
            &[&node],
            IncludeObject::None,
            now(),
            "1",
            None,
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "n1",
                "NotReady,SchedulingDisabled",
                "control-plane,worker",
                "2d",
                "v1.33.0",
                "192.168.0.2",
                "<none>",
                "Sim",
                "<unknown>",
                "<unknown>"
            ])
        );
        assert_eq!(t["rows"][0]["object"], Value::Null);

        let svc = json!({"metadata": {"name": "s"}, "spec": {"type": "NodePort", "clusterIPs": ["10.96.0.10"],
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}, {"port": 53, "protocol": "UDP"}],
            "selector": {"b": "2", "a": "1"}}});
        let t = render_table(
            &builtin("", "Service"),
            &[&svc],
            IncludeObject::None,
            now(),
            "1",
            None,
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "s",
                "NodePort",
                "10.96.0.10",
                "<none>",
                "80:30080/TCP,53/UDP",
                "<unknown>",
                "a=1,b=2"
            ])
        );

        let lb = json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "clusterIPs": ["10.96.0.11"]}});
        let t = render_table(
            &builtin("", "Service"),
            &[&lb],
            IncludeObject::None,
            now(),
            "1",
            None,
        );
        assert_eq!(t["rows"][0]["cells"][3], "<pending>");
        assert_eq!(t["rows"][0]["cells"][4], "<none>");

        let cm = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
        let t = render_table(
            &builtin("", "ConfigMap"),
            &[&cm],
            IncludeObject::None,
            now(),
            "1",
            None,
        );
        assert_eq!(t["rows"][0]["cells"], json!(["c", 3, "<unknown>"]));

        let secret = json!({"metadata": {"name": "sec"}, "type": "Opaque", "data": {"k": "dg=="}});
        let t = render_table(
            &builtin("", "Secret"),
            &[&secret],
            IncludeObject::None,
            now(),
            "1",
            None,
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["sec", "Opaque", 1, "<unknown>"])
        );

        let ns = json!({"metadata": {"name": "default", "creationTimestamp": "2025-01-01T11:00:00Z"}, "status": {"phase": "Active"}});
        let t = render_table(
            &builtin("", "Namespace"),
            &[&ns],
            IncludeObject::None,
            now(),
            "1",
            None,
        );
        assert_eq!(t["rows"][0]["cells"], json!(["default", "Active", "60m"]));

        let lease = json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "diorch-1"}});
        let t = render_table(
            &builtin("coordination.k8s.io", "Lease"),
            &[&lease],
            IncludeObject::None,
            now(),
            "1",
            None,
        );
        assert_eq!(t["rows"][0]["cells"], json!(["l", "diorch-1", "<unknown>"]));
    }

    #[test]
    fn endpoints_format() {
        let ep = json!({"metadata": {"name": "e"}, "subsets": [{
            "addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "10.0.0.3"}, {"ip": "fd00::4"}],
            "ports": [{"port": 80}]}]});
        assert_eq!(
            format_endpoints(&ep),
            "10.0.0.1:80,10.0.0.2:80,10.0.0.3:80 + 1 more..."
        );
        let v6 = json!({"subsets": [{"addresses": [{"ip": "fd00::4"}], "ports": [{"port": 80}]}]});
        assert_eq!(format_endpoints(&v6), "[fd00::4]:80");
        assert_eq!(format_endpoints(&json!({"metadata": {}})), "<none>");
    }

    #[test]
    fn core_and_events_api_events() {
        let ev = json!({"metadata": {"name": "p.1"}, "type": "Normal", "reason": "Scheduled",
            "message": " Successfully assigned default/p to node-1 ",
            "involvedObject": {"kind": "Pod", "name": "p"},
            "source": {"component": "default-scheduler"},
            "firstTimestamp": "2025-01-01T11:59:00Z", "lastTimestamp": "2025-01-01T11:59:30Z", "count": 2});
        let t = render_table(
            &builtin("", "Event"),
            &[&ev],
            IncludeObject::None,
            now(),
            "1",
            None,
        );
        assert_eq!(t["columnDefinitions"][0]["name"], "Last Seen");
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "30s",
                "Normal",
                "Scheduled",
                "pod/p",
                "",
                "default-scheduler",
                "Successfully assigned default/p to node-1",
                "60s",
                2,
                "p.1"
            ])
        );
        let new_api = json!({"metadata": {"name": "x"}, "type": "Warning", "reason": "Failed",
            "note": "boom", "regarding": {"kind": "DIJob", "name": "j"},
            "eventTime": "2025-01-01T11:58:00.000000Z", "reportingController": "diorch", "reportingInstance": "diorch-0"});
        let t = render_table(
            &builtin("events.k8s.io", "Event"),
            &[&new_api],
            IncludeObject::None,
            now(),
            "1",
            None,
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "2m",
                "Warning",
                "Failed",
                "dijob/j",
                "",
                "diorch, diorch-0",
                "boom",
                "2m",
                1,
                "x"
            ])
        );
    }

    #[test]
    fn default_convertor_for_crds_and_unknown_kinds() {
        let crd = json!({"metadata": {"name": "dijobs.diengine.opendilab.org", "creationTimestamp": "2025-01-01T10:00:00Z"}});
        let t = render_table(
            &builtin("apiextensions.k8s.io", "CustomResourceDefinition"),
            &[&crd],
            IncludeObject::None,
            now(),
            "1",
            None,
        );
        assert_eq!(t["columnDefinitions"][1]["name"], "Created At");
        assert_eq!(t["columnDefinitions"][1]["type"], "date");
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["dijobs.diengine.opendilab.org", "2025-01-01T10:00:00Z"])
        );
    }

    fn dijob_info(columns: Vec<PrinterColumn>) -> ResourceInfo {
        ResourceInfo {
            group: "diengine.opendilab.org".into(),
            version: "v2alpha1".into(),
            kind: "DIJob".into(),
            list_kind: "DIJobList".into(),
            plural: "dijobs".into(),
            singular: "dijob".into(),
            short_names: vec![],
            namespaced: true,
            subresources: vec!["status".into()],
            categories: vec![],
            printer_columns: columns,
            custom: Some(Arc::new(CustomResourceInfo {
                schema: json!({"type": "object"}),
                crd_name: "dijobs.diengine.opendilab.org".into(),
            })),
        }
    }

    fn pc(name: &str, type_: &str, path: &str, priority: i32) -> PrinterColumn {
        PrinterColumn {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: String::new(),
            priority,
            json_path: path.into(),
        }
    }

    #[test]
    fn custom_resource_columns() {
        let info = dijob_info(vec![
            pc("Phase", "string", ".status.phase", 0),
            pc("Replicas", "integer", ".status.replicas", 0),
            pc("Ratio", "number", ".status.ratio", 0),
            pc("Ok", "boolean", ".status.ok", 0),
            pc("Age", "date", ".metadata.creationTimestamp", 0),
            pc("Missing", "string", ".status.nothing", 1),
            pc("First", "string", ".spec.tasks[*].name", 1),
            pc("Map", "string", ".spec.selector", 1),
            pc("Bad", "date", ".status.when", 1),
        ]);
        let job = json!({"metadata": {"name": "j", "creationTimestamp": "2025-01-01T11:00:00Z"},
            "spec": {"tasks": [{"name": "learner"}, {"name": "collector"}], "selector": {"b": "<x>", "a": 1}},
            "status": {"phase": "Running", "replicas": 3.7, "ratio": 2, "ok": true, "when": "yesterday"}});
        let t = render_table(&info, &[&job], IncludeObject::Object, now(), "9", None);
        assert_eq!(
            t["columnDefinitions"][1]["description"],
            "Custom resource definition column (in JSONPath format): .status.phase"
        );
        assert_eq!(t["columnDefinitions"][6]["priority"], 1);
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "j",
                "Running",
                3,
                2.0,
                true,
                "60m",
                null,
                "learner",
                "{\"a\":1,\"b\":\"\\u003cx\\u003e\"}",
                "<invalid>"
            ])
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "DIJob");
        assert_eq!(
            t["rows"][0]["object"]["apiVersion"],
            "diengine.opendilab.org/v2alpha1"
        );

        let default_cols = dijob_info(vec![]);
        let t = render_table(
            &default_cols,
            &[&job],
            IncludeObject::None,
            now(),
            "9",
            None,
        );
        assert_eq!(t["columnDefinitions"][1]["name"], "Age");
        assert_eq!(t["columnDefinitions"][1]["type"], "date");
        assert_eq!(t["rows"][0]["cells"], json!(["j", "60m"]));
    }

    #[test]
    fn watch_event_tables_send_headers_once() {
        let info = builtin("", "ConfigMap");
        let cm = json!({"metadata": {"name": "c", "resourceVersion": "12"}});
        let first = render_table_row_event(&info, &cm, IncludeObject::Metadata, now(), true);
        assert_eq!(first["columnDefinitions"][1]["name"], "Data");
        assert_eq!(first["metadata"]["resourceVersion"], "12");
        assert_eq!(first["rows"].as_array().unwrap().len(), 1);
        let later = render_table_row_event(&info, &cm, IncludeObject::Metadata, now(), false);
        assert_eq!(later["columnDefinitions"], Value::Null);
        assert_eq!(later["rows"][0]["cells"], json!(["c", 0, "<unknown>"]));
    }

    #[test]
    fn jsonpath_cases() {
        let obj = json!({"metadata": {"labels": {"app.kubernetes.io/name": "x", "plain": "y"}},
            "spec": {"containers": [{"name": "a", "image": "i1"}, {"name": "b", "image": "i2"}]},
            "status": {"phase": "Running", "n": null}});
        assert_eq!(eval_jsonpath(&obj, ".status.phase"), Some(json!("Running")));
        assert_eq!(
            eval_jsonpath(&obj, "{.status.phase}"),
            Some(json!("Running"))
        );
        assert_eq!(
            eval_jsonpath(&obj, ".spec.containers[1].image"),
            Some(json!("i2"))
        );
        assert_eq!(
            eval_jsonpath(&obj, ".spec.containers[-1].name"),
            Some(json!("b"))
        );
        assert_eq!(
            eval_jsonpath(&obj, ".spec.containers[*].name"),
            Some(json!(["a", "b"]))
        );
        assert_eq!(
            eval_jsonpath(&obj, ".metadata.labels.app\\.kubernetes\\.io/name"),
            Some(json!("x"))
        );
        assert_eq!(
            eval_jsonpath(&obj, ".metadata.labels['app.kubernetes.io/name']"),
            Some(json!("x"))
        );
        assert_eq!(eval_jsonpath(&obj, ".status.n"), Some(Value::Null));
        assert_eq!(eval_jsonpath(&obj, ".status.missing"), None);
        assert_eq!(eval_jsonpath(&obj, ".spec.containers[5].name"), None);
        assert_eq!(eval_jsonpath(&obj, ".spec.containers[*].missing"), None);
        assert_eq!(eval_jsonpath(&obj, "status.phase"), None);
        assert_eq!(eval_jsonpath(&obj, ".spec..name"), None);
    }
}
