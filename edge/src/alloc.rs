//! What the edge asks of its allocator besides memory.

/// Returns memory freed so far to the system now. mimalloc (the edge's
/// global allocator, `main.rs`) purges freed pages lazily, at a later
/// allocation of the thread that freed them: a thread gone quiet keeps
/// them, so an edge gone idle after a burst kept 20–35 MiB it no longer
/// used (`loadtest/memory`: the base run's RSS after a pass 60–77 MiB, 41
/// with every free purged at once). Purging at every free instead would
/// put an `madvise` on the busy flusher's path (1.5–2 ms per megabytes
/// freed, issue 27): so only where the edge knows it went idle.
pub fn give_back_freed() {
    #[cfg(feature = "mimalloc")]
    // SAFETY: takes no pointer; mimalloc allows it from any thread, any time.
    unsafe {
        libmimalloc_sys::mi_collect(true)
    }
}
