//! Step 5 of the pipeline (SPEC §9.2, §19.3, §19.7): a new call never repeats an identical call
//! whose outcome is not known. "Identical" is the same tenant, tool name and effective arguments
//! hash; the twins are read by `StoreTx::twins` inside the call's first transaction, and this
//! module decides from them alone.
//!
//! Two kinds of twin refuse a call:
//! - an `UNCERTAIN` one (`policy.uncertain.repeat`): of the same run whatever its settlement
//!   (§16 #18), or, for a gateway run, of any run of the tenant while unsettled (§19.3: an agent
//!   restarted after a crash starts a new run and must not repeat what its last one left
//!   unknown);
//! - one still in flight (`policy.uncertain.in_flight`, §19.7): `RUNNING`, `non_idempotent` and
//!   watermarked, of the same run or, for a gateway run, of any run of the tenant, whichever
//!   process holds it. Before this rule a host that retried at once after a gateway crash
//!   reached the upstream a second time: the first invocation's lease had not run out, so
//!   recovery had not made it `UNCERTAIN` yet. A `conditionally_idempotent` twin in flight is
//!   not one: its key deduplicates the effect. Once the twin has an outcome, an identical call
//!   is a new call.

use crate::ids::{InvocationId, RunId};
use crate::invocation::outcome::codes;
use crate::store::{Twin, TwinScope};
use crate::vocab::{IdempotencyClass, InvocationStatus};

/// Why an identical earlier call keeps a new one from running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// The twin's outcome is unknown and awaits a human (§9.5).
    Uncertain(InvocationId),
    /// The twin's effect was sent and its outcome has not come back yet.
    InFlight(InvocationId),
}

impl Repeat {
    pub fn reason_code(self) -> &'static str {
        match self {
            Repeat::Uncertain(_) => codes::UNCERTAIN_REPEAT,
            Repeat::InFlight(_) => codes::UNCERTAIN_IN_FLIGHT,
        }
    }

    /// The refusal's message: §9.3's table for a repeat; for a call in flight it names the
    /// twin (§19.7), so a reviewer can find the invocation the retry waits for.
    pub fn message(self) -> String {
        match self {
            Repeat::Uncertain(_) => {
                crate::invocation::outcome::message_for(codes::UNCERTAIN_REPEAT).to_owned()
            }
            Repeat::InFlight(id) => format!(
                "Not performed. An identical earlier call (invocation {id}) is still in flight; \
                 its outcome is not known yet."
            ),
        }
    }
}

/// Whose twins a call of `run` is compared with: a gateway run's are the tenant's.
pub fn scope_for(run: RunId, across_runs: bool) -> TwinScope {
    if across_runs {
        TwinScope::Tenant
    } else {
        TwinScope::Run(run)
    }
}

/// Whether a new call of `run` with these twins (as [`scope_for`] read them) must be refused.
/// An `UNCERTAIN` twin wins over one in flight: it is the state a human has to settle, and the
/// one every retry will meet once recovery has run.
pub fn repeat_of(twins: &[Twin], run: RunId) -> Option<Repeat> {
    let uncertain = twins.iter().find(|t| {
        t.invocation.status == InvocationStatus::Uncertain
            && (t.invocation.run_id == run || !t.settled)
    });
    if let Some(twin) = uncertain {
        return Some(Repeat::Uncertain(twin.invocation.id));
    }
    twins
        .iter()
        .find(|t| {
            let row = &t.invocation;
            row.status == InvocationStatus::Running
                && row.idempotency_class == IdempotencyClass::NonIdempotent
                && row.effect_sent_at.is_some()
        })
        .map(|t| Repeat::InFlight(t.invocation.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixtures::{sample_invocation, sample_run, sample_session};
    use crate::vocab::RunStatus;

    fn run(n: u128) -> RunId {
        sample_run(n, sample_session(n).id, RunStatus::Running).id
    }

    /// A watermarked invocation of run `n` in `status`, of `class`.
    fn twin(status: InvocationStatus, class: IdempotencyClass, n: u128, settled: bool) -> Twin {
        let of = sample_run(n, sample_session(n).id, RunStatus::Running);
        let mut row = sample_invocation(10 + n, &of, 1, "c1", status);
        row.idempotency_class = class;
        Twin {
            invocation: row,
            settled,
        }
    }

    #[test]
    fn a_watermarked_non_idempotent_call_in_flight_refuses_its_twin() {
        let t = twin(
            InvocationStatus::Running,
            IdempotencyClass::NonIdempotent,
            1,
            false,
        );
        assert_eq!(
            repeat_of(std::slice::from_ref(&t), run(2)),
            Some(Repeat::InFlight(t.invocation.id))
        );
    }

    #[test]
    fn a_call_in_flight_that_is_keyed_unwatermarked_or_repeatable_refuses_nothing() {
        for class in [
            IdempotencyClass::ConditionallyIdempotent,
            IdempotencyClass::Idempotent,
            IdempotencyClass::ReadOnly,
        ] {
            let t = twin(InvocationStatus::Running, class, 1, false);
            assert_eq!(repeat_of(&[t], run(2)), None, "{class:?}");
        }
        let mut t = twin(
            InvocationStatus::Running,
            IdempotencyClass::NonIdempotent,
            1,
            false,
        );
        t.invocation.effect_sent_at = None;
        assert_eq!(repeat_of(&[t], run(2)), None);
    }

    #[test]
    fn an_uncertain_twin_refuses_unless_settled_in_another_run_and_wins_over_one_in_flight() {
        let flying = twin(
            InvocationStatus::Running,
            IdempotencyClass::NonIdempotent,
            1,
            false,
        );
        let settled = twin(
            InvocationStatus::Uncertain,
            IdempotencyClass::NonIdempotent,
            1,
            true,
        );
        // A settled twin of another run no longer refuses; one of the same run always does.
        assert_eq!(repeat_of(std::slice::from_ref(&settled), run(2)), None);
        assert_eq!(
            repeat_of(std::slice::from_ref(&settled), run(1)),
            Some(Repeat::Uncertain(settled.invocation.id))
        );
        let open = twin(
            InvocationStatus::Uncertain,
            IdempotencyClass::NonIdempotent,
            3,
            false,
        );
        assert_eq!(
            repeat_of(&[flying, open.clone()], run(2)),
            Some(Repeat::Uncertain(open.invocation.id))
        );
    }

    #[test]
    fn the_refusals_carry_their_codes_and_the_in_flight_one_names_its_twin() {
        let id = InvocationId(uuid::Uuid::from_u128(7));
        assert_eq!(
            Repeat::InFlight(id).reason_code(),
            "policy.uncertain.in_flight"
        );
        assert_eq!(
            Repeat::Uncertain(id).reason_code(),
            "policy.uncertain.repeat"
        );
        assert!(Repeat::InFlight(id).message().contains(&id.to_string()));
        assert_eq!(
            Repeat::Uncertain(id).message(),
            "Not performed. An identical earlier call has an unknown outcome."
        );
    }
}
