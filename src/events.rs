//! Kubernetes Event helpers shared by the controllers.
//!
//! Owns: how an Event's `action` is chosen. Must not touch: recording itself (kube-runtime's
//! `Recorder` does that).

/// The `action` of an Event with `note`.
///
/// kube-runtime's `Recorder` folds Events with the same type, reason, action and objects into
/// one series that keeps the first note. Repeats of one note should fold (a job waiting for
/// capacity must not flood the events API), but a new note is news: "loaded version B" must not
/// show as a second count of "loaded version A". A digest of the note in `action` does both.
pub fn action(base: &str, note: &str) -> String {
    // FNV-1a: stable across processes and releases, unlike std's hasher.
    let mut hash: u32 = 0x811c_9dc5;
    for byte in note.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{base}-{hash:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_note_folds_and_a_new_note_does_not() {
        assert_eq!(action("Reconcile", "a"), action("Reconcile", "a"));
        assert_ne!(action("Reconcile", "a"), action("Reconcile", "b"));
        assert!(action("LoadPlugin", "x").starts_with("LoadPlugin-"));
        assert_eq!(action("A", "").len(), "A-".len() + 8);
    }
}
