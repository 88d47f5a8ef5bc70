//! `Timestamp`: i64 microseconds since the Unix epoch, UTC (SPEC §2.2).
//!
//! Core never reads a clock; a `Timestamp` arrives from the `Clock` port or from input. The JSON
//! form is `YYYY-MM-DDTHH:MM:SS.ffffffZ`; the parser accepts any RFC 3339 offset and 0–9
//! fraction digits (digits past the sixth are truncated toward the past).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const MICROS_PER_SECOND: i64 = 1_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// A point in time, in microseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

/// Why a timestamp string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid RFC 3339 timestamp '{0}'")]
pub struct TimestampError(pub String);

impl Timestamp {
    pub const fn from_micros(micros: i64) -> Timestamp {
        Timestamp(micros)
    }

    pub const fn as_micros(self) -> i64 {
        self.0
    }

    /// The latest instant the §2.2 form can spell, with its four-digit year:
    /// 9999-12-31T23:59:59.999999Z.
    pub const MAX: Timestamp = Timestamp(253_402_300_799_999_999);

    /// Adds a duration, saturating at [`Timestamp::MAX`] (and at the bottom of the i64 range).
    /// A huge lease or approval expiry then means "far future" and still prints as a time the
    /// parser reads back, instead of a five-digit year.
    pub const fn saturating_add_micros(self, micros: i64) -> Timestamp {
        let sum = self.0.saturating_add(micros);
        if sum > Timestamp::MAX.0 {
            Timestamp::MAX
        } else {
            Timestamp(sum)
        }
    }

    pub const fn saturating_add_seconds(self, seconds: i64) -> Timestamp {
        self.saturating_add_micros(seconds.saturating_mul(MICROS_PER_SECOND))
    }
}

/// Days since 1970-01-01 for a proleptic Gregorian date (Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of `days_from_civil`: a day count since 1970-01-01 as (year, month, day).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_part = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_part + 2) / 5 + 1) as u32;
    let month = if month_part < 10 {
        month_part + 3
    } else {
        month_part - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        _ => 28,
    }
}

/// Reads exactly `n` ASCII digits.
fn digits(bytes: &[u8], at: usize, n: usize) -> Option<u32> {
    let slice = bytes.get(at..at + n)?;
    slice.iter().try_fold(0u32, |acc, b| {
        b.is_ascii_digit().then(|| acc * 10 + u32::from(b - b'0'))
    })
}

impl FromStr for Timestamp {
    type Err = TimestampError;

    fn from_str(s: &str) -> Result<Timestamp, TimestampError> {
        let fail = || TimestampError(s.to_owned());
        let b = s.as_bytes();
        let year = digits(b, 0, 4).ok_or_else(fail)?;
        let month = digits(b, 5, 2).ok_or_else(fail)?;
        let day = digits(b, 8, 2).ok_or_else(fail)?;
        let hour = digits(b, 11, 2).ok_or_else(fail)?;
        let minute = digits(b, 14, 2).ok_or_else(fail)?;
        let second = digits(b, 17, 2).ok_or_else(fail)?;
        if b.get(4) != Some(&b'-')
            || b.get(7) != Some(&b'-')
            || !matches!(b.get(10), Some(b'T' | b't'))
            || b.get(13) != Some(&b':')
            || b.get(16) != Some(&b':')
        {
            return Err(fail());
        }
        let year = i64::from(year);
        if !(1..=12).contains(&month)
            || day == 0
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return Err(fail());
        }
        let mut at = 19;
        let mut fraction_micros: i64 = 0;
        if b.get(at) == Some(&b'.') {
            at += 1;
            let start = at;
            while b.get(at).is_some_and(u8::is_ascii_digit) {
                at += 1;
            }
            let count = at - start;
            if count == 0 || count > 9 {
                return Err(fail());
            }
            for (i, digit) in b[start..at].iter().enumerate() {
                if i < 6 {
                    fraction_micros = fraction_micros * 10 + i64::from(digit - b'0');
                }
            }
            for _ in count..6 {
                fraction_micros *= 10;
            }
        }
        let offset_seconds: i64 = match b.get(at) {
            Some(b'Z' | b'z') if at + 1 == b.len() => 0,
            Some(sign @ (b'+' | b'-')) if at + 6 == b.len() && b[at + 3] == b':' => {
                let hours = digits(b, at + 1, 2).ok_or_else(fail)?;
                let minutes = digits(b, at + 4, 2).ok_or_else(fail)?;
                if hours > 23 || minutes > 59 {
                    return Err(fail());
                }
                let magnitude = i64::from(hours * 3600 + minutes * 60);
                if *sign == b'-' { -magnitude } else { magnitude }
            }
            _ => return Err(fail()),
        };
        let seconds = days_from_civil(year, month, day) * SECONDS_PER_DAY
            + i64::from(hour * 3600 + minute * 60 + second)
            - offset_seconds;
        Ok(Timestamp(seconds * MICROS_PER_SECOND + fraction_micros))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.0.div_euclid(MICROS_PER_SECOND);
        let micros = self.0.rem_euclid(MICROS_PER_SECOND);
        let days = seconds.div_euclid(SECONDS_PER_DAY);
        let second_of_day = seconds.rem_euclid(SECONDS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            second_of_day / 3600,
            (second_of_day / 60) % 60,
            second_of_day % 60
        )
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::wire_text::deserialize_parsed(d, |s| s.parse::<Timestamp>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_at_the_last_printable_instant() {
        let far = Timestamp::from_micros(1_700_000_000_000_000).saturating_add_micros(i64::MAX);
        assert_eq!(far, Timestamp::MAX);
        assert_eq!(far.to_string(), "9999-12-31T23:59:59.999999Z");
        assert_eq!("9999-12-31T23:59:59.999999Z".parse(), Ok(far));
        assert_eq!(
            Timestamp::MAX.saturating_add_micros(-1).as_micros(),
            Timestamp::MAX.as_micros() - 1
        );
        assert_eq!(
            Timestamp::from_micros(0).saturating_add_seconds(i64::MAX),
            Timestamp::MAX
        );
    }

    #[test]
    fn formats_the_json_form() {
        assert_eq!(
            Timestamp::from_micros(0).to_string(),
            "1970-01-01T00:00:00.000000Z"
        );
        let t: Timestamp = "2026-01-15T12:00:08Z".parse().unwrap();
        assert_eq!(t.to_string(), "2026-01-15T12:00:08.000000Z");
        assert_eq!(t.as_micros(), 1_768_478_408_000_000);
    }

    #[test]
    fn accepts_offsets_and_up_to_nine_fraction_digits() {
        let utc: Timestamp = "2026-12-02T10:00:00.5Z".parse().unwrap();
        let offset: Timestamp = "2026-12-02T12:00:00.500000000+02:00".parse().unwrap();
        assert_eq!(utc, offset);
        let truncated: Timestamp = "2026-12-02T10:00:00.123456789Z".parse().unwrap();
        assert_eq!(truncated.as_micros() % 1_000_000, 123_456);
    }

    #[test]
    fn rejects_malformed_strings() {
        for bad in [
            "",
            "2026-12-02",
            "2026-12-02T10:00:00",
            "2026-13-02T10:00:00Z",
            "2026-02-30T10:00:00Z",
            "2026-12-02T10:00:00.Z",
            "2026-12-02T10:00:00.1234567890Z",
            "2026-12-02T10:00:00+0200",
            "2026-12-02T10:00:00Zjunk",
        ] {
            assert!(
                bad.parse::<Timestamp>().is_err(),
                "{bad:?} must be rejected"
            );
        }
    }

    #[test]
    fn round_trips_before_the_epoch_and_in_leap_years() {
        for s in [
            "1969-12-31T23:59:59.999999Z",
            "2024-02-29T00:00:00.000001Z",
            "0001-01-01T00:00:00.000000Z",
        ] {
            let t: Timestamp = s.parse().unwrap();
            assert_eq!(t.to_string(), s);
        }
    }
}
