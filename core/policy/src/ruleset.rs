//! A loaded ruleset: the profile and hardline rules the engine decides with, and their version
//! (SPEC §7). Below the engine, which only reads it.

use super::hardline::HardlineRule;
use super::loader::{self, PolicyLoadError};
use super::profile::Profile;
use super::shipped;
use super::version::PolicyVersion;

/// The number of matrix rows: one per side-effect class.
pub const MATRIX_RULE_COUNT: usize = 15;

/// A loaded, immutable ruleset: a profile, hardline rules in file order, and their version.
#[derive(Debug, Clone)]
pub struct Ruleset {
    pub profile: Profile,
    pub hardline: Vec<HardlineRule>,
    pub version: PolicyVersion,
}

impl Ruleset {
    /// Loads both files; either everything loads or the first error of SPEC §7.4 is returned.
    pub fn load(profile_bytes: &[u8], hardline_bytes: &[u8]) -> Result<Ruleset, PolicyLoadError> {
        let profile = loader::load_profile(profile_bytes)?;
        let hardline = loader::load_hardline(hardline_bytes)?;
        let version = PolicyVersion::of(&profile.name, profile_bytes, hardline_bytes);
        Ok(Ruleset {
            profile,
            hardline,
            version,
        })
    }

    /// The embedded shipped files.
    pub fn shipped() -> Result<Ruleset, PolicyLoadError> {
        Ruleset::load(shipped::DEFAULT_PROFILE, shipped::HARDLINE)
    }

    /// Matrix rows plus hardline rules (26 for the shipped files), as `policy_profiles` records.
    pub fn rule_count(&self) -> usize {
        MATRIX_RULE_COUNT + self.hardline.len()
    }
}
