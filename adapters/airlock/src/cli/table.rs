//! `--output table`: lists for a person at a terminal. JSON stays the default (scripts read
//! it); a table shows the few columns a person acts on, ids shortened to their first 8 hex
//! digits, which `approvals approve|deny` and `invocations settle` accept as a prefix.
//! Values come from the store and may hold anything an agent wrote: control characters are
//! shown escaped, so a cell cannot move the cursor or rewrite the lines above it.

use airlock_core::time::Timestamp;

/// How a list is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// One line of JSON (the default; what scripts read).
    #[default]
    Json,
    /// Aligned columns for a person.
    Table,
}

/// The first 8 characters of an id: enough to tell ids apart, and a valid id prefix.
pub fn short(id: impl std::fmt::Display) -> String {
    let text = id.to_string();
    text.get(..8).unwrap_or(&text).to_owned()
}

/// A span of seconds as a person reads it: `45s`, `12m`, `3h 05m`, `2d 04h`.
pub fn span(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m", s / 60),
        3_600..86_400 => format!("{}h {:02}m", s / 3_600, (s % 3_600) / 60),
        _ => format!("{}d {:02}h", s / 86_400, (s % 86_400) / 3_600),
    }
}

/// How long ago `then` was, at `now`.
pub fn age(now: Timestamp, then: Timestamp) -> String {
    span((now.as_micros() - then.as_micros()) / 1_000_000)
}

/// How long until `when`, at `now`; `expired` once it passed.
pub fn until(now: Timestamp, when: Timestamp) -> String {
    let seconds = (when.as_micros() - now.as_micros()) / 1_000_000;
    if seconds <= 0 {
        "expired".to_owned()
    } else {
        span(seconds)
    }
}

/// A cell's text with control characters escaped (`\n` → `\\n`, others `\\u{…}`).
fn cell(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// The rows under `headers`, columns padded to their widest cell (counted in characters),
/// two spaces apart; no trailing spaces. With no rows, the headers and `(none)`.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| cell(c)).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, c) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(c);
            if i + 1 < cells.len() {
                let pad = widths.get(i).copied().unwrap_or(0) - c.chars().count();
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out
    };
    let mut out = line(headers.to_vec());
    for row in &rows {
        out.push('\n');
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    if rows.is_empty() {
        out.push_str("\n(none)");
    }
    out
}

/// Prints a page as a table, and how to ask for the next one when there is one.
pub fn print_page(headers: &[&str], rows: &[Vec<String>], next_cursor: Option<&str>) {
    super::output::line(render(headers, rows));
    if let Some(next) = next_cursor {
        super::output::line(format!("(more: --cursor {next})"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_control_characters_are_escaped() {
        let table = render(
            &["ID", "TOOL", "RISK"],
            &[
                vec![
                    "0a1b2c3d".into(),
                    "demo.external_write".into(),
                    "high".into(),
                ],
                vec!["ffee0011".into(), "a\nb\u{1b}[2J".into(), "low".into()],
            ],
        );
        assert_eq!(
            table,
            "ID        TOOL                 RISK\n\
             0a1b2c3d  demo.external_write  high\n\
             ffee0011  a\\nb\\u{1b}[2J        low"
        );
        assert_eq!(render(&["ID"], &[]), "ID\n(none)");
    }

    #[test]
    fn spans_read_like_a_person_says_them() {
        assert_eq!(span(45), "45s");
        assert_eq!(span(12 * 60 + 5), "12m");
        assert_eq!(span(3 * 3_600 + 5 * 60), "3h 05m");
        assert_eq!(span(2 * 86_400 + 4 * 3_600), "2d 04h");
        let t = |s: i64| Timestamp::from_micros(s * 1_000_000);
        assert_eq!(until(t(100), t(40)), "expired");
        assert_eq!(age(t(100), t(40)), "1m");
    }
}
