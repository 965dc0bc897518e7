//! The Table objects themselves: a list's or an object's Table, the one-row Table of a watch
//! event, column definitions, rows with their conditions, and the `includeObject` choice of what
//! each row carries.
//!
//! Assembles rows only: which columns and cells a kind has is `columns.rs` and the cell files.

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::registry::{PrinterColumn, ResourceInfo};

use super::cell::{age, map_len, name, rfc3339_or_zero, str_of};
use super::columns::{Printer, columns_for, printer_for};
use super::custom::custom_cells;
use super::event::{event_cells, events_to_core};
use super::node_service::{format_endpoints, node_cells, service_cells};
use super::pod::pod_cells;

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
        Printer::PriorityClass => vec![
            name(obj),
            json!(obj["value"].as_i64().unwrap_or(0)),
            json!(obj["globalDefault"].as_bool().unwrap_or(false)),
            age(obj, now),
            str_of(&obj["preemptionPolicy"]).into(),
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
