//! When a failed delivery is tried again, and when it is given up.
//!
//! A delivery is retried on a connection error, a timeout, a 5xx and a 429; any other answer
//! (2xx delivered, other 4xx refused for good) ends it ([`Answer::outcome`]). The delay before
//! attempt `n + 1` is exponential, `base · 2ⁿ` capped at `cap`, then scaled by a jitter factor in
//! `[0.5, 1.0)` so that many deliveries failing together do not retry together. The jitter is
//! derived from the delivery's own key (target and event id) and the attempt by SHA-256, not drawn
//! from a random source: the schedule is the same on every process and in every test, and two
//! deliveries still spread out. After `max_attempts` attempts the delivery is given up.

use sha2::{Digest, Sha256};

/// What the receiver answered, as far as retrying goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// An HTTP status.
    Status(u16),
    /// No answer: the connection failed or timed out.
    NoAnswer,
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// Try again (if attempts remain).
    Retry,
    /// The receiver refused it for good (a 4xx other than 408 and 429).
    Refused,
}

impl Answer {
    pub fn outcome(self) -> Outcome {
        match self {
            Answer::Status(200..=299) => Outcome::Delivered,
            Answer::Status(408 | 429) | Answer::Status(500..=599) | Answer::NoAnswer => {
                Outcome::Retry
            }
            Answer::Status(_) => Outcome::Refused,
        }
    }
}

/// The retry schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base_ms: u64,
    pub cap_ms: u64,
    /// Attempts in all, the first included.
    pub max_attempts: u32,
}

impl Default for Backoff {
    /// 1 s, 2 s, 4 s … capped at 10 minutes, 10 attempts: nine delays of at most 511 s in all
    /// (255–511 s with the jitter), so a delivery is given up 4 to 9 minutes after its first
    /// attempt, plus the attempts' own time (a receiver down longer loses it; see
    /// `--notify-attempts`).
    fn default() -> Self {
        Backoff {
            base_ms: 1_000,
            cap_ms: 600_000,
            max_attempts: 10,
        }
    }
}

impl Backoff {
    /// The wait before the attempt after `attempts_made` (1 after the first), or `None` when the
    /// delivery is to be given up.
    pub fn delay_ms(&self, key: &str, attempts_made: u32) -> Option<u64> {
        if attempts_made >= self.max_attempts {
            return None;
        }
        let exponent = attempts_made.saturating_sub(1).min(62);
        let full = self
            .base_ms
            .saturating_mul(1u64 << exponent)
            .min(self.cap_ms);
        // Jitter in [0.5, 1.0): half the delay plus a share of the other half.
        let digest = Sha256::digest(format!("{key}#{attempts_made}").as_bytes());
        let mut word = [0u8; 8];
        word.copy_from_slice(&digest[..8]);
        let share = u64::from_be_bytes(word) % 1_000_000;
        Some(full / 2 + (full / 2).saturating_mul(share) / 1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_retry_on_errors_5xx_and_429_and_end_on_success_or_a_client_error() {
        assert_eq!(Answer::Status(204).outcome(), Outcome::Delivered);
        for retry in [
            Answer::Status(500),
            Answer::Status(503),
            Answer::Status(429),
            Answer::Status(408),
            Answer::NoAnswer,
        ] {
            assert_eq!(retry.outcome(), Outcome::Retry, "{retry:?}");
        }
        for refused in [
            Answer::Status(400),
            Answer::Status(401),
            Answer::Status(404),
            Answer::Status(410),
            Answer::Status(301),
        ] {
            assert_eq!(refused.outcome(), Outcome::Refused, "{refused:?}");
        }
    }

    #[test]
    fn delays_grow_exponentially_within_their_jitter_band_and_end_at_the_bound() {
        let backoff = Backoff::default();
        let mut previous_full = 0;
        for attempt in 1..backoff.max_attempts {
            let delay = backoff.delay_ms("target-1:event-42", attempt).unwrap();
            let full = (1_000u64 << (attempt - 1)).min(600_000);
            assert!(
                (full / 2..full).contains(&delay),
                "attempt {attempt}: {delay} ms not in [{}, {full})",
                full / 2
            );
            assert!(full >= previous_full);
            previous_full = full;
        }
        assert_eq!(
            backoff.delay_ms("target-1:event-42", backoff.max_attempts),
            None
        );
        assert_eq!(backoff.delay_ms("target-1:event-42", u32::MAX), None);
    }

    #[test]
    fn the_jitter_is_the_same_for_one_delivery_and_spreads_many() {
        let backoff = Backoff::default();
        assert_eq!(backoff.delay_ms("t:1", 3), backoff.delay_ms("t:1", 3));
        let delays: std::collections::BTreeSet<u64> = (0..50)
            .filter_map(|event| backoff.delay_ms(&format!("t:{event}"), 3))
            .collect();
        assert!(
            delays.len() > 40,
            "50 deliveries share {} delays",
            delays.len()
        );
    }
}
