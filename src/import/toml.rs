//! A reader for the TOML that Harbor's `task.toml` files use, into a JSON value.
//!
//! The crate has no TOML dependency, and the importer needs a handful of keys (`[agent]` and
//! `[verifier]` timeouts, tags, the prebuilt image). This reads TOML 1.0's syntax: tables, arrays
//! of tables, dotted and quoted keys, the four string kinds, integers (decimal, hex, octal,
//! binary), floats, booleans, arrays and inline tables. Dates and times are kept as their text.
//! It does not reject every document the specification forbids (a key defined twice replaces the
//! first); what it cannot read is an error with its line.

use serde_json::{Map, Value};

/// A document that could not be read, with the 1-based line of the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct TomlError {
    pub line: usize,
    pub message: String,
}

/// Parses `text` into a JSON object.
pub fn parse(text: &str) -> Result<Map<String, Value>, TomlError> {
    let mut parser = Parser {
        chars: text.chars().collect(),
        pos: 0,
    };
    parser.document()
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn error(&self, message: impl Into<String>) -> TomlError {
        let line = 1 + self.chars[..self.pos.min(self.chars.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count();
        TomlError {
            line,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    fn starts_with(&self, text: &str) -> bool {
        text.chars()
            .enumerate()
            .all(|(i, c)| self.peek_at(i) == Some(c))
    }

    fn expect(&mut self, c: char) -> Result<(), TomlError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(format!("expected '{c}'")))
        }
    }

    /// Spaces and tabs.
    fn blank(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
    }

    fn comment(&mut self) {
        if self.peek() == Some('#') {
            while !matches!(self.peek(), None | Some('\n')) {
                self.pos += 1;
            }
        }
    }

    /// Blanks, comments and newlines (inside arrays, and between statements).
    fn space(&mut self) {
        loop {
            self.blank();
            self.comment();
            match self.peek() {
                Some('\n' | '\r') => self.pos += 1,
                _ => return,
            }
        }
    }

    /// The rest of a statement's line: blanks, a comment, then a newline or the end.
    fn end_of_line(&mut self) -> Result<(), TomlError> {
        self.blank();
        self.comment();
        if self.peek() == Some('\r') {
            self.pos += 1;
        }
        match self.peek() {
            None => Ok(()),
            Some('\n') => {
                self.pos += 1;
                Ok(())
            }
            Some(c) => Err(self.error(format!("unexpected '{c}' after a value"))),
        }
    }

    fn document(&mut self) -> Result<Map<String, Value>, TomlError> {
        let mut root = Map::new();
        // The path of the table that `key = value` lines go into.
        let mut current: Vec<String> = Vec::new();
        loop {
            self.space();
            match self.peek() {
                None => return Ok(root),
                Some('[') => {
                    let array = self.starts_with("[[");
                    self.pos += if array { 2 } else { 1 };
                    self.blank();
                    let path = self.key()?;
                    self.blank();
                    self.expect(']')?;
                    if array {
                        self.expect(']')?;
                    }
                    self.end_of_line()?;
                    self.open_table(&mut root, &path, array)?;
                    current = path;
                }
                Some(_) => {
                    let key = self.key()?;
                    self.blank();
                    self.expect('=')?;
                    self.blank();
                    let value = self.value()?;
                    self.end_of_line()?;
                    let table = self.table_at(&mut root, &current)?;
                    self.insert(table, &key, value)?;
                }
            }
        }
    }

    /// Creates the table (or appends an element to the array of tables) at `path`.
    fn open_table(
        &self,
        root: &mut Map<String, Value>,
        path: &[String],
        array: bool,
    ) -> Result<(), TomlError> {
        let (last, parents) = path.split_last().ok_or_else(|| self.error("empty key"))?;
        let parent = self.table_at(root, parents)?;
        if array {
            let entry = parent
                .entry(last.clone())
                .or_insert_with(|| Value::Array(Vec::new()));
            let Value::Array(items) = entry else {
                return Err(self.error(format!("'{last}' is not an array of tables")));
            };
            items.push(Value::Object(Map::new()));
        } else {
            let entry = parent
                .entry(last.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                return Err(self.error(format!("'{last}' is already a value, not a table")));
            }
        }
        Ok(())
    }

    /// The table at `path`, creating missing ones; an array of tables resolves to its last one.
    fn table_at<'a>(
        &self,
        mut table: &'a mut Map<String, Value>,
        path: &[String],
    ) -> Result<&'a mut Map<String, Value>, TomlError> {
        for part in path {
            let entry = table
                .entry(part.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            table = match entry {
                Value::Object(map) => map,
                Value::Array(items) => match items.last_mut() {
                    Some(Value::Object(map)) => map,
                    _ => return Err(self.error(format!("'{part}' is not a table"))),
                },
                _ => return Err(self.error(format!("'{part}' is not a table"))),
            };
        }
        Ok(table)
    }

    /// Sets a dotted key inside `table`.
    fn insert(
        &self,
        table: &mut Map<String, Value>,
        key: &[String],
        value: Value,
    ) -> Result<(), TomlError> {
        let (last, parents) = key.split_last().ok_or_else(|| self.error("empty key"))?;
        let parent = self.table_at(table, parents)?;
        parent.insert(last.clone(), value);
        Ok(())
    }

    /// A dotted key: bare or quoted parts separated by dots.
    fn key(&mut self) -> Result<Vec<String>, TomlError> {
        let mut parts = Vec::new();
        loop {
            self.blank();
            let part = match self.peek() {
                Some('"') => self.basic_string()?,
                Some('\'') => self.literal_string()?,
                _ => {
                    let start = self.pos;
                    while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    {
                        self.pos += 1;
                    }
                    if start == self.pos {
                        return Err(self.error("expected a key"));
                    }
                    self.chars[start..self.pos].iter().collect()
                }
            };
            parts.push(part);
            self.blank();
            if self.peek() == Some('.') {
                self.pos += 1;
            } else {
                return Ok(parts);
            }
        }
    }

    fn value(&mut self) -> Result<Value, TomlError> {
        match self.peek() {
            Some('"') if self.starts_with("\"\"\"") => self.multiline_basic().map(Value::String),
            Some('\'') if self.starts_with("'''") => self.multiline_literal().map(Value::String),
            Some('"') => self.basic_string().map(Value::String),
            Some('\'') => self.literal_string().map(Value::String),
            Some('[') => self.array(),
            Some('{') => self.inline_table(),
            Some('t') if self.starts_with("true") => {
                self.pos += 4;
                Ok(Value::Bool(true))
            }
            Some('f') if self.starts_with("false") => {
                self.pos += 5;
                Ok(Value::Bool(false))
            }
            Some(_) => self.scalar(),
            None => Err(self.error("expected a value")),
        }
    }

    fn array(&mut self) -> Result<Value, TomlError> {
        self.expect('[')?;
        let mut items = Vec::new();
        loop {
            self.space();
            if self.peek() == Some(']') {
                self.pos += 1;
                return Ok(Value::Array(items));
            }
            items.push(self.value()?);
            self.space();
            match self.peek() {
                Some(',') => self.pos += 1,
                Some(']') => {}
                _ => return Err(self.error("expected ',' or ']' in an array")),
            }
        }
    }

    fn inline_table(&mut self) -> Result<Value, TomlError> {
        self.expect('{')?;
        let mut table = Map::new();
        self.blank();
        if self.peek() == Some('}') {
            self.pos += 1;
            return Ok(Value::Object(table));
        }
        loop {
            let key = self.key()?;
            self.blank();
            self.expect('=')?;
            self.blank();
            let value = self.value()?;
            self.insert(&mut table, &key, value)?;
            self.blank();
            match self.peek() {
                Some(',') => {
                    self.pos += 1;
                    self.blank();
                }
                Some('}') => {
                    self.pos += 1;
                    return Ok(Value::Object(table));
                }
                _ => return Err(self.error("expected ',' or '}' in an inline table")),
            }
        }
    }

    /// A number, or a date/time kept as text.
    fn scalar(&mut self) -> Result<Value, TomlError> {
        let start = self.pos;
        while let Some(c) = self.peek() {
            // A space belongs to a date-time ("1979-05-27 07:32:00") only between date and time.
            let date_time_space = c == ' '
                && self.pos - start == 10
                && self.peek_at(1).is_some_and(|d| d.is_ascii_digit());
            if c.is_ascii_alphanumeric() || "+-_.:".contains(c) || date_time_space {
                self.pos += 1;
            } else {
                break;
            }
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        if text.is_empty() {
            return Err(self.error(format!("unexpected '{}'", self.peek().unwrap_or(' '))));
        }
        number(&text)
            .or_else(|| is_date_time(&text).then(|| Value::String(text.clone())))
            .ok_or_else(|| self.error(format!("not a TOML value: '{text}'")))
    }

    fn basic_string(&mut self) -> Result<String, TomlError> {
        self.expect('"')?;
        let mut out = String::new();
        loop {
            match self.peek() {
                None | Some('\n') => return Err(self.error("unterminated string")),
                Some('"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some('\\') => out.push(self.escape()?),
                Some(c) => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    fn multiline_basic(&mut self) -> Result<String, TomlError> {
        self.pos += 3;
        self.skip_first_newline();
        let mut out = String::new();
        loop {
            if self.starts_with("\"\"\"") {
                // Up to two quotes may end the content right before the closing delimiter.
                let mut extra = 0;
                while extra < 2 && self.peek_at(3 + extra) == Some('"') {
                    extra += 1;
                }
                out.extend(std::iter::repeat_n('"', extra));
                self.pos += 3 + extra;
                return Ok(out);
            }
            match self.peek() {
                None => return Err(self.error("unterminated multi-line string")),
                Some('\\') if self.line_ending_backslash() => {
                    self.pos += 1;
                    while matches!(self.peek(), Some(' ' | '\t' | '\n' | '\r')) {
                        self.pos += 1;
                    }
                }
                Some('\\') => out.push(self.escape()?),
                Some(c) => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// A backslash followed only by blanks up to the end of its line.
    fn line_ending_backslash(&self) -> bool {
        let mut i = 1;
        while matches!(self.peek_at(i), Some(' ' | '\t')) {
            i += 1;
        }
        matches!(self.peek_at(i), Some('\n' | '\r'))
    }

    fn literal_string(&mut self) -> Result<String, TomlError> {
        self.expect('\'')?;
        let start = self.pos;
        loop {
            match self.peek() {
                None | Some('\n') => return Err(self.error("unterminated string")),
                Some('\'') => {
                    let text = self.chars[start..self.pos].iter().collect();
                    self.pos += 1;
                    return Ok(text);
                }
                Some(_) => self.pos += 1,
            }
        }
    }

    fn multiline_literal(&mut self) -> Result<String, TomlError> {
        self.pos += 3;
        self.skip_first_newline();
        let start = self.pos;
        loop {
            if self.starts_with("'''") {
                let mut extra = 0;
                while extra < 2 && self.peek_at(3 + extra) == Some('\'') {
                    extra += 1;
                }
                let text = self.chars[start..self.pos + extra].iter().collect();
                self.pos += 3 + extra;
                return Ok(text);
            }
            if self.peek().is_none() {
                return Err(self.error("unterminated multi-line string"));
            }
            self.pos += 1;
        }
    }

    fn skip_first_newline(&mut self) {
        if self.starts_with("\r\n") {
            self.pos += 2;
        } else if self.peek() == Some('\n') {
            self.pos += 1;
        }
    }

    fn escape(&mut self) -> Result<char, TomlError> {
        self.pos += 1;
        let c = self
            .peek()
            .ok_or_else(|| self.error("unterminated escape"))?;
        self.pos += 1;
        Ok(match c {
            'b' => '\u{8}',
            't' => '\t',
            'n' => '\n',
            'f' => '\u{c}',
            'r' => '\r',
            'e' => '\u{1b}',
            '"' => '"',
            '\\' => '\\',
            'u' | 'U' => {
                let digits = if c == 'u' { 4 } else { 8 };
                let hex: String = (0..digits).filter_map(|i| self.peek_at(i)).collect();
                self.pos += digits;
                u32::from_str_radix(&hex, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| self.error(format!("bad unicode escape '\\{c}{hex}'")))?
            }
            other => return Err(self.error(format!("unknown escape '\\{other}'"))),
        })
    }
}

/// An integer or float in TOML's notation.
fn number(text: &str) -> Option<Value> {
    let plain = text.replace('_', "");
    let (sign, digits) = match plain.strip_prefix('-') {
        Some(rest) => (-1i64, rest),
        None => (1, plain.strip_prefix('+').unwrap_or(&plain)),
    };
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(rest) = digits.strip_prefix(prefix) {
            return i64::from_str_radix(rest, radix)
                .ok()
                .map(|n| Value::from(sign * n));
        }
    }
    match digits {
        "inf" | "nan" => return None,
        _ if digits.chars().all(|c| c.is_ascii_digit()) && !digits.is_empty() => {
            return plain.parse::<i64>().ok().map(Value::from);
        }
        _ => {}
    }
    let float_chars = digits
        .chars()
        .all(|c| c.is_ascii_digit() || "eE.+-".contains(c));
    if float_chars && digits.starts_with(|c: char| c.is_ascii_digit()) {
        plain
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
    } else {
        None
    }
}

/// A date, a time, or both (RFC 3339 shapes), checked loosely: digits and separators.
fn is_date_time(text: &str) -> bool {
    let date = text.len() >= 10
        && text.as_bytes()[4] == b'-'
        && text.as_bytes()[7] == b'-'
        && text[..4].chars().all(|c| c.is_ascii_digit());
    let time = text.len() >= 8 && text.as_bytes()[2] == b':' && text.as_bytes()[5] == b':';
    date || time
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_a_harbor_task_toml() {
        let doc = parse(
            r#"
version = "1.0"   # schema
[metadata]
author_name = "A. Person"
tags = ["trivial",
  "files", # trailing comma next
]
difficulty_explanation = """
Two "quotes" and a \
  continued line."""
[verifier]
timeout_sec = 120.0
env = { API_KEY = "sk-1", "quoted.key" = 'C:\path' }
[agent]
timeout_sec = 1_200
[[verifier.collect]]
run = 'echo one'
[[verifier.collect]]
run = '''echo 'two''''
[environment.resources]
cpus = 0x2
built = 1979-05-27T07:32:00Z
"#,
        )
        .unwrap();
        let doc = Value::Object(doc);
        assert_eq!(doc["version"], "1.0");
        assert_eq!(doc["metadata"]["tags"], json!(["trivial", "files"]));
        assert_eq!(
            doc["metadata"]["difficulty_explanation"],
            "Two \"quotes\" and a continued line."
        );
        assert_eq!(doc["verifier"]["timeout_sec"], 120.0);
        assert_eq!(doc["verifier"]["env"]["quoted.key"], "C:\\path");
        assert_eq!(doc["agent"]["timeout_sec"], 1200);
        assert_eq!(doc["verifier"]["collect"][1]["run"], "echo 'two'");
        assert_eq!(doc["environment"]["resources"]["cpus"], 2);
        assert_eq!(
            doc["environment"]["resources"]["built"],
            "1979-05-27T07:32:00Z"
        );
    }

    #[test]
    fn errors_name_the_line() {
        let err = parse("a = 1\n[agent]\ntimeout_sec = = 3\n").unwrap_err();
        assert_eq!(err.line, 3, "{err}");
        let err = parse("name = \"unterminated\n").unwrap_err();
        assert_eq!(err.line, 1, "{err}");
        let err = parse("[a]\nb = 1 2\n").unwrap_err();
        assert_eq!(err.line, 2, "{err}");
        assert!(
            parse("a = 1\na.b = 2\n").is_err(),
            "a is a value, not a table"
        );
    }
}
