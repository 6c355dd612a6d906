//! A YAML syntax error that is a broken indentation, said in plain words at the line that broke.
//!
//! The parser reports where it gave up ("did not find expected key"), which is at or after the
//! line whose indentation is wrong. A walk over the lines keeps the open blocks (a mapping's keys,
//! a list's items) with their indentation, and finds the first line that fits none of them.

use std::collections::HashMap;

use serde_saphyr::granit_parser::Parser;

/// A line whose indentation breaks from the blocks around it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Break {
    pub line: u64,
    pub column: u64,
    pub message: String,
}

/// The line, at or before the parser's `error_line`, whose indentation broke the document; None
/// when the error is not one of indentation.
pub(super) fn find_break(text: &str, error_line: u64) -> Option<Break> {
    let (found, seen_at) = Walk::default().run(text, error_line)?;
    // Only a break the parser agrees with: the text parses up to the line, and not with it.
    let through = |line: u64| -> &str {
        let Some(before) = (line as usize).checked_sub(1) else {
            return "";
        };
        let end = text
            .match_indices('\n')
            .nth(before)
            .map_or(text.len(), |(at, _)| at);
        &text[..end]
    };
    (parses(through(seen_at - 1)) && !parses(through(seen_at))).then_some(found)
}

fn parses(text: &str) -> bool {
    Parser::new_from_str(text).all(|event| event.is_ok())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Keys,
    Items,
}

/// An open block: the keys of a mapping or the items of a list, at one indentation.
#[derive(Debug)]
struct Level {
    indent: usize,
    kind: Kind,
    /// The keys leading to it: `["tasks", "-"]` for a task's keys, `["tasks"]` for the tasks.
    path: Vec<String>,
    first_line: u64,
    /// Lines seen at this level so far.
    lines: usize,
    /// The indentation of the key whose value the block is, when that key ended the line above.
    under_key: Option<usize>,
}

/// What the line before left open.
#[derive(Debug, Clone)]
enum Pending {
    Nothing,
    /// `key:` or `-` ended the line: the next, more indented line starts its value.
    Opens {
        key: Option<String>,
        indent: usize,
        line: u64,
        path: Vec<String>,
    },
    /// `key: |`: more indented lines are the scalar's text.
    BlockScalar {
        indent: usize,
    },
    /// A flow collection (`[a,`) or a quoted scalar not closed on its line.
    Flow {
        depth: i32,
    },
    Quoted {
        quote: char,
    },
    /// A plain value: more indented lines that are not keys continue it.
    Plain {
        indent: usize,
    },
}

/// What a line holds, past its indentation.
enum Content<'a> {
    /// `- ...`, the rest starting at `inner_column` (0-based).
    Item {
        inner_column: usize,
        inner: &'a str,
    },
    Key {
        name: String,
        value: &'a str,
    },
    Other,
}

#[derive(Default)]
struct Walk {
    levels: Vec<Level>,
    /// How often each step from a key to its block's indentation was seen.
    steps: HashMap<usize, usize>,
}

impl Walk {
    /// The break and the line it was seen at (where the parser fails).
    fn run(mut self, text: &str, error_line: u64) -> Option<(Break, u64)> {
        let mut pending = Pending::Nothing;
        for (number, line) in (1..=error_line).zip(text.lines()) {
            let line = line.trim_end_matches('\r');
            let leading: &str = &line[..line.len() - line.trim_start_matches([' ', '\t']).len()];
            let rest = &line[leading.len()..];
            let blank = rest.is_empty();
            match pending {
                Pending::BlockScalar { indent } if blank || leading.len() > indent => continue,
                Pending::Flow { depth } => {
                    let depth = depth + flow_depth(line);
                    pending = if depth > 0 {
                        Pending::Flow { depth }
                    } else {
                        Pending::Nothing
                    };
                    continue;
                }
                Pending::Quoted { quote } => {
                    if closes(line, quote) {
                        pending = Pending::Nothing;
                    }
                    continue;
                }
                _ => {}
            }
            if blank || rest.starts_with('#') {
                continue;
            }
            if let Some(tab) = leading.find('\t') {
                let found = Break {
                    line: number,
                    column: tab as u64 + 1,
                    message: "a tab indents this line; YAML indents with spaces only".into(),
                };
                return Some((found, number));
            }
            let indent = leading.len();
            if indent == 0 && (rest.starts_with("---") || rest.starts_with("...")) {
                self.levels.clear();
                pending = Pending::Nothing;
                continue;
            }
            let content = content(rest, indent);
            if let Pending::Plain { indent: above } = pending
                && indent > above
                && matches!(content, Content::Other)
            {
                continue;
            }
            pending = match self.place(number, indent, &content, pending) {
                Ok(pending) => pending,
                Err(found) => return found.map(|found| (found, number)),
            };
        }
        None
    }

    /// Puts the line among the open blocks; `Err(Some)` when it fits none, `Err(None)` when the
    /// line breaks the document in a way that is not indentation.
    fn place(
        &mut self,
        number: u64,
        indent: usize,
        content: &Content,
        opened: Pending,
    ) -> Result<Pending, Option<Break>> {
        let is_item = matches!(content, Content::Item { .. });
        let kind = if is_item { Kind::Items } else { Kind::Keys };
        let mut empty_value = None;
        if let Pending::Opens {
            key,
            indent: above,
            line,
            path,
        } = opened
        {
            if indent > above || (indent == above && is_item && key.is_some()) {
                let under_key = key.is_some().then_some(above);
                return Ok(self.open(number, indent, above, under_key, content, path));
            }
            // An empty list item (`-` alone) is a null: the line is placed as any other.
            if let Some(key) = key {
                if indent == above && matches!(content, Content::Other) {
                    return Err(Some(as_deep_as_key(number, indent, &key, line)));
                }
                empty_value = Some((key, above, line));
            }
        }
        let popped = self.close_above(indent, is_item);
        if matches!(content, Content::Other) {
            return Err(None);
        }
        if self.fits(number, indent, kind) {
            return Ok(self.read(number, content));
        }
        if let Some((key, above, line)) = empty_value.filter(|(_, above, _)| indent < *above) {
            return Err(Some(less_deep_than_key(number, indent, &key, above, line)));
        }
        // The block the line was likely meant for: the one it closed, or the one it is in.
        let meant = popped
            .as_ref()
            .filter(|level| level.kind == kind)
            .or_else(|| self.levels.iter().rev().find(|level| level.kind == kind));
        Err(meant.map(|level| self.misplaced(number, indent, is_item, level)))
    }

    /// The line starts the value that the line `above` opened: a plain scalar on its own line,
    /// or a block at its indentation.
    fn open(
        &mut self,
        number: u64,
        indent: usize,
        above: usize,
        under_key: Option<usize>,
        content: &Content,
        path: Vec<String>,
    ) -> Pending {
        let kind = match content {
            // The value on its own line: a plain scalar, continued while indented more.
            Content::Other => return Pending::Plain { indent: above },
            Content::Item { .. } => Kind::Items,
            Content::Key { .. } => Kind::Keys,
        };
        if indent > above {
            *self.steps.entry(indent - above).or_default() += 1;
        }
        self.levels.push(Level {
            indent,
            kind,
            path,
            first_line: number,
            lines: 0,
            under_key,
        });
        self.read(number, content)
    }

    /// Closes the blocks a line at `indent` ends; the innermost of them, the one the line was
    /// likely meant for.
    fn close_above(&mut self, indent: usize, is_item: bool) -> Option<Level> {
        let mut popped = None;
        while let Some(top) = self.levels.last() {
            let compact_list_ends = top.indent == indent
                && top.kind == Kind::Items
                && top.under_key == Some(indent)
                && !is_item;
            if top.indent <= indent && !compact_list_ends {
                break;
            }
            let closed = self.levels.pop();
            popped = popped.or(closed);
        }
        popped
    }

    /// Whether a line of `kind` at `indent` continues the innermost open block; the first line
    /// of the document opens its top block.
    fn fits(&mut self, number: u64, indent: usize, kind: Kind) -> bool {
        match self.levels.last() {
            None => {
                self.levels.push(Level {
                    indent,
                    kind,
                    path: Vec::new(),
                    first_line: number,
                    lines: 0,
                    under_key: None,
                });
                true
            }
            Some(top) => top.indent == indent && top.kind == kind,
        }
    }

    /// The line at `indent` breaks from `level`; when `level` has only its first line and that
    /// one is off the file's usual step while this line is on it, the first line is blamed.
    fn misplaced(&self, number: u64, indent: usize, is_item: bool, level: &Level) -> Break {
        let what = match level.kind {
            Kind::Keys => "keys",
            Kind::Items => "items",
        };
        let of = describe(level);
        if level.lines == 1
            && let Some(key) = level.under_key
            && let Some(step) = self.usual_step(level.indent.checked_sub(key))
            && level.indent - key != step
            && indent.checked_sub(key) == Some(step)
        {
            return Break {
                line: level.first_line,
                column: level.indent as u64 + 1,
                message: format!(
                    "this line is indented by {}, but the other {what} of {of} (line {number}) \
                     are indented by {indent}",
                    spaces(level.indent)
                ),
            };
        }
        let line = if is_item { "list item" } else { "line" };
        Break {
            line: number,
            column: indent as u64 + 1,
            message: format!(
                "this {line} is indented by {}, but the {what} of {of} (from line {}) are \
                 indented by {}",
                spaces(indent),
                level.first_line,
                level.indent
            ),
        }
    }

    /// The most common step from a key to its block, not counting one step of `own` (the
    /// block in question); None without a clear winner.
    fn usual_step(&self, own: Option<usize>) -> Option<usize> {
        let mut counts = self.steps.clone();
        if let Some(own) = own
            && let Some(count) = counts.get_mut(&own)
        {
            *count -= 1;
        }
        let most = counts.values().copied().max().filter(|&most| most > 0)?;
        let mut winners = counts.iter().filter(|(_, count)| **count == most);
        let (step, _) = winners.next()?;
        winners.next().is_none().then_some(*step)
    }

    /// Counts the line in its block and opens what the line opens.
    fn read(&mut self, number: u64, content: &Content) -> Pending {
        let level = self
            .levels
            .last_mut()
            .expect("the line was placed in a level");
        level.lines += 1;
        let (indent, mut path) = (level.indent, level.path.clone());
        match content {
            Content::Key { name, value } => {
                path.push(name.clone());
                after_value(value, Some(name.clone()), indent, number, path)
            }
            Content::Item {
                inner_column,
                inner,
            } => {
                path.push("-".into());
                match self::content(inner, *inner_column) {
                    Content::Key { name, value } => {
                        self.levels.push(Level {
                            indent: *inner_column,
                            kind: Kind::Keys,
                            path: path.clone(),
                            first_line: number,
                            lines: 1,
                            under_key: None,
                        });
                        path.push(name.clone());
                        after_value(value, Some(name), *inner_column, number, path)
                    }
                    // A list in a list (`- - a`) is not followed further.
                    Content::Item { .. } => Pending::Nothing,
                    Content::Other => after_value(inner, None, indent, number, path),
                }
            }
            Content::Other => Pending::Nothing,
        }
    }
}

/// What a key's (or a list item's) value on its line leaves open for the next lines.
fn after_value(
    value: &str,
    key: Option<String>,
    indent: usize,
    line: u64,
    path: Vec<String>,
) -> Pending {
    let mut value = value.trim();
    // An anchor or a tag before the value: `&base`, `!!map`.
    while value.starts_with(['&', '!']) {
        value = value
            .split_once(char::is_whitespace)
            .map_or("", |(_, rest)| rest.trim_start());
    }
    if value.is_empty() || value.starts_with('#') {
        return Pending::Opens {
            key,
            indent,
            line,
            path,
        };
    }
    if value.starts_with(['|', '>']) {
        return Pending::BlockScalar { indent };
    }
    if value.starts_with(['[', '{']) {
        let depth = flow_depth(value);
        return if depth > 0 {
            Pending::Flow { depth }
        } else {
            Pending::Nothing
        };
    }
    if let Some(quote) = value.chars().next().filter(|c| matches!(c, '"' | '\'')) {
        return if closes(&value[1..], quote) {
            Pending::Nothing
        } else {
            Pending::Quoted { quote }
        };
    }
    Pending::Plain { indent }
}

/// A line's content at `column` (0-based): a list item, a key, or something else.
fn content(rest: &str, column: usize) -> Content<'_> {
    if rest == "-" || rest.starts_with("- ") {
        let after = &rest[1..];
        let inner = after.trim_start_matches(' ');
        return Content::Item {
            inner_column: column + 1 + after.len() - inner.len(),
            inner,
        };
    }
    key(rest).map_or(Content::Other, |(name, value)| Content::Key { name, value })
}

/// `name: value` (or `name:`) with a plain or quoted name.
fn key(rest: &str) -> Option<(String, &str)> {
    let (name, after) = match rest.chars().next()? {
        quote @ ('"' | '\'') => {
            let end = rest[1..].find(quote)? + 1;
            (rest[1..end].to_owned(), &rest[end + 1..])
        }
        '[' | '{' | '#' | '&' | '*' | '!' | '|' | '>' | '%' | '@' | '`' | '?' => return None,
        _ => {
            let colon = rest
                .match_indices(':')
                .map(|(at, _)| at)
                .find(|&at| rest[at + 1..].is_empty() || rest[at + 1..].starts_with([' ', '\t']))?;
            if rest[..colon].contains(" #") {
                return None;
            }
            (rest[..colon].trim_end().to_owned(), &rest[colon..])
        }
    };
    let value = after.trim_start().strip_prefix(':')?;
    (value.is_empty() || value.starts_with([' ', '\t'])).then_some((name, value))
}

/// How many more `[`/`{` than `]`/`}` the line opens, outside quotes and comments.
fn flow_depth(line: &str) -> i32 {
    let mut depth = 0;
    let mut quote = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(open), c) if c == open => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') => break,
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth -= 1,
            _ => {}
        }
    }
    depth
}

/// Whether `text` holds the quote that closes a quoted scalar (`\"` and `''` do not).
fn closes(text: &str, quote: char) -> bool {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quote == '"' => {
                chars.next();
            }
            c if c == quote => {
                if quote == '\'' && chars.peek() == Some(&'\'') {
                    chars.next();
                } else {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// A value's line `number` at `indent`, as deep as its `key` on line `line`.
fn as_deep_as_key(number: u64, indent: usize, key: &str, line: u64) -> Break {
    Break {
        line: number,
        column: indent as u64 + 1,
        message: format!(
            "this line is indented by {}, as much as the key `{key}` above \
             it (line {line}): a value below its key is indented more than the key",
            spaces(indent)
        ),
    }
}

/// A value's line `number` at `indent`, less deep than its `key` at `above` on line `line`.
fn less_deep_than_key(number: u64, indent: usize, key: &str, above: usize, line: u64) -> Break {
    Break {
        line: number,
        column: indent as u64 + 1,
        message: format!(
            "this line is indented by {}, less than the key `{key}` above it (line \
             {line}, {}): the lines of a key's value are indented more than the key",
            spaces(indent),
            spaces(above)
        ),
    }
}

fn spaces(count: usize) -> String {
    if count == 1 {
        "1 space".into()
    } else {
        format!("{count} spaces")
    }
}

/// A block in words: "this task", "agent `my-agent`", "`verify`".
fn describe(level: &Level) -> String {
    let path: Vec<&str> = level.path.iter().map(String::as_str).collect();
    match (level.kind, path.as_slice()) {
        (Kind::Keys, []) => "the top level".into(),
        (Kind::Keys, ["tasks", "-"]) => "this task".into(),
        (Kind::Keys, ["agents", name]) => format!("agent `{name}`"),
        (Kind::Keys, [.., list, "-"]) if *list != "-" => format!("this `{list}` item"),
        (_, [.., "-"]) => "this list".into(),
        (_, [.., key]) => format!("`{key}`"),
        (Kind::Items, []) => "the top-level list".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUITE: &str = "\
name: demo
repo: project
agents:
  my-agent:
    kind: command
    run: ./agents/my-agent.sh
  noop:
    kind: noop
defaults:
  isolation: worktree
  timeout: 10m
tasks:
  - id: fix-median
    instruction: |
      Fix it.

        Indented text.
    tests: tests/fix-median/
    verify:
      run: python3 -m unittest
      timeout: 2m
    tags: [bugfix,
      python]
";

    /// SUITE with `from` replaced by `to`, its break, and the parser's error line.
    fn broken(from: &str, to: &str) -> Option<Break> {
        assert!(SUITE.contains(from), "{from}");
        let text = SUITE.replacen(from, to, 1);
        let mut events = Parser::new_from_str(&text);
        let error = events
            .find_map(Result::err)
            .unwrap_or_else(|| panic!("parses:\n{text}"));
        find_break(&text, error.marker().line() as u64)
    }

    fn at(line: u64, column: u64, message: &str) -> Option<Break> {
        Some(Break {
            line,
            column,
            message: message.into(),
        })
    }

    #[test]
    fn the_suite_itself_has_no_break() {
        assert!(parses(SUITE));
        assert_eq!(Walk::default().run(SUITE, 100), None);
    }

    #[test]
    fn a_key_indented_less_than_its_siblings() {
        assert_eq!(
            broken("    tests:", "   tests:"),
            at(
                18,
                4,
                "this line is indented by 3 spaces, but the keys of this task (from line 13) are indented by 4"
            )
        );
    }

    #[test]
    fn a_key_indented_more_than_its_siblings() {
        assert_eq!(
            broken("    run: ./agents", "      run: ./agents"),
            at(
                6,
                7,
                "this line is indented by 6 spaces, but the keys of agent `my-agent` (from line 5) are indented by 4"
            )
        );
    }

    #[test]
    fn a_tab() {
        assert_eq!(
            broken("    tests:", "\ttests:"),
            at(
                18,
                1,
                "a tab indents this line; YAML indents with spaces only"
            )
        );
    }

    #[test]
    fn a_first_key_off_the_usual_step_is_the_one_blamed() {
        // `isolation` at 3 opens `defaults` at 3; `timeout` at 2 is where the parser fails.
        assert_eq!(
            broken("  isolation:", "   isolation:"),
            at(
                10,
                4,
                "this line is indented by 3 spaces, but the other keys of `defaults` (line 11) are indented by 2"
            )
        );
        assert_eq!(
            broken("      run: python3", "     run: python3"),
            at(
                20,
                6,
                "this line is indented by 5 spaces, but the other keys of `verify` (line 21) are indented by 6"
            )
        );
    }

    #[test]
    fn a_dedented_list_item() {
        // Valid at 0 (a list may sit at its key's indentation), so the task's next key breaks.
        assert_eq!(
            broken("  - id: fix-median", "- id: fix-median"),
            at(
                14,
                5,
                "this line is indented by 4 spaces, but the keys of this task (from line 13) are indented by 2"
            )
        );
    }

    #[test]
    fn a_list_item_at_the_wrong_depth() {
        let second = "    tags: [bugfix,\n      python]\n";
        assert_eq!(
            broken(second, &format!("{second}   - id: two\n")),
            at(
                24,
                4,
                "this list item is indented by 3 spaces, but the items of `tasks` (from line 13) are indented by 2"
            )
        );
        assert_eq!(
            broken(second, &format!("{second}    - id: two\n")),
            at(
                24,
                5,
                "this list item is indented by 4 spaces, but the items of `tasks` (from line 13) are indented by 2"
            )
        );
        assert_eq!(
            broken(second, "    tags:\n      - a\n     - b\n"),
            at(
                24,
                6,
                "this list item is indented by 5 spaces, but the items of `tags` (from line 23) are indented by 6"
            )
        );
    }

    #[test]
    fn a_value_less_indented_than_its_key() {
        assert_eq!(
            broken("    kind: command", " kind: command"),
            at(
                5,
                2,
                "this line is indented by 1 space, less than the key `my-agent` above it (line 4, 2 spaces): the lines of a key's value are indented more than the key"
            )
        );
        assert_eq!(
            broken(
                "    tests: tests/fix-median/",
                "    tests:\n    tests/fix-median/"
            ),
            at(
                19,
                5,
                "this line is indented by 4 spaces, as much as the key `tests` above it (line 18): a value below its key is indented more than the key"
            )
        );
    }

    #[test]
    fn an_error_that_is_not_indentation_is_left_to_the_parser() {
        // A missing colon, and an unclosed quote.
        assert_eq!(broken("    tests: tests", "    tests tests"), None);
        assert_eq!(broken("repo: project", "repo: \"project"), None);
    }

    #[test]
    fn describes_blocks_in_words() {
        let level = |kind, path: &[&str]| Level {
            indent: 0,
            kind,
            path: path.iter().map(|s| s.to_string()).collect(),
            first_line: 1,
            lines: 1,
            under_key: None,
        };
        assert_eq!(describe(&level(Kind::Keys, &[])), "the top level");
        assert_eq!(describe(&level(Kind::Keys, &["agents", "a"])), "agent `a`");
        assert_eq!(
            describe(&level(Kind::Keys, &["agents", "a", "responses", "-"])),
            "this `responses` item"
        );
        assert_eq!(describe(&level(Kind::Items, &["tasks"])), "`tasks`");
    }
}
