//! The daemon's allocator settings.

/// Caps glibc's malloc arenas at one per core (at least 2).
///
/// glibc gives a thread that allocates while the others hold their arenas
/// an arena of its own, up to 8 per core, and each arena keeps the pages
/// its freed chunks sit in. The daemon's threads come and go all the time
/// (one per connection, four per interactive exec, two per io viewer), so
/// with the default its heap spread over 16 arenas on 2 cores and its RSS
/// kept creeping up under the soak test: +15% in 5 minutes, against a
/// flat figure with 2 arenas (docs/RELIABILITY.md). With one arena per
/// core, two threads running at once still rarely share one.
///
/// An explicit `MALLOC_ARENA_MAX` or `GLIBC_TUNABLES` wins: nothing is
/// changed then. Other C libraries: nothing to do.
pub fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("MALLOC_ARENA_MAX").is_some()
            || std::env::var_os("GLIBC_TUNABLES").is_some()
        {
            return;
        }
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let arenas = libc::c_int::try_from(cores.max(2)).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets one of glibc's allocator tunables; it
        // takes the allocator's own lock and touches no memory of ours.
        let ok = unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) };
        if ok == 0 {
            log::warn!("could not cap malloc arenas at {arenas}");
        }
    }
}
