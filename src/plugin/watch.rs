//! Feeds the registry from plugin ConfigMaps (label `diorch.io/plugin`) in one namespace: a new
//! or changed ConfigMap is loaded (compile, world check, smoke call, atomic swap), a deleted one
//! unloads its plugin, and every outcome is an Event on the ConfigMap (Warning naming the cause
//! when an upload is refused and the last good version stays).
//!
//! Owns: the watch loop and its Events. Must not touch: loading rules (registry) and the
//! ConfigMap format (spec).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Api, Client, Resource as _, ResourceExt as _};
use sha2::{Digest, Sha256};

use super::registry::PluginRegistry;
use super::spec::{self, PLUGIN_LABEL, PluginSpec};

/// Notes longer than this are cut (the Events API caps notes at 1 KiB).
const NOTE_CAP: usize = 1000;

/// What was last applied from one ConfigMap, so relists and no-op updates do not reload.
#[derive(PartialEq)]
struct Applied {
    plugin: String,
    spec: PluginSpec,
    sha256: [u8; 32],
}

/// Watches plugin ConfigMaps in `namespace` until `shutdown` resolves.
pub async fn run(
    client: Client,
    namespace: &str,
    registry: Arc<PluginRegistry>,
    shutdown: impl Future<Output = ()>,
) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "diorch-plugins".into(),
            instance: None,
        },
    );
    let stream =
        watcher::watcher(api, watcher::Config::default().labels(PLUGIN_LABEL)).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut applied: BTreeMap<String, Applied> = BTreeMap::new();
    let mut relisted: BTreeSet<String> = BTreeSet::new();
    loop {
        let event = tokio::select! {
            () = &mut shutdown => return,
            event = stream.next() => event,
        };
        match event {
            None => return,
            Some(Err(error)) => {
                tracing::warn!(%error, namespace, "plugin ConfigMap watch failed; retrying");
            }
            Some(Ok(WatchEvent::Init)) => relisted.clear(),
            Some(Ok(WatchEvent::InitApply(cm))) => {
                relisted.insert(cm.name_any());
                apply(&registry, &recorder, &mut applied, &cm).await;
            }
            Some(Ok(WatchEvent::InitDone)) => {
                // ConfigMaps deleted while the watch was down.
                let gone: Vec<String> = applied
                    .keys()
                    .filter(|k| !relisted.contains(*k))
                    .cloned()
                    .collect();
                for name in gone {
                    if let Some(a) = applied.remove(&name) {
                        registry.remove(&a.plugin).await;
                        tracing::info!(plugin = %a.plugin, configmap = %name, "plugin unloaded");
                    }
                }
            }
            Some(Ok(WatchEvent::Apply(cm))) => apply(&registry, &recorder, &mut applied, &cm).await,
            Some(Ok(WatchEvent::Delete(cm))) => {
                if let Some(a) = applied.remove(&cm.name_any()) {
                    registry.remove(&a.plugin).await;
                    tracing::info!(plugin = %a.plugin, configmap = %cm.name_any(), "plugin unloaded");
                }
            }
        }
    }
}

async fn apply(
    registry: &PluginRegistry,
    recorder: &Recorder,
    applied: &mut BTreeMap<String, Applied>,
    cm: &ConfigMap,
) {
    let cm_name = cm.name_any();
    let outcome = match spec::from_configmap(cm) {
        Err(e) => Err(("InvalidPluginConfigMap", e.to_string())),
        Ok((spec, bytes)) => {
            let next = Applied {
                plugin: spec.name.clone(),
                spec: spec.clone(),
                sha256: Sha256::digest(&bytes).into(),
            };
            if applied.get(&cm_name) == Some(&next) {
                return;
            }
            // A ConfigMap renaming its plugin unloads the old name.
            if let Some(previous) = applied.get(&cm_name)
                && previous.plugin != next.plugin
            {
                registry.remove(&previous.plugin).await;
            }
            let result = registry.apply(spec, bytes.into()).await;
            // Remember the attempt either way: the same bad bytes are not retried on relist.
            applied.insert(cm_name.clone(), next);
            result
                .map(|sha| format!("loaded version {sha}"))
                .map_err(|e| (e.reason(), e.to_string()))
        }
    };
    let (type_, reason, mut note) = match outcome {
        Ok(note) => (EventType::Normal, "PluginLoaded", note),
        Err((reason, message)) => (
            EventType::Warning,
            reason,
            format!("{message}; the last good version (if any) keeps serving"),
        ),
    };
    if note.len() > NOTE_CAP {
        let mut cut = NOTE_CAP;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
    }
    let event = Event {
        type_,
        reason: reason.into(),
        action: crate::events::action("LoadPlugin", &note),
        note: Some(note),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, &cm.object_ref(&())).await {
        tracing::warn!(%error, configmap = %cm_name, "cannot record plugin Event");
    }
}
