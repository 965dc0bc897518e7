//! The on-disk cache of pulled manifests and components, content-addressed by sha256
//! (`<dir>/blobs/sha256/<hex>`), so a restart, or a ConfigMap re-pointed at a digest seen
//! before, loads without the registry.
//!
//! Every read is verified: a file whose bytes do not hash to its name is deleted and reported
//! as a miss, so a corrupted or tampered cache costs a pull, never a wrong component. Writes go
//! to a temporary file renamed into place (a crash leaves no half file under a digest name).
//! The cache holds at most `budget` bytes: past it the least recently written files go.
//!
//! Owns: the `blobs/` folder. Must not touch: what the bytes are.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Digest;

#[derive(Clone, Debug)]
pub struct BlobCache {
    dir: Arc<PathBuf>,
    budget: u64,
}

impl BlobCache {
    /// A cache under `root` (created if missing) holding at most `budget` bytes.
    pub fn open(root: &Path, budget: u64) -> std::io::Result<BlobCache> {
        let dir = root.join("blobs").join("sha256");
        std::fs::create_dir_all(&dir)?;
        Ok(BlobCache {
            dir: Arc::new(dir),
            budget,
        })
    }

    fn path(&self, digest: Digest) -> PathBuf {
        self.dir.join(digest.hex())
    }

    /// The bytes of `digest` if cached, intact and at most `cap` bytes.
    pub async fn get(&self, digest: Digest, cap: usize) -> Option<Vec<u8>> {
        let cache = self.clone();
        let read = tokio::task::spawn_blocking(move || cache.get_blocking(digest, cap)).await;
        read.ok().flatten()
    }

    /// [`Self::get`], blocking.
    pub fn get_blocking(&self, digest: Digest, cap: usize) -> Option<Vec<u8>> {
        read_verified(&self.path(digest), digest, cap)
    }

    /// Stores `bytes` (whose digest the caller verified) under their digest; a failure is
    /// logged, never an error: the cache only saves work.
    pub async fn put(&self, digest: Digest, bytes: &[u8]) {
        let (cache, owned) = (self.clone(), bytes.to_vec());
        let written = tokio::task::spawn_blocking(move || cache.put_blocking(digest, &owned)).await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, %digest, dir = %self.dir.display(), "cannot write to the plugin cache");
            }
            Err(error) => tracing::warn!(%error, "plugin cache write task failed"),
        }
    }

    /// [`Self::put`], blocking, with the error.
    pub fn put_blocking(&self, digest: Digest, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.path(digest);
        if std::fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64) {
            return Ok(());
        }
        if bytes.len() as u64 > self.budget {
            return Ok(());
        }
        // Unique per write: two pulls of one digest at once must not share a temporary file.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self
            .dir
            .join(format!(".{}.{}.{n}.tmp", digest.hex(), std::process::id()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &path)?;
        self.evict(&path);
        Ok(())
    }

    /// Deletes the oldest files until the cache fits its budget (`keep` stays).
    fn evict(&self, keep: &Path) {
        let Ok(entries) = std::fs::read_dir(self.dir.as_path()) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                m.is_file().then(|| {
                    (
                        m.modified().unwrap_or(std::time::UNIX_EPOCH),
                        m.len(),
                        e.path(),
                    )
                })
            })
            .collect();
        let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= self.budget {
                break;
            }
            if path != keep && std::fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(len);
            }
        }
    }
}

fn read_verified(path: &Path, digest: Digest, cap: usize) -> Option<Vec<u8>> {
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(cap as u64 + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() > cap {
        return None;
    }
    if Digest::of(&bytes) != digest {
        tracing::warn!(path = %path.display(), %digest, "plugin cache file does not match its digest; removed");
        let _ = std::fs::remove_file(path);
        return None;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn verified_on_read_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlobCache::open(dir.path(), 10).unwrap();
        let (a, b) = (b"abcdef".to_vec(), b"ghijkl".to_vec());
        let (da, db) = (Digest::of(&a), Digest::of(&b));
        cache.put(da, &a).await;
        assert_eq!(cache.get(da, 100).await.as_deref(), Some(&a[..]));
        assert_eq!(cache.get(da, 5).await, None, "over the cap");
        // A tampered file is a miss, and is removed.
        std::fs::write(cache.path(da), b"abcdeX").unwrap();
        assert_eq!(cache.get(da, 100).await, None);
        assert!(!cache.path(da).exists());
        // Over the budget the older file goes.
        cache.put(da, &a).await;
        // Real time: eviction orders files by their modification time, which the OS stamps.
        std::thread::sleep(std::time::Duration::from_millis(20));
        cache.put(db, &b).await;
        assert!(cache.get(db, 100).await.is_some());
        assert!(cache.get(da, 100).await.is_none());
        // Larger than the whole budget: not kept.
        let big = vec![7u8; 11];
        cache.put(Digest::of(&big), &big).await;
        assert!(cache.get(Digest::of(&big), 100).await.is_none());
    }
}
