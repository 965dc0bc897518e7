//! The operator's heap allocator (mimalloc, the binary's global allocator; glibc malloc with
//! the `system-allocator` feature): the one call that hands its freed pages back to the OS at
//! a moment the operator knows a large working set has just been freed. Nothing else here
//! allocates or tracks memory.

/// Returns the calling thread's empty allocator pages, and every page freed so far in the
/// process, to the OS now.
///
/// mimalloc returns a freed page to the OS only at a later page free at least 1 s after it
/// (`MIMALLOC_PURGE_DELAY`); a quiet operator may make none for minutes, so a thread that
/// built a large transient working set and is about to end calls this. (Shortening that delay
/// for the whole process instead would also purge, and fault back in, pages that bursts of
/// reconciles free and reuse at once.) Costs a walk over the calling thread's pages and the
/// arenas, and an madvise per freed range: call it rarely (once a re-plan). A no-op under glibc
/// malloc.
pub fn release_freed_pages() {
    #[cfg(not(feature = "system-allocator"))]
    #[allow(unsafe_code)]
    // SAFETY: `mi_collect` takes no pointers and works on mimalloc's own state, which it
    // synchronises itself; any thread may call it at any time (mimalloc.h). When mimalloc is
    // not the global allocator (this crate's unit tests) it has nothing of ours to collect.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}
