//! A file's YAML read into its raw types, with every error of its shape.
//!
//! A file that reads whole is done. One that does not is read again around its errors: each
//! entry of a top-level list or map (a task, an agent) is read alone, and each error blanks out
//! the smallest `key: value` or `- item` holding it (spaces in place of its text, so lines and
//! columns stay), until what is left reads. The checks of the values then run on that, so a
//! wrong key in one task still leaves its missing solution, and the other tasks, reported.

use std::collections::HashSet;
use std::ops::Range;

use serde::de::DeserializeOwned;
use serde_saphyr::granit_parser::{Event, Marker, Parser, StructureStyle};

use super::diagnostics::{Errors, Source};
use super::raw::{RawAgent, RawAgentsFile, RawSuite, RawTask};

/// Reads one entry of a top-level list or map on its own.
type EntryReader = fn(&str) -> Result<(), serde_saphyr::Error>;

/// A file's raw type, and the top-level keys whose entries can be read one at a time.
pub(super) trait Shape: DeserializeOwned {
    /// How to read an entry of the top-level list or map `key`; None for other keys.
    fn entries(key: &str) -> Option<EntryReader>;
}

fn entry<T: DeserializeOwned>(text: &str) -> Result<(), serde_saphyr::Error> {
    serde_saphyr::from_str::<T>(text).map(drop)
}

impl Shape for RawSuite {
    fn entries(key: &str) -> Option<EntryReader> {
        match key {
            "tasks" => Some(entry::<RawTask>),
            "agents" => Some(entry::<RawAgent>),
            _ => None,
        }
    }
}

impl Shape for RawAgentsFile {
    fn entries(key: &str) -> Option<EntryReader> {
        (key == "agents").then_some(entry::<RawAgent> as EntryReader)
    }
}

/// What was read, and what of the file was left out to read it.
pub(super) struct Read<T> {
    pub raw: T,
    pub lost: Lost,
}

/// The keys and entries left out of a file for their errors: what the checks of the values
/// must not call missing.
#[derive(Default)]
pub(super) struct Lost {
    /// The document, when something was left out.
    outline: Option<Outline>,
    /// The mappings and lists that lost keys or entries.
    holders: HashSet<usize>,
}

impl Lost {
    /// Whether the mapping holding `at` (one of its keys or scalar values) lost keys.
    pub(super) fn keys_near(&self, at: (u64, u64)) -> bool {
        self.outline.as_ref().is_some_and(|outline| {
            outline
                .innermost_map(at)
                .is_some_and(|map| self.holders.contains(&map))
        })
    }

    /// Whether the value of the top-level key `key` lost keys or entries.
    pub(super) fn under(&self, key: &str) -> bool {
        self.outline.as_ref().is_some_and(|outline| {
            outline.nodes[outline.root].entries.iter().any(|&pair| {
                let pair = &outline.regions[pair];
                pair.key.as_deref() == Some(key) && self.holders.contains(&pair.value)
            })
        })
    }
}

/// Reads the file as `T`; its errors go to `errors`. None when no part of it could be read as
/// `T` (a syntax error, or a required key that is wrong).
pub(super) fn read<T: Shape>(source: &Source, errors: &mut Errors) -> Option<Read<T>> {
    let first = match serde_saphyr::from_str::<T>(source.text) {
        Ok(raw) => {
            return Some(Read {
                raw,
                lost: Lost::default(),
            });
        }
        Err(err) => err,
    };
    let outline = match Outline::of(source.text) {
        Ok(Some(outline)) => outline,
        Ok(None) => {
            errors.push(source.yaml_error(&first, 0));
            return None;
        }
        Err(()) => {
            errors.push(source.syntax_error(&first));
            return None;
        }
    };
    let mut recovery = Recovery {
        source,
        blanked: vec![false; outline.regions.len()],
        outline: &outline,
    };
    // Each entry alone first: one parse of each, however many are wrong.
    for &pair in &outline.nodes[outline.root].entries {
        let pair = &outline.regions[pair];
        let Some(read_entry) = pair.key.as_deref().and_then(T::entries) else {
            continue;
        };
        for &entry in &outline.nodes[pair.value].entries {
            let value = outline.regions[entry].value;
            let node = &outline.nodes[value];
            // An alias may need what is outside the entry: the whole file reads it.
            if !node.is_map || node.holds_alias || node.holds_anchor {
                continue;
            }
            if recovery.settle(Some(value), read_entry, errors).is_none() {
                recovery.blanked[entry] = true;
            }
        }
    }
    let raw = recovery.settle(None, |text| serde_saphyr::from_str::<T>(text), errors)?;
    let holders = (outline.regions.iter().zip(&recovery.blanked))
        .filter(|(_, blanked)| **blanked)
        .map(|(region, _)| region.parent)
        .collect();
    Some(Read {
        raw,
        lost: Lost {
            outline: Some(outline),
            holders,
        },
    })
}

/// A line and a column, from 1, as serde-saphyr reports them.
type Pos = (u64, u64);

fn pos(marker: &Marker) -> Pos {
    (marker.line() as u64, marker.col() as u64 + 1)
}

/// A YAML node: where its text is and what it holds.
struct Node {
    bytes: Range<usize>,
    from: Pos,
    to: Pos,
    is_map: bool,
    is_block: bool,
    holds_alias: bool,
    /// An anchor is defined in it: blanking it would break the aliases to it.
    holds_anchor: bool,
    /// The mapping or list it is in.
    parent: Option<usize>,
    /// The region it is the key or the value of.
    region: Option<usize>,
    /// The regions directly in it.
    entries: Vec<usize>,
}

/// What can be blanked: a `key: value` of a block mapping, or a `- item` of a block list.
struct Region {
    whole: Range<usize>,
    from: Pos,
    to: Pos,
    key: Option<String>,
    value: usize,
    /// The mapping or list it is in.
    parent: usize,
    /// Just past the key's colon: where ` []` or ` {}` stands in for a value all of whose
    /// entries are blanked, so that it stays a list or a map.
    after_colon: Option<usize>,
}

/// The nodes (in the order they start) and regions of a document.
struct Outline {
    nodes: Vec<Node>,
    regions: Vec<Region>,
    root: usize,
}

/// A collection still being read.
struct Open {
    node: usize,
    /// A mapping's key read, its value not yet.
    key: Option<usize>,
}

impl Outline {
    /// Err on a syntax error; None for a document it cannot blank (no byte offsets, no root).
    fn of(text: &str) -> Result<Option<Self>, ()> {
        let mut outline = Outline {
            nodes: Vec::new(),
            regions: Vec::new(),
            root: usize::MAX,
        };
        let mut open: Vec<Open> = Vec::new();
        for event in Parser::new_from_str(text) {
            let (event, span) = event.map_err(drop)?;
            let (Some(start), Some(end)) = (span.start.byte_offset(), span.end.byte_offset())
            else {
                return Ok(None);
            };
            let node = |is_map, is_block, holds_alias, anchor: usize| Node {
                bytes: start..end,
                from: pos(&span.start),
                to: pos(&span.end),
                is_map,
                is_block,
                holds_alias,
                holds_anchor: anchor != 0,
                parent: open.last().map(|open| open.node),
                region: None,
                entries: Vec::new(),
            };
            match event {
                Event::Scalar(_, _, anchor, _) => {
                    outline.nodes.push(node(false, false, false, anchor));
                    outline.attach(text, &mut open, outline.nodes.len() - 1);
                }
                Event::Alias(_) => {
                    outline.nodes.push(node(false, false, true, 0));
                    outline.attach(text, &mut open, outline.nodes.len() - 1);
                }
                Event::MappingStart(style, anchor, _) | Event::SequenceStart(style, anchor, _) => {
                    let is_map = matches!(event, Event::MappingStart(..));
                    let is_block = style == StructureStyle::Block;
                    outline.nodes.push(node(is_map, is_block, false, anchor));
                    open.push(Open {
                        node: outline.nodes.len() - 1,
                        key: None,
                    });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    let Some(done) = open.pop() else {
                        return Ok(None);
                    };
                    let node = &mut outline.nodes[done.node];
                    node.bytes.end = end;
                    node.to = pos(&span.end);
                    outline.attach(text, &mut open, done.node);
                }
                _ => {}
            }
        }
        Ok((outline.root != usize::MAX).then_some(outline))
    }

    /// Puts a finished node in the collection it belongs to, as a key, a value or an item.
    fn attach(&mut self, text: &str, open: &mut [Open], node: usize) {
        let Some(parent) = open.last_mut() else {
            self.root = node;
            return;
        };
        let (alias, anchor) = (self.nodes[node].holds_alias, self.nodes[node].holds_anchor);
        let holder = &mut self.nodes[parent.node];
        holder.holds_alias |= alias;
        holder.holds_anchor |= anchor;
        let (is_map, is_block) = (holder.is_map, holder.is_block);
        let start = self.nodes[node].bytes.start;
        let (key, whole_start, from, after_colon) = if is_map {
            let Some(key) = parent.key.take() else {
                parent.key = Some(node);
                return;
            };
            let key_node = &self.nodes[key];
            let written = text[key_node.bytes.clone()].trim_matches(['"', '\'']);
            let rest = &text[key_node.bytes.end..];
            let colon =
                key_node.bytes.end + (rest.len() - rest.trim_start_matches([' ', '\t']).len());
            let after_colon = text[colon..].starts_with(':').then_some(colon + 1);
            let (whole_start, from) = (key_node.bytes.start, key_node.from);
            (
                Some((key, written.to_owned())),
                whole_start,
                from,
                after_colon,
            )
        } else {
            // The item's `-`: the last thing before it.
            let before = text[..start].trim_end();
            if !before.ends_with('-') {
                return;
            }
            let dash = before.len() - 1;
            let line_start = text[..dash].rfind('\n').map_or(0, |at| at + 1);
            let column = text[line_start..dash].chars().count() as u64 + 1;
            let line = self.nodes[node].from.0 - text[dash..start].matches('\n').count() as u64;
            (None, dash, (line, column), None)
        };
        if !is_block {
            return;
        }
        let index = self.regions.len();
        if let Some((key, _)) = key {
            self.nodes[key].region = Some(index);
        }
        self.nodes[node].region = Some(index);
        self.nodes[parent.node].entries.push(index);
        self.regions.push(Region {
            whole: whole_start..self.nodes[node].bytes.end,
            from,
            to: self.nodes[node].to,
            key: key.map(|(_, written)| written),
            value: node,
            parent: parent.node,
            after_colon,
        });
    }

    /// The regions in `node`, at any depth.
    fn regions_under(&self, node: usize) -> Vec<usize> {
        let mut found = Vec::new();
        let mut stack = vec![node];
        while let Some(node) = stack.pop() {
            for &region in &self.nodes[node].entries {
                found.push(region);
                stack.push(self.regions[region].value);
            }
        }
        found
    }

    /// The nodes holding `at`, innermost first: the last node to start before it, then the
    /// collections it is in.
    fn around(&self, at: Pos) -> impl Iterator<Item = usize> {
        let last = self.nodes.partition_point(|node| node.from <= at);
        std::iter::successors(last.checked_sub(1), |&node| self.nodes[node].parent)
    }

    /// The innermost mapping holding `at`.
    fn innermost_map(&self, at: Pos) -> Option<usize> {
        self.around(at).find(|&node| {
            let node = &self.nodes[node];
            node.is_map && node.from <= at && at < node.to
        })
    }

    /// The innermost region holding `at`, its end included (where a missing value is).
    fn innermost_region(&self, at: Pos) -> Option<usize> {
        self.around(at)
            .filter_map(|node| self.nodes[node].region)
            .find(|&region| {
                let region = &self.regions[region];
                region.from <= at && at <= region.to
            })
    }
}

/// The blanking of one document, shared by the reads of its entries and of the whole.
struct Recovery<'a> {
    source: &'a Source<'a>,
    outline: &'a Outline,
    blanked: Vec<bool>,
}

impl Recovery<'_> {
    /// Reads `within` (a node; None for the whole file) with `read` until it reads, each error
    /// kept and its region blanked; None when an error is in no region of `within` that can be
    /// blanked.
    fn settle<R>(
        &mut self,
        within: Option<usize>,
        read: impl Fn(&str) -> Result<R, serde_saphyr::Error>,
        errors: &mut Errors,
    ) -> Option<R> {
        let outline = self.outline;
        let (view, line_shift) = match within {
            Some(node) => {
                let node = &outline.nodes[node];
                (node.bytes.clone(), node.from.0 - 1)
            }
            None => (0..self.source.text.len(), 0),
        };
        let inside = |region: &usize| {
            let region = &outline.regions[*region];
            region.whole.start >= view.start
                && region.whole.end <= view.end
                && Some(region.value) != within
        };
        let top = within.unwrap_or(outline.root);
        let entries = &outline.nodes[top].entries;
        let regions = outline.regions_under(top);
        loop {
            if !entries.is_empty() && entries.iter().all(|&entry| self.blanked[entry]) {
                return None;
            }
            let err = match read(&self.render(&view, &regions)) {
                Ok(value) => return Some(value),
                Err(err) => err,
            };
            let Some(location) = err.location() else {
                errors.push(self.source.yaml_error(&err, line_shift));
                return None;
            };
            let at = (location.line() + line_shift, location.column());
            let region = match err.without_snippet() {
                // Said at a key of the mapping that lacks the field: that mapping goes.
                serde_saphyr::Error::SerdeMissingField { field, .. } => {
                    let map = outline.innermost_map(at);
                    // A required key this recovery blanked is missing now: not the user's error.
                    let ours = map.is_some_and(|map| {
                        outline.nodes[map].entries.iter().any(|&pair| {
                            self.blanked[pair]
                                && outline.regions[pair].key.as_deref() == Some(field)
                        })
                    });
                    if !ours {
                        errors.push(self.source.yaml_error(&err, line_shift));
                    }
                    map.and_then(|map| {
                        (outline.nodes[map].region)
                            .filter(|&region| outline.regions[region].value == map)
                    })
                }
                _ => {
                    errors.push(self.source.yaml_error(&err, line_shift));
                    outline.innermost_region(at)
                }
            };
            match region.filter(inside) {
                Some(region)
                    if !self.blanked[region]
                        && !outline.nodes[outline.regions[region].value].holds_anchor =>
                {
                    self.blanked[region] = true;
                }
                _ => return None,
            }
        }
    }

    /// The text of `view` with its blanked `regions` as spaces, from the start of its first
    /// line (whose text before the view is spaces too), so lines and columns stay.
    fn render(&self, view: &Range<usize>, regions: &[usize]) -> String {
        let (text, outline) = (self.source.text, self.outline);
        let line_start = text[..view.start].rfind('\n').map_or(0, |at| at + 1);
        let mut cuts: Vec<Range<usize>> = Vec::new();
        cuts.push(line_start..view.start);
        let mut inserts: Vec<(usize, &str)> = Vec::new();
        for &index in regions {
            let region = &outline.regions[index];
            if self.blanked[index] {
                cuts.push(region.whole.clone());
                continue;
            }
            let value = &outline.nodes[region.value];
            if !value.entries.is_empty()
                && value.entries.iter().all(|&entry| self.blanked[entry])
                && let Some(at) = region.after_colon
            {
                inserts.push((at, if value.is_map { " {}" } else { " []" }));
            }
        }
        cuts.sort_by_key(|cut| cut.start);
        inserts.sort();
        let mut out = String::with_capacity(view.end - line_start);
        let (mut cut, mut insert) = (0, 0);
        for (offset, c) in text[line_start..view.end].char_indices() {
            let at = line_start + offset;
            while let Some((place, stand_in)) = inserts.get(insert)
                && *place <= at
            {
                out.push_str(stand_in);
                insert += 1;
            }
            while cuts.get(cut).is_some_and(|range| range.end <= at) {
                cut += 1;
            }
            let blank = cuts[cut..]
                .iter()
                .take_while(|range| range.start <= at)
                .any(|range| range.contains(&at));
            out.push(if blank && c != '\n' && c != '\r' {
                ' '
            } else {
                c
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::suite::SuiteError;

    /// The errors of reading `text` as a suite, each as `LINE:COLUMN: MESSAGE`, and what was read.
    fn read_suite(text: &str) -> (Vec<String>, Option<Read<RawSuite>>) {
        let source = Source::new(Path::new("suite.yaml"), text);
        let mut errors = Errors::default();
        let read = read::<RawSuite>(&source, &mut errors);
        let said = match errors.finish(Some(())) {
            Ok(()) => Vec::new(),
            Err(SuiteError::Several(all)) => all.iter().map(ToString::to_string).collect(),
            Err(one) => vec![one.to_string()],
        };
        let said = said
            .into_iter()
            .map(|line| line.trim_start_matches("suite.yaml:").to_owned())
            .collect();
        (said, read)
    }

    const AGENTS: &str =
        "name: s\nrepo: r\nagents:\n  a:\n    kind: noop\n    tmeout: 5m\n  b:\n    kind: noop\n";

    #[test]
    fn each_wrong_entry_is_said_and_the_rest_is_read() {
        let text = format!(
            "{AGENTS}tasks:\n  - id: t1\n    verfy: 'true'\n  - id: [t2]\n    verify: 'true'\n  - id: t3\n    verify: 'true'\n"
        );
        let (said, read) = read_suite(&text);
        let starts: Vec<&str> = said
            .iter()
            .map(|line| &line[..line.find(": ").unwrap()])
            .collect();
        assert_eq!(starts, ["6:5", "11:5", "12:9"], "{said:#?}");
        assert!(said[0].contains("unknown field `tmeout`"), "{said:#?}");
        assert!(said[2].contains("expected string scalar"), "{said:#?}");
        let read = read.expect("the rest reads");
        let ids: Vec<&str> = read
            .raw
            .tasks
            .value
            .iter()
            .map(|t| t.id.value.as_str())
            .collect();
        // t2's id cannot be read, so t2 goes; t1 stays without its wrong key.
        assert_eq!(ids, ["t1", "t3"]);
        assert_eq!(read.raw.agents.len(), 2);
        assert!(read.lost.keys_near((10, 9)), "t1 lost a key");
        assert!(!read.lost.keys_near((14, 9)), "t3 lost none");
        assert!(read.lost.keys_near((6, 5)), "agent a lost a key");
        assert!(read.lost.under("tasks"));
        assert!(!read.lost.under("agents"), "no agent was left out whole");
    }

    #[test]
    fn a_list_all_of_whose_entries_go_stays_a_list() {
        let text = format!("{AGENTS}tasks:\n- id: [t1]\n  verify: 'true'\n");
        let (said, read) = read_suite(&text);
        // The id blanked leaves `id` missing: that is not said again.
        assert_eq!(said.len(), 2, "{said:#?}");
        assert!(said[1].starts_with("10:7: "), "{said:#?}");
        let read = read.expect("the rest reads");
        assert!(read.raw.tasks.value.is_empty());
        assert!(read.lost.under("tasks"));
    }

    #[test]
    fn a_wrong_required_key_of_the_file_stops_the_read() {
        let (said, read) = read_suite(&format!("{AGENTS}tasks: 5\n"));
        assert!(read.is_none());
        assert_eq!(said.len(), 2, "{said:#?}");
        assert!(said[1].starts_with("9:8: "), "{said:#?}");
    }

    #[test]
    fn blanking_keeps_lines_and_columns() {
        let text = "a:\n  - x: 1\n    y: 2\n  - z: 3\nb: 4\n";
        let source = Source::new(Path::new("f.yaml"), text);
        let outline = Outline::of(text).unwrap().unwrap();
        let mut recovery = Recovery {
            source: &source,
            blanked: vec![false; outline.regions.len()],
            outline: &outline,
        };
        let a = outline.regions[outline.nodes[outline.root].entries[0]].value;
        let items = outline.nodes[a].entries.clone();
        let all = outline.regions_under(outline.root);
        recovery.blanked[items[0]] = true;
        assert_eq!(
            recovery.render(&(0..text.len()), &all),
            "a:\n        \n        \n  - z: 3\nb: 4\n"
        );
        // With none of its items left, `a` stays a list.
        recovery.blanked[items[1]] = true;
        assert_eq!(
            recovery.render(&(0..text.len()), &all),
            "a: []\n        \n        \n        \nb: 4\n"
        );
    }
}
