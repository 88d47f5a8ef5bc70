//! An approval asked of the session's own client (SPEC §19.4, `approve_via_elicitation`): what
//! the client's reply to the yes/no form resolves. The gateway asks and reads the reply off the
//! wire; the rule is here.

use crate::vocab::ApprovalResolution;

/// The client's reply to an approval form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElicitedReply {
    /// The form was accepted; `approve` is its answer (`None`: missing or not a boolean).
    Accepted {
        approve: Option<bool>,
    },
    Declined,
    /// Cancelled, or an action the gateway does not know.
    Cancelled,
}

/// The resolution a reply makes and the reason recorded with it: yes approves once (as the
/// session's principal, so a profile without self-approval refuses it, §10.4); no, an accept
/// without a yes, or a decline denies; a cancel changes nothing (nor does no answer at all).
pub fn resolution_of(reply: ElicitedReply) -> Option<(ApprovalResolution, &'static str)> {
    match reply {
        ElicitedReply::Accepted {
            approve: Some(true),
        } => Some((
            ApprovalResolution::ApproveOnce,
            "approved by the client (elicitation)",
        )),
        ElicitedReply::Accepted { .. } | ElicitedReply::Declined => Some((
            ApprovalResolution::Deny,
            "declined by the client (elicitation)",
        )),
        ElicitedReply::Cancelled => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_explicit_yes_approves_and_a_cancel_changes_nothing() {
        let resolved = |reply| resolution_of(reply).map(|(resolution, _)| resolution);
        assert_eq!(
            resolved(ElicitedReply::Accepted {
                approve: Some(true)
            }),
            Some(ApprovalResolution::ApproveOnce)
        );
        for reply in [
            ElicitedReply::Accepted {
                approve: Some(false),
            },
            ElicitedReply::Accepted { approve: None },
            ElicitedReply::Declined,
        ] {
            assert_eq!(resolved(reply), Some(ApprovalResolution::Deny), "{reply:?}");
        }
        assert_eq!(resolved(ElicitedReply::Cancelled), None);
    }
}
