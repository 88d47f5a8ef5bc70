//! Attacker-controlled text shown so that nothing in it can hide or reorder what a reviewer
//! reads (issue 26). Escaping keeps markup inert, but a character that is invisible or that
//! changes the direction of the text around it still misleads: a `destination` beginning with
//! U+202E (right-to-left override) displays reversed on an approval card, and a zero-width
//! space makes two different strings look alike. Every such character is shown as its escape
//! (`\u202e`) in a marked span with a title saying what it is, and everything else as escaped
//! text.

use maud::{Markup, html};

/// Whether `c` is invisible or changes the display order of the text around it: the bidi
/// controls, the default-ignorable code points (zero-width characters, fillers, variation
/// selectors, tags), line and paragraph separators, and the C0 and C1 controls other than tab
/// and line feed.
pub fn is_hidden(c: char) -> bool {
    matches!(c,
        '\u{0000}'..='\u{0008}'
        | '\u{000B}'..='\u{001F}'
        | '\u{007F}'..='\u{009F}'
        | '\u{00AD}'
        | '\u{034F}'
        | '\u{061C}'
        | '\u{115F}' | '\u{1160}'
        | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}'
        | '\u{200B}'..='\u{200F}'
        | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}'
        | '\u{3164}'
        | '\u{FE00}'..='\u{FE0F}'
        | '\u{FEFF}'
        | '\u{FFA0}'
        | '\u{FFF0}'..='\u{FFF8}'
        | '\u{1BCA0}'..='\u{1BCA3}'
        | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E0FFF}')
}

/// `text` as markup: runs of ordinary characters as escaped text, each hidden character as
/// `\uXXXX` in `span.hidden-char`.
pub fn visible(text: &str) -> Markup {
    let mut pieces: Vec<Piece<'_>> = Vec::new();
    let mut start = 0;
    for (at, c) in text.char_indices() {
        if is_hidden(c) {
            if start < at {
                pieces.push(Piece::Text(&text[start..at]));
            }
            pieces.push(Piece::Hidden(c));
            start = at + c.len_utf8();
        }
    }
    if start < text.len() {
        pieces.push(Piece::Text(&text[start..]));
    }
    html! {
        @for piece in &pieces {
            @match piece {
                Piece::Text(run) => { (run) }
                Piece::Hidden(c) => {
                    span.hidden-char title=(format!(
                        "an invisible or direction-changing character (U+{:04X}) in this text",
                        u32::from(*c)
                    )) { (format!("\\u{:04x}", u32::from(*c))) }
                }
            }
        }
    }
}

enum Piece<'a> {
    Text(&'a str),
    Hidden(char),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direction_overrides_and_zero_width_characters_are_shown_marked_and_never_raw() {
        let html = visible("\u{202e}gpj.exe and pay\u{200b}pal <b>").into_string();
        assert!(
            !html.contains('\u{202e}') && !html.contains('\u{200b}'),
            "{html}"
        );
        assert!(html.contains(r#"<span class="hidden-char""#), "{html}");
        assert!(
            html.contains(r"\u202e") && html.contains(r"\u200b"),
            "{html}"
        );
        assert!(html.contains("gpj.exe and pay"), "{html}");
        assert!(html.contains("&lt;b&gt;"), "still escaped: {html}");
    }

    #[test]
    fn ordinary_text_is_only_escaped() {
        assert_eq!(
            visible("Grüße, 東京\n\tline").into_string(),
            "Grüße, 東京\n\tline"
        );
        for c in ['a', 'é', '東', '\n', '\t', '😀'] {
            assert!(!is_hidden(c), "{c:?}");
        }
        for c in [
            '\u{202a}',
            '\u{2066}',
            '\u{200f}',
            '\u{feff}',
            '\u{e0041}',
            '\u{7}',
            '\u{85}',
        ] {
            assert!(is_hidden(c), "{c:?}");
        }
    }
}
