//! Stdio upstreams never outlive the gateway that started them (SPEC §19.7).
//!
//! rmcp kills a child when its transport drops, but it does so from a task it spawns, which
//! never runs when the gateway exits, and nothing runs after a kill -9. A server that ignores
//! its closed stdin (or is blocked elsewhere) then stays behind, holding files, ports and
//! credentials nobody watches. So every stdio upstream is started:
//! - with tokio's `kill_on_drop`, which kills it synchronously when its handle drops (a closed
//!   upstream, a runtime shutting down);
//! - on Linux, with `PR_SET_PDEATHSIG = SIGKILL`, so the kernel kills it when the gateway dies
//!   however it dies. That signal follows the *thread* that forked the child, not the process,
//!   and tokio's worker threads come and go (`block_in_place` hands a worker's core to a new
//!   thread, and idle blocking threads exit), so children are forked by one thread of their own
//!   that lives as long as the process ([`spawn`]).

use std::io;
use std::process::Stdio;
use std::sync::OnceLock;
use std::sync::mpsc;

use rmcp::transport::TokioChildProcess;

/// Work for the spawner thread.
type Job = Box<dyn FnOnce() + Send>;

/// The thread that forks every stdio upstream: it is never joined and never returns while the
/// process runs, so a child's parent-death signal fires only when the gateway itself ends.
fn spawner() -> Option<&'static mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    SPAWNER
        .get_or_init(|| {
            let (jobs, queue) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("airlock-upstream-spawner".into())
                .spawn(move || {
                    for job in queue {
                        // A panicking start must not end this thread: the kernel would kill
                        // every upstream it forked. The caller then hears its start dropped.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                })
                .ok()
                .map(|_| jobs)
        })
        .as_ref()
}

/// Starts `command` as a stdio upstream (stdin and stdout piped to the transport, stderr the
/// gateway's) that dies with the gateway. Must be called within a tokio runtime, whose reactor
/// then carries the child's pipes.
pub async fn spawn(mut command: tokio::process::Command) -> io::Result<TokioChildProcess> {
    command.kill_on_drop(true);
    dies_with_the_gateway(&mut command);
    let runtime = tokio::runtime::Handle::current();
    let (answer, answered) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _entered = runtime.enter();
        let spawned = TokioChildProcess::builder(command)
            .stderr(Stdio::inherit())
            .spawn()
            .map(|(transport, _stderr)| transport);
        // The caller may have given up waiting; the child then drops and is killed.
        let _ = answer.send(spawned);
    });
    spawner()
        .ok_or_else(|| io::Error::other("the upstream spawner thread could not be started"))?
        .send(job)
        .map_err(|_| io::Error::other("the upstream spawner thread is gone"))?;
    answered
        .await
        .map_err(|_| io::Error::other("the upstream spawner thread dropped the start"))?
}

#[cfg(target_os = "linux")]
fn dies_with_the_gateway(command: &mut tokio::process::Command) {
    let gateway = std::process::id();
    // SAFETY: the closure runs in the forked child before `exec`, and only calls the
    // async-signal-safe `prctl` and `getppid`; it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The gateway may have died between the fork and the prctl; then the signal will
            // never come, so the child must not start at all.
            if libc::getppid() as u32 != gateway {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Elsewhere only `kill_on_drop` holds: a kill -9 of the gateway leaves its children.
#[cfg(not(target_os = "linux"))]
fn dies_with_the_gateway(_command: &mut tokio::process::Command) {}
