//! A span of time as every command takes it (`tokens create --expires-in`, the `--since` and
//! `--until` ages of the policy reports): digits and one unit, `s`, `m`, `h` or `d`; positive
//! and at most 100 years.

/// The longest span taken: 100 years.
const MAX_SECONDS: i64 = 100 * 365 * 86_400;

/// `text` in seconds, or `None` when it is not such a span.
pub fn seconds(text: &str) -> Option<i64> {
    let unit_seconds = match text.chars().last()? {
        'd' => 86_400,
        'h' => 3600,
        'm' => 60,
        's' => 1,
        _ => return None,
    };
    // The unit is one ASCII byte, so this cut lies on a character boundary.
    let digits = &text[..text.len() - 1];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits
        .parse::<i64>()
        .ok()?
        .checked_mul(unit_seconds)
        .filter(|s| (1..=MAX_SECONDS).contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_and_one_unit_positive_and_bounded() {
        assert_eq!(seconds("90d"), Some(90 * 86_400));
        assert_eq!(seconds("12h"), Some(43_200));
        assert_eq!(seconds("30m"), Some(1800));
        assert_eq!(seconds("3600s"), Some(3600));
        for bad in [
            "",
            "d",
            "0d",
            "-1h",
            "+1h",
            "10",
            "10w",
            "1.5h",
            "5 m",
            "99999999999d",
            "h12",
            "5ḿ",
            "ḿ",
        ] {
            assert_eq!(seconds(bad), None, "{bad:?}");
        }
    }
}
