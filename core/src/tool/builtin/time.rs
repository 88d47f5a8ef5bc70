//! The `system.current_time` body (SPEC §12.5). It reads time only from the `Clock` port, so the
//! simulator controls what it answers.
//!
//! Choices the spec leaves open: an offset is `+HH:MM` or `-HH:MM` with hours 00–23 and minutes
//! 00–59, the range RFC 3339 allows; `-00:00` is accepted and reported as `+00:00`; `timezone`
//! echoes the argument as given; `unix_seconds` and `weekday` describe the same instant (the
//! weekday in the requested offset).

use serde_json::{Value, json};

use crate::action::JsonMap;
use crate::ports::{BoxFut, Tool, ToolContext, ToolFailure, ToolSuccess};
use crate::time::{Timestamp, civil_from_days};
use crate::vocab::ToolFailureKind;

use super::super::spec::ToolSpec;
use super::specs::system_current_time_spec;

const MICROS_PER_SECOND: i64 = 1_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// Monday first; 1970-01-01 (day 0) was a Thursday.
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const EPOCH_WEEKDAY_INDEX: i64 = 3;

/// The offset from UTC in minutes for `UTC` or `±HH:MM`; `None` for anything else.
pub fn parse_timezone(timezone: &str) -> Option<i32> {
    if timezone == "UTC" {
        return Some(0);
    }
    let bytes = timezone.as_bytes();
    let &[sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] = bytes else {
        return None;
    };
    let digit = |b: u8| b.is_ascii_digit().then(|| i32::from(b - b'0'));
    let hours = digit(h1)? * 10 + digit(h2)?;
    let minutes = digit(m1)? * 10 + digit(m2)?;
    if hours > 23 || minutes > 59 {
        return None;
    }
    let magnitude = hours * 60 + minutes;
    Some(if sign == b'-' { -magnitude } else { magnitude })
}

/// `+HH:MM` for an offset in minutes.
fn format_offset(offset_minutes: i32) -> String {
    let sign = if offset_minutes < 0 { '-' } else { '+' };
    let magnitude = offset_minutes.unsigned_abs();
    format!("{sign}{:02}:{:02}", magnitude / 60, magnitude % 60)
}

/// The output object of `system.current_time` for `now` at `offset_minutes` east of UTC.
pub fn describe(now: Timestamp, timezone: &str, offset_minutes: i32) -> Value {
    let utc_offset = format_offset(offset_minutes);
    let local = now
        .saturating_add_micros(i64::from(offset_minutes) * 60 * MICROS_PER_SECOND)
        .as_micros();
    let local_seconds = local.div_euclid(MICROS_PER_SECOND);
    let micros = local.rem_euclid(MICROS_PER_SECOND);
    let days = local_seconds.div_euclid(SECONDS_PER_DAY);
    let second_of_day = local_seconds.rem_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let weekday_index = (days + EPOCH_WEEKDAY_INDEX).rem_euclid(7);
    let weekday = WEEKDAYS
        .get(weekday_index as usize)
        .copied()
        .unwrap_or_default();
    let iso8601 = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}{utc_offset}",
        second_of_day / 3600,
        (second_of_day / 60) % 60,
        second_of_day % 60,
    );
    json!({
        "iso8601": iso8601,
        "timezone": timezone,
        "utc_offset": utc_offset,
        "unix_seconds": now.as_micros().div_euclid(MICROS_PER_SECOND),
        "weekday": weekday,
    })
}

/// The `system.current_time` tool.
#[derive(Debug, Clone)]
pub struct CurrentTime {
    spec: ToolSpec,
}

impl CurrentTime {
    pub fn new() -> CurrentTime {
        CurrentTime {
            spec: system_current_time_spec(),
        }
    }

    fn run(ctx: &ToolContext<'_>, args: &JsonMap) -> Result<ToolSuccess, ToolFailure> {
        // The pipeline fills the default; reading it again here keeps the body total.
        let timezone = match args.get("timezone") {
            None => "UTC",
            Some(Value::String(s)) => s.as_str(),
            Some(_) => {
                return Err(ToolFailure::new(
                    ToolFailureKind::InvalidArguments,
                    "tool.arguments_invalid",
                    "property 'timezone' must be a string",
                ));
            }
        };
        let Some(offset_minutes) = parse_timezone(timezone) else {
            return Err(ToolFailure::new(
                ToolFailureKind::InvalidArguments,
                "tool.invalid_arguments.unknown_timezone",
                format!("unknown time zone {timezone:?}: expected UTC or ±HH:MM"),
            ));
        };
        Ok(ToolSuccess {
            structured: describe(ctx.clock.now(), timezone, offset_minutes),
            trust: None,
        })
    }
}

impl Default for CurrentTime {
    fn default() -> Self {
        CurrentTime::new()
    }
}

impl Tool for CurrentTime {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn invoke<'a>(
        &'a self,
        ctx: &'a ToolContext<'a>,
        args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
        Box::pin(std::future::ready(CurrentTime::run(ctx, args)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tool::builtin::testing::invoke;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn current_time(now: Timestamp, args: Value) -> Result<ToolSuccess, ToolFailure> {
        invoke(&CurrentTime::new(), args, now)
    }

    #[test]
    fn utc_by_default() {
        let out = current_time(at("2026-12-02T10:00:00Z"), json!({})).unwrap();
        assert_eq!(
            out.structured,
            json!({"iso8601": "2026-12-02T10:00:00.000000+00:00", "timezone": "UTC", "utc_offset": "+00:00",
                   "unix_seconds": 1_796_205_600, "weekday": "Wednesday"})
        );
        assert_eq!(out.trust, None);
    }

    #[test]
    fn offsets_shift_the_wall_clock_and_the_weekday_but_not_the_instant() {
        let now = at("2026-12-02T22:30:15.123456Z");
        let east = current_time(now, json!({"timezone": "+02:00"}))
            .unwrap()
            .structured;
        assert_eq!(east["iso8601"], "2026-12-03T00:30:15.123456+02:00");
        assert_eq!(east["utc_offset"], "+02:00");
        assert_eq!(east["timezone"], "+02:00");
        assert_eq!(east["weekday"], "Thursday");
        let west = current_time(now, json!({"timezone": "-09:30"}))
            .unwrap()
            .structured;
        assert_eq!(west["iso8601"], "2026-12-02T13:00:15.123456-09:30");
        assert_eq!(west["weekday"], "Wednesday");
        assert_eq!(east["unix_seconds"], west["unix_seconds"]);
        assert_eq!(east["unix_seconds"], 1_796_250_615);
        let zero = current_time(now, json!({"timezone": "-00:00"}))
            .unwrap()
            .structured;
        assert_eq!(zero["utc_offset"], "+00:00");
        assert_eq!(zero["timezone"], "-00:00");
    }

    #[test]
    fn the_epoch_and_before_it() {
        let epoch = describe(Timestamp::from_micros(0), "UTC", 0);
        assert_eq!(epoch["iso8601"], "1970-01-01T00:00:00.000000+00:00");
        assert_eq!(epoch["weekday"], "Thursday");
        // Unix seconds floor toward the past, matching the wall clock.
        let before = describe(Timestamp::from_micros(-1), "UTC", 0);
        assert_eq!(before["iso8601"], "1969-12-31T23:59:59.999999+00:00");
        assert_eq!(before["unix_seconds"], -1);
        assert_eq!(before["weekday"], "Wednesday");
    }

    #[test]
    fn every_weekday_in_one_week() {
        let monday = at("2024-02-26T12:00:00Z"); // A Monday in a leap year.
        let names: Vec<Value> = (0..7)
            .map(|day| {
                describe(monday.saturating_add_seconds(day * 86_400), "UTC", 0)["weekday"].clone()
            })
            .collect();
        assert_eq!(names, WEEKDAYS.map(Value::from));
        let leap_day = describe(monday.saturating_add_seconds(3 * 86_400), "UTC", 0);
        assert_eq!(leap_day["iso8601"], "2024-02-29T12:00:00.000000+00:00");
    }

    #[test]
    fn timezones_are_utc_or_a_numeric_offset() {
        assert_eq!(parse_timezone("UTC"), Some(0));
        assert_eq!(parse_timezone("+05:45"), Some(345));
        assert_eq!(parse_timezone("-12:00"), Some(-720));
        assert_eq!(parse_timezone("+23:59"), Some(1439));
        for bad in [
            "utc",
            "Z",
            "GMT",
            "Europe/Paris",
            "+2:00",
            "+0200",
            "+24:00",
            "+02:60",
            "02:00",
            "+02:00 ",
            "±02:00",
            "",
        ] {
            assert_eq!(parse_timezone(bad), None, "{bad:?}");
        }
        let failure = current_time(
            Timestamp::from_micros(0),
            json!({"timezone": "Europe/Paris"}),
        )
        .unwrap_err();
        assert_eq!(failure.kind, ToolFailureKind::InvalidArguments);
        assert_eq!(
            failure.reason_code,
            "tool.invalid_arguments.unknown_timezone"
        );
    }
}
