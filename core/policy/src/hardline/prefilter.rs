//! Whether a reading may skip what cannot change a decision: a switch of its own, below the
//! readings and every rule that reads them.

/// Whether the skips that cannot change a decision are taken (they are, except in the property
/// test that shows they change nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefilter {
    On,
    Off,
}
