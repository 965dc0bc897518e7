//! Compiling components: bounded in size, time and concurrency, cached in memory by sha256 and
//! on disk as wasmtime artifacts (so a restart or a second replica does not compile again).
//!
//! Owns: the compile path from bytes to a `Component`. Must not touch: instantiation or calls
//! (the parent's and `calls`).

use super::*;

impl PluginHost {
    /// Compiles (or finds in the memory or disk cache) a component; blocking, call off the
    /// async runtime.
    pub(super) fn compile(
        &self,
        plugin: &str,
        bytes: &[u8],
    ) -> Result<(Component, [u8; 32]), PluginError> {
        let hash: [u8; 32] = Sha256::digest(bytes).into();
        if let Some(c) = self.lock_cache().get(&hash) {
            return Ok((c.clone(), hash));
        }
        let component = match self.load_from_disk(&hash) {
            Some(c) => c,
            None => {
                let c = self.compile_bounded(plugin, bytes)?;
                self.save_to_disk(&hash, &c);
                c
            }
        };
        let mut cache = self.lock_cache();
        if cache.len() >= CACHE_CAP {
            cache.clear();
        }
        cache.insert(hash, component.clone());
        Ok((component, hash))
    }

    /// The time budget of compiling `len` bytes (see [`HostConfig::compile_timeout`]).
    pub fn compile_budget(&self, len: usize) -> Duration {
        let config = &self.inner.config;
        let mib = len.div_ceil(1 << 20) as u32;
        config
            .compile_timeout
            .saturating_add(config.compile_per_mib.saturating_mul(mib))
    }

    /// Where the compiled artifact of a component is indexed on disk: keyed by this engine's
    /// configuration (wasmtime's own compatibility hash: version, target, settings), so an
    /// upgrade or a changed setting never loads an artifact compiled for another engine.
    pub(super) fn artifact_index(
        &self,
        hash: &[u8; 32],
    ) -> Option<(std::path::PathBuf, crate::oci::cache::BlobCache)> {
        use std::hash::{Hash as _, Hasher as _};
        let dir = self.inner.config.cache_dir.as_ref()?;
        let mut engine = std::collections::hash_map::DefaultHasher::new();
        self.inner
            .engine
            .precompile_compatibility_hash()
            .hash(&mut engine);
        let root = dir.join("compiled");
        let index = root
            .join("index")
            .join(format!("{:016x}", engine.finish()))
            .join(hex(hash));
        let blobs = crate::oci::cache::BlobCache::open(&root, COMPILED_CACHE_BUDGET).ok()?;
        Some((index, blobs))
    }

    /// A compiled artifact from the disk cache, verified against the digest its index names.
    pub(super) fn load_from_disk(&self, hash: &[u8; 32]) -> Option<Component> {
        let (index, blobs) = self.artifact_index(hash)?;
        let digest: crate::oci::Digest =
            std::fs::read_to_string(&index).ok()?.trim().parse().ok()?;
        let artifact = blobs.get_blocking(digest, COMPILED_ARTIFACT_CAP)?;
        // SAFETY: wasmtime requires that deserialized bytes come from `serialize` of a
        // compatible engine. They do: the index is keyed by this engine's compatibility hash
        // and written only by `save_to_disk` below, and the bytes are read only if their sha256 is
        // the one recorded when this process or an earlier one serialized them (wasmtime
        // checks its own header and version too). Writing the cache folder needs the
        // operator's own identity, which could equally replace its binary.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(&self.inner.engine, &artifact) };
        match component {
            Ok(c) => {
                tracing::info!(sha256 = %hex(hash), "compiled component loaded from the disk cache");
                Some(c)
            }
            Err(e) => {
                tracing::warn!(error = %one_line(&e), "cached compiled component refused; compiling");
                let _ = std::fs::remove_file(&index);
                None
            }
        }
    }

    /// Keeps a compiled artifact on disk (best effort: the cache only saves work).
    pub(super) fn save_to_disk(&self, hash: &[u8; 32], component: &Component) {
        let Some((index, blobs)) = self.artifact_index(hash) else {
            return;
        };
        let artifact = match component.serialize() {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %one_line(&e), "cannot serialize a compiled component");
                return;
            }
        };
        let digest = crate::oci::Digest::of(&artifact);
        let written = blobs.put_blocking(digest, &artifact).and_then(|()| {
            let parent = index.parent().unwrap_or(std::path::Path::new("."));
            std::fs::create_dir_all(parent)?;
            let tmp = index.with_extension(format!("{}.tmp", std::process::id()));
            std::fs::write(&tmp, digest.to_string())?;
            std::fs::rename(&tmp, &index)
        });
        if let Err(error) = written {
            tracing::warn!(%error, "cannot write a compiled component to the disk cache");
        }
    }

    /// Compiles `bytes` within the size cap and the compile budget (blocking). Compiles run one
    /// at a time (the compile gate): a caller waits for the running one, up to the budget of the
    /// largest component, and its own budget starts when its compile does. Cranelift runs on a
    /// thread of its own, which cannot be cancelled: one that outlives its budget finishes on
    /// its own (its work is bounded by the size cap) and its result is dropped; while
    /// [`MAX_COMPILES`] such threads are alive, further compiles are refused.
    pub(super) fn compile_bounded(
        &self,
        plugin: &str,
        bytes: &[u8],
    ) -> Result<Component, PluginError> {
        let refuse = |message: String| PluginError::LoadLimit {
            plugin: plugin.to_string(),
            message,
        };
        let cap = self.inner.config.max_component_bytes;
        if bytes.len() > cap {
            return Err(refuse(format!(
                "the component has {} bytes; at most {cap} are accepted",
                bytes.len()
            )));
        }
        let compiling = self.inner.compiling.clone();
        if compiling.fetch_add(1, Ordering::AcqRel) >= MAX_COMPILES {
            compiling.fetch_sub(1, Ordering::AcqRel);
            return Err(refuse(format!(
                "{MAX_COMPILES} compiles are still running (earlier ones past their timeout); \
                 try again later"
            )));
        }
        let (started_tx, started_rx) = std::sync::mpsc::sync_channel::<()>(1);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (engine, owned, gate) = (
            self.inner.engine.clone(),
            bytes.to_vec(),
            self.inner.compile_gate.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("wasm-compile".into())
            .spawn(move || {
                let _turn = gate
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                // The caller stopped waiting for its turn: do not compile for nobody.
                if started_tx.send(()).is_ok() {
                    let result = Component::new(&engine, &owned);
                    // The receiver is gone when the wait timed out: nothing to do.
                    let _ = tx.send(result);
                }
                compiling.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            self.inner.compiling.fetch_sub(1, Ordering::AcqRel);
            return Err(host_err(
                plugin,
                format!("cannot start a compile thread: {e}"),
            ));
        }
        let budget = self.compile_budget(bytes.len());
        let queue = budget
            .saturating_add(self.compile_budget(cap))
            .saturating_add(COMPILE_QUEUE_SLACK);
        if started_rx.recv_timeout(queue).is_err() {
            return Err(refuse(format!(
                "compiles are still running after {queue:?} of waiting for this one's turn \
                 (earlier ones past their timeout); try again later"
            )));
        }
        match rx.recv_timeout(budget) {
            Ok(result) => result.map_err(|e| PluginError::Compile {
                plugin: plugin.to_string(),
                message: capped(one_line(&e), ERROR_TEXT_CAP),
            }),
            Err(_) => Err(refuse(format!(
                "compiling the component took longer than {budget:?} ({} bytes)",
                bytes.len()
            ))),
        }
    }

    pub(super) fn lock_cache(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Component>> {
        // A panic while holding this lock cannot leave the map inconsistent: recover it.
        self.inner
            .compiled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
