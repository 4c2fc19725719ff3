//! Parsing the YAML (or JSON) files users give the commands (Clusters,
//! objects), which may be anything: refused with the file's name, line and
//! column when too deeply nested for the parser to take in reasonable time.
//! Fuzzed by `fuzz/targets/src/cluster_file.rs`, which includes this file.

use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;

/// Deepest flow nesting (`[`, `{`) accepted in an input file. A Cluster
/// nests a dozen levels; the YAML parser takes time quadratic in the depth
/// (a 100,000-deep flow sequence: 20–60 s), so deeper files are refused
/// before it sees them.
pub(crate) const MAX_YAML_DEPTH: usize = 256;

/// Parses a YAML (or JSON) file's text, refusing at once (naming the file,
/// line and column) a flow nesting deeper than [`MAX_YAML_DEPTH`].
pub(crate) fn parse_yaml(path: &Path, text: &str) -> anyhow::Result<Value> {
    if let Some((line, column)) = too_deep(text, MAX_YAML_DEPTH) {
        anyhow::bail!(
            "{} is nested more than {MAX_YAML_DEPTH} levels deep (line {line}, column {column}); refusing to parse it",
            path.display()
        );
    }
    serde_yaml_ng::from_str(text).with_context(|| format!("{} is not valid YAML", path.display()))
}

/// Where flow collections in `text` first nest deeper than `limit`, as a
/// 1-based (line, column in bytes), if they do. A linear scan that follows
/// YAML's tokens closely enough for that purpose: brackets count in flow
/// context, or where a token starts in block context; brackets inside quoted
/// scalars, comments and block scalars (`|`, `>`) do not count.
fn too_deep(text: &str, limit: usize) -> Option<(usize, usize)> {
    let mut scanner = FlowDepth {
        limit,
        depth: 0,
        quote: None,
        block_scalar: None,
    };
    text.lines()
        .enumerate()
        .find_map(|(number, line)| scanner.line(line).map(|column| (number + 1, column)))
}

/// The state of [`too_deep`]'s scan, carried from line to line.
struct FlowDepth {
    limit: usize,
    /// How deep flow collections are nested here.
    depth: usize,
    /// The quote of the scalar being read, if any.
    quote: Option<u8>,
    /// Indentation of the line that opened a block scalar: more indented
    /// lines (and blank ones) are its text.
    block_scalar: Option<usize>,
}

/// Where the scan is within a line.
struct Cursor {
    /// The last significant byte before the current one (b'\n' at the start of a line).
    previous: u8,
    /// Whether blanks separate the current byte from `previous`.
    spaced: bool,
}

/// What a byte outside quotes does to the scan.
enum Outside {
    /// Go on with the next byte.
    Next,
    /// A comment starts: the rest of the line is not YAML.
    Comment,
    /// A flow collection opens past the limit.
    TooDeep,
}

impl FlowDepth {
    /// Scans one line: the 1-based column (in bytes) where flow collections
    /// first nest deeper than the limit, if they do.
    fn line(&mut self, line: &str) -> Option<usize> {
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|b| **b == b' ').count();
        if let Some(parent) = self.block_scalar {
            if indent >= bytes.len() || indent > parent {
                return None;
            }
            self.block_scalar = None;
        }
        let mut cursor = Cursor {
            previous: b'\n',
            spaced: true,
        };
        let mut code_end = bytes.len();
        let mut i = 0;
        while i < bytes.len() {
            i += match self.quote {
                Some(quote) => self.quoted(quote, bytes, i, &mut cursor),
                None => match self.outside_quotes(bytes[i], &mut cursor) {
                    Outside::Next => 1,
                    Outside::Comment => {
                        code_end = i;
                        break;
                    }
                    Outside::TooDeep => return Some(i + 1),
                },
            };
        }
        if self.depth == 0 && self.quote.is_none() && is_block_scalar_header(&line[..code_end]) {
            self.block_scalar = Some(indent);
        }
        None
    }

    /// Byte `i` of a scalar quoted with `quote`: how many bytes it takes (an
    /// escape or a doubled single quote takes two).
    fn quoted(&mut self, quote: u8, bytes: &[u8], i: usize, cursor: &mut Cursor) -> usize {
        let closes = match (quote, bytes[i]) {
            (b'"', b'\\') => return 2,
            (b'"', b'"') => true,
            (b'"', _) => false,
            (_, b'\'') if bytes.get(i + 1) == Some(&b'\'') => return 2,
            (_, byte) => byte == b'\'',
        };
        if closes {
            self.quote = None;
            cursor.previous = bytes[i];
            cursor.spaced = false;
        }
        1
    }

    /// A byte outside quoted scalars: brackets count in flow context, or
    /// where a token starts in block context.
    fn outside_quotes(&mut self, byte: u8, cursor: &mut Cursor) -> Outside {
        let token_start = matches!(cursor.previous, b'\n' | b'[' | b'{' | b',')
            || (cursor.spaced && matches!(cursor.previous, b':' | b'-' | b'?'));
        match byte {
            b' ' | b'\t' => {
                cursor.spaced = true;
                return Outside::Next;
            }
            b'#' if cursor.spaced => return Outside::Comment,
            b'\'' | b'"' if token_start || (self.depth > 0 && cursor.previous == b':') => self.quote = Some(byte),
            b'[' | b'{' if self.depth > 0 || token_start => {
                self.depth += 1;
                if self.depth > self.limit {
                    return Outside::TooDeep;
                }
            }
            b']' | b'}' if self.depth > 0 => self.depth -= 1,
            _ => {}
        }
        // Indicators may start a token after them; anything else (e.g. `[`
        // or `,` inside a plain scalar) is scalar text.
        let indicator = match byte {
            b'[' | b'{' => self.depth > 0 && self.quote.is_none(),
            b',' => self.depth > 0,
            b':' | b'-' | b'?' => true,
            _ => false,
        };
        cursor.previous = if indicator { byte } else { b'.' };
        cursor.spaced = false;
        Outside::Next
    }
}

/// Whether a line (without its comment) ends with a block scalar indicator
/// (`key: |`, `- >-`, `|2+`, ...).
fn is_block_scalar_header(code: &str) -> bool {
    let code = code.trim_end();
    let token = code.rsplit([' ', '\t']).next().unwrap_or_default();
    let before = code[..code.len() - token.len()].trim_end();
    (token.starts_with('|') || token.starts_with('>'))
        && token[1..].bytes().all(|b| b == b'+' || b == b'-' || b.is_ascii_digit())
        && (before.is_empty() || before.ends_with(':') || before.ends_with('-') || before.ends_with('?'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nest(depth: usize) -> String {
        format!("a: {}1{}\n", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn depth_up_to_the_limit_is_accepted_beyond_it_refused_where_it_happens() {
        assert_eq!(too_deep(&nest(MAX_YAML_DEPTH), MAX_YAML_DEPTH), None);
        assert_eq!(
            too_deep(&nest(MAX_YAML_DEPTH + 1), MAX_YAML_DEPTH),
            Some((1, 4 + MAX_YAML_DEPTH))
        );
        let mapping = format!("x:\n  y: {}1{}", "{a: ".repeat(300), "}".repeat(300));
        assert_eq!(too_deep(&mapping, MAX_YAML_DEPTH), Some((2, 6 + 4 * MAX_YAML_DEPTH)));
    }

    #[test]
    fn brackets_in_scalars_comments_and_block_scalars_do_not_count() {
        let deep = "[".repeat(1000);
        let text = format!(
            "a: \"{deep}\"\nb: '{deep}'\nc: x{deep}\nd: 1 # {deep}\ne: |\n  {deep}\n\n  {deep}\nf: [\"]]]\", '}}', {{g: 1}}]\n"
        );
        assert_eq!(too_deep(&text, MAX_YAML_DEPTH), None);
        // Closing brackets inside quotes do not hide real nesting.
        let hidden = format!("a: {}", "[\"]\", ".repeat(300));
        assert!(too_deep(&hidden, MAX_YAML_DEPTH).is_some());
    }
}
