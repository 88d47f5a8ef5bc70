//! Ids a person types: a whole UUID, or a prefix of at least 8 hex digits, as `--output table`
//! shows them. A prefix is matched against the ids the command could act on (the pending
//! approvals, the UNCERTAIN invocations); it must name exactly one. An ambiguous prefix is
//! refused (exit 2) with the matches listed, and one that matches nothing is `not_found`.

use std::str::FromStr;

use uuid::Uuid;

/// The fewest hex digits a prefix must have.
pub const MIN_PREFIX_DIGITS: usize = 8;

/// An id argument as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdArg {
    Whole(Uuid),
    /// Lower-cased, hyphens as typed.
    Prefix(String),
}

impl FromStr for IdArg {
    type Err = String;

    fn from_str(text: &str) -> Result<IdArg, String> {
        if let Ok(id) = Uuid::try_parse(text) {
            return Ok(IdArg::Whole(id));
        }
        let prefix = text.to_ascii_lowercase();
        let digits = prefix.chars().filter(char::is_ascii_hexdigit).count();
        let well_formed = prefix.len() <= 36
            && prefix.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
            && digits >= MIN_PREFIX_DIGITS;
        if well_formed {
            Ok(IdArg::Prefix(prefix))
        } else {
            Err(format!(
                "'{}' is neither an id nor a prefix of one (at least {MIN_PREFIX_DIGITS} hex digits)",
                text.escape_default()
            ))
        }
    }
}

/// Why a prefix named no single id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// Nothing it could act on starts with the prefix.
    NoMatch(String),
    /// Several do: the matches, in the order given.
    Ambiguous(String, Vec<Uuid>),
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unresolved::NoMatch(prefix) => write!(f, "no id starts with '{prefix}'"),
            Unresolved::Ambiguous(prefix, matches) => {
                let listed: Vec<String> = matches.iter().map(Uuid::to_string).collect();
                write!(
                    f,
                    "'{prefix}' is the start of {} ids: {}; give more of it",
                    matches.len(),
                    listed.join(", ")
                )
            }
        }
    }
}

impl IdArg {
    /// The one id this names among `candidates` (a whole id names itself, candidate or not:
    /// the command then answers for it as it would for any id).
    pub fn resolve(&self, candidates: &[Uuid]) -> Result<Uuid, Unresolved> {
        let prefix = match self {
            IdArg::Whole(id) => return Ok(*id),
            IdArg::Prefix(prefix) => prefix,
        };
        let matches: Vec<Uuid> = candidates
            .iter()
            .copied()
            .filter(|id| id.to_string().starts_with(prefix.as_str()))
            .collect();
        match matches.as_slice() {
            [] => Err(Unresolved::NoMatch(prefix.clone())),
            [one] => Ok(*one),
            _ => Err(Unresolved::Ambiguous(prefix.clone(), matches)),
        }
    }

    /// Whether this is a prefix (the caller then needs the candidates).
    pub fn is_prefix(&self) -> bool {
        matches!(self, IdArg::Prefix(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> Uuid {
        Uuid::try_parse(text).expect("uuid")
    }

    #[test]
    fn whole_ids_and_prefixes_of_eight_hex_digits_parse_and_nothing_else() {
        let whole = "0a1b2c3d-0000-4000-8000-000000000001";
        assert_eq!(whole.parse(), Ok(IdArg::Whole(id(whole))));
        assert_eq!("0A1B2C3D".parse(), Ok(IdArg::Prefix("0a1b2c3d".into())));
        assert_eq!(
            "0a1b2c3d-00".parse(),
            Ok(IdArg::Prefix("0a1b2c3d-00".into()))
        );
        for bad in [
            "0a1b2c3",
            "0a1b-2c3",
            "xyz12345",
            "",
            "0a1b2c3d 1",
            "../../etc",
        ] {
            assert!(bad.parse::<IdArg>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_prefix_names_one_candidate_or_is_refused() {
        let a = id("0a1b2c3d-0000-4000-8000-000000000001");
        let b = id("0a1b2c3d-1111-4000-8000-000000000002");
        let c = id("ffffffff-0000-4000-8000-000000000003");
        let arg = |t: &str| t.parse::<IdArg>().expect("parses");
        assert_eq!(arg("ffffffff").resolve(&[a, b, c]), Ok(c));
        assert_eq!(arg("0a1b2c3d-1").resolve(&[a, b, c]), Ok(b));
        assert_eq!(
            arg("0a1b2c3d").resolve(&[a, b, c]),
            Err(Unresolved::Ambiguous("0a1b2c3d".into(), vec![a, b]))
        );
        assert_eq!(
            arg("12345678").resolve(&[a, b, c]),
            Err(Unresolved::NoMatch("12345678".into()))
        );
        let text = Unresolved::Ambiguous("0a1b2c3d".into(), vec![a, b]).to_string();
        assert!(
            text.contains(&a.to_string()) && text.contains(&b.to_string()),
            "{text}"
        );
        assert_eq!(IdArg::Whole(a).resolve(&[]), Ok(a));
    }
}
