//! What the engine decided and why, before it becomes text (SPEC §4.1, §6.1). The reason code
//! and explanation are written from the reason when asked for: [`Verdict::to_decision`] builds
//! the owned [`PolicyDecision`], and [`Verdict::write_json`] writes the decision's JSON
//! straight to its output, byte for byte what serializing that decision gives, with no
//! intermediate strings (`airlock policy eval --jsonl`).

use std::borrow::Cow;
use std::io::{self, Write};

use crate::action::PolicyDecision;
use crate::hardline::HardlineRule;
use crate::ruleset::Ruleset;
use crate::vocab::{PolicyDecisionType, SideEffectClass};

/// Which step decided.
#[derive(Debug, Clone, Copy)]
pub enum Reason<'r> {
    /// Step 0: skill authoring from a turn that is not the user's.
    SkillOrigin,
    /// Step 1: this hardline rule matched.
    Hardline(&'r HardlineRule),
    /// Steps 3–5: the matrix row of this class, raised by the overlay when `untrusted`.
    Matrix {
        side_effect: SideEffectClass,
        untrusted: bool,
    },
}

/// A decision with the reason it was made for, under one ruleset.
#[derive(Debug, Clone, Copy)]
pub struct Verdict<'r> {
    pub decision: PolicyDecisionType,
    pub reason: Reason<'r>,
    pub ruleset: &'r Ruleset,
}

const SKILL_ORIGIN_CODE: &str = "policy.skill.origin_untrusted";
const SKILL_ORIGIN_EXPLANATION: &str = "Skill authoring requires a user-origin turn.";

impl<'r> Verdict<'r> {
    /// The reason code (SPEC §4.1).
    pub fn reason_code(&self) -> Cow<'r, str> {
        match self.reason {
            Reason::SkillOrigin => Cow::Borrowed(SKILL_ORIGIN_CODE),
            Reason::Hardline(rule) => Cow::Borrowed(&rule.message_code),
            Reason::Matrix { side_effect, .. } => {
                Cow::Owned(format!("policy.matrix.{side_effect}"))
            }
        }
    }

    /// The explanation for audit and approvers.
    pub fn explanation(&self) -> String {
        match self.reason {
            Reason::SkillOrigin => SKILL_ORIGIN_EXPLANATION.to_owned(),
            Reason::Hardline(rule) => format!("Hardline rule {} denied the action.", rule.id),
            Reason::Matrix {
                side_effect,
                untrusted,
            } => format!(
                "The {} profile evaluated {side_effect}{}",
                self.ruleset.profile.name,
                overlay_suffix(untrusted)
            ),
        }
    }

    /// The owned decision.
    pub fn to_decision(&self) -> PolicyDecision {
        PolicyDecision {
            decision: self.decision,
            reason_code: self.reason_code().into_owned(),
            explanation: self.explanation(),
            policy_version: self.ruleset.version.as_str().to_owned(),
            modified_arguments: None,
        }
    }

    /// The compact decision JSON, exactly as `serde_json` writes [`Self::to_decision`], without
    /// building it: keys in the order of SPEC §4.1, each string escaped as serde_json escapes.
    pub fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(b"{\"decision\":\"")?;
        out.write_all(self.decision.as_str().as_bytes())?;
        out.write_all(b"\",\"reason_code\":\"")?;
        match self.reason {
            Reason::SkillOrigin => out.write_all(SKILL_ORIGIN_CODE.as_bytes())?,
            Reason::Hardline(rule) => write_escaped(out, &rule.message_code)?,
            Reason::Matrix { side_effect, .. } => {
                out.write_all(b"policy.matrix.")?;
                out.write_all(side_effect.as_str().as_bytes())?;
            }
        }
        out.write_all(b"\",\"explanation\":\"")?;
        match self.reason {
            Reason::SkillOrigin => out.write_all(SKILL_ORIGIN_EXPLANATION.as_bytes())?,
            Reason::Hardline(rule) => {
                out.write_all(b"Hardline rule ")?;
                write_escaped(out, &rule.id)?;
                out.write_all(b" denied the action.")?;
            }
            Reason::Matrix {
                side_effect,
                untrusted,
            } => {
                out.write_all(b"The ")?;
                write_escaped(out, &self.ruleset.profile.name)?;
                out.write_all(b" profile evaluated ")?;
                out.write_all(side_effect.as_str().as_bytes())?;
                out.write_all(overlay_suffix(untrusted).as_bytes())?;
            }
        }
        out.write_all(b"\",\"policy_version\":\"")?;
        write_escaped(out, self.ruleset.version.as_str())?;
        out.write_all(b"\",\"modified_arguments\":null}")
    }
}

fn overlay_suffix(untrusted: bool) -> &'static str {
    if untrusted {
        "; untrusted content requires approval."
    } else {
        "."
    }
}

/// The inside of a JSON string as serde_json writes it: `"` and `\` escaped, the control
/// characters below U+0020 as `\b`, `\t`, `\n`, `\f`, `\r` or `\u00xx` (lowercase hex), and
/// everything else as it is. Escaping is per character, so the pieces of one string may be
/// escaped one by one.
pub fn write_escaped(out: &mut impl Write, text: &str) -> io::Result<()> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    let mut start = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        let short: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0a => b"\\n",
            0x0c => b"\\f",
            0x0d => b"\\r",
            0x00..=0x1f => &[],
            _ => continue,
        };
        out.write_all(&bytes[start..at])?;
        if short.is_empty() {
            let code = [
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ];
            out.write_all(&code)?;
        } else {
            out.write_all(short)?;
        }
        start = at + 1;
    }
    out.write_all(&bytes[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str) -> String {
        let mut out = Vec::new();
        write_escaped(&mut out, text).expect("a Vec takes every write");
        String::from_utf8(out).expect("escaping keeps UTF-8")
    }

    #[test]
    fn escaping_is_serde_json_s_for_every_ascii_byte_and_beyond() {
        let mut every: String = (0u8..0x80).map(char::from).collect();
        every.push_str("é€😀\u{2028}\u{7f}");
        let serde = serde_json::to_string(&every).expect("a string serializes");
        assert_eq!(format!("\"{}\"", escaped(&every)), serde);
        for text in ["", "plain", "\"", "\\\\", "a\u{1}b", "tab\there"] {
            let serde = serde_json::to_string(text).expect("a string serializes");
            assert_eq!(format!("\"{}\"", escaped(text)), serde, "{text:?}");
        }
    }
}
