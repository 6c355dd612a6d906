//! Escaping and shortening of run text for the page's markup.

use std::fmt::Write as _;

/// At most `max` characters, with an ellipsis when cut.
pub(super) fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}\u{2026}", &text[..end]),
        None => text.to_owned(),
    }
}

/// Whitespace runs (newlines too) as one space, then `cut`.
pub(super) fn one_line(text: &str, max: usize) -> String {
    cut(&text.split_whitespace().collect::<Vec<_>>().join(" "), max)
}

/// HTML-escapes text for element content and quoted attributes; `://` is broken up so no
/// user-supplied URL reads as a link (the page must not contain any).
pub(super) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out.replace("://", ":&#47;&#47;")
}

/// Escaped text whose `backticked` words become `<code>` elements.
pub(super) fn code_spans(escaped: &str) -> String {
    let mut out = String::new();
    for (i, part) in escaped.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{part}</code>");
        } else {
            out.push_str(part);
        }
    }
    out
}

/// An agent name for an HTML table cell: escaped, and breakable after a matrix name's `[` and
/// each `,` (the browser would otherwise break it mid-word, or not at all).
pub(super) fn name_cell(name: &str) -> String {
    esc(name).replace('[', "[<wbr>").replace(',', ",<wbr>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn esc_escapes_markup_and_breaks_urls() {
        assert_eq!(
            esc("<a href=\"https://x\">&'</a>"),
            "&lt;a href=&quot;https:&#47;&#47;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn backticks_become_code() {
        assert_eq!(
            code_spans("ended `completed` or `error`."),
            "ended <code>completed</code> or <code>error</code>."
        );
    }
}
