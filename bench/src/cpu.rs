//! CPU time as the kernel accounts it (`getrusage`), for the benches that report CPU per
//! operation: this process's own (all threads), or that of every child it has waited for.

use std::time::Duration;

/// User plus system CPU time of this process so far, over all its threads.
pub fn process_cpu() -> Duration {
    rusage_cpu(libc::RUSAGE_SELF)
}

/// User plus system CPU time of every waited-for child so far.
pub fn children_cpu() -> Duration {
    rusage_cpu(libc::RUSAGE_CHILDREN)
}

/// User plus system time of `who`; zero if the kernel refuses (the bench then reports no CPU
/// rather than failing).
fn rusage_cpu(who: libc::c_int) -> Duration {
    // SAFETY: getrusage only writes the struct it is given, which lives on this stack frame
    // and starts zeroed (a valid `rusage`).
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(who, &mut usage) != 0 {
            return Duration::ZERO;
        }
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}
