//! The clock and id source both madsim worlds (`world`, `connections`) hand to core's `Env`:
//! virtual time from one fixed epoch and seeded sequential UUIDs, so a seed replays exactly.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use airlock_core::ports::{BoxFut, Clock, IdSource};
use airlock_core::time::Timestamp;
use madsim::time::{Instant, sleep};

use crate::store::Moment;

/// 2026-01-01T00:00:00Z: the wall clock of every world starts here.
pub const EPOCH_MICROS: i64 = 1_767_225_600_000_000;

/// The simulated clock: madsim's virtual time from [`EPOCH_MICROS`], plus forward jumps of the
/// wall clock (timers keep their durations, as monotonic timers do). Clones share the jumps.
#[derive(Clone)]
pub struct SimClock {
    start: Instant,
    jump_micros: Arc<AtomicI64>,
}

impl SimClock {
    /// A clock whose wall time is [`EPOCH_MICROS`] now.
    pub fn starting_now() -> Self {
        SimClock {
            start: Instant::now(),
            jump_micros: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Simulated time since the world began (jumps excluded).
    pub fn elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(self.start)
    }

    /// Simulated monotonic microseconds since the world began.
    pub fn mono(&self) -> u64 {
        u64::try_from(self.elapsed().as_micros()).unwrap_or(u64::MAX / 2)
    }

    /// Both readings at once, for the store's commit log.
    pub fn moment(&self) -> Moment {
        Moment {
            mono: self.mono(),
            wall: self.now(),
        }
    }

    /// Moves the wall clock forward by `seconds`; timers already armed keep their durations.
    pub fn jump_wall(&self, seconds: i64) {
        self.jump_micros
            .fetch_add(seconds * 1_000_000, Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        let elapsed = i64::try_from(self.elapsed().as_micros()).unwrap_or(i64::MAX / 2);
        Timestamp::from_micros(EPOCH_MICROS + elapsed + self.jump_micros.load(Ordering::SeqCst))
    }

    fn sleep_until(&self, t: Timestamp) -> BoxFut<'static, ()> {
        let micros = (t.as_micros() - self.now().as_micros()).max(0);
        Box::pin(sleep(Duration::from_micros(micros as u64)))
    }
}

/// Seeded, sequential v4-shaped UUIDs: deterministic under madsim's schedule. The salt (a seed,
/// a node) is the high half, the sequence number the low half.
pub struct SeqIds {
    salt: u64,
    next: AtomicU64,
}

impl SeqIds {
    /// Ids of `salt` numbered from `first`.
    pub fn new(salt: u64, first: u64) -> Self {
        SeqIds {
            salt,
            next: AtomicU64::new(first),
        }
    }
}

impl IdSource for SeqIds {
    fn new_uuid(&self) -> uuid::Uuid {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        uuid::Builder::from_u128((u128::from(self.salt) << 64) | u128::from(n))
            .with_version(uuid::Version::Random)
            .with_variant(uuid::Variant::RFC4122)
            .into_uuid()
    }
}
