//! Bounding the caller input that errors, gRPC statuses and log lines repeat.
//!
//! A plugin that quotes a bad parameter in its answer, or an operator that
//! quotes a plugin's answer in a webhook denial, would otherwise echo
//! whatever size it was given: a 3 MB parameter became a 3 MB
//! `grpc-message` header, which gRPC clients refuse (grpcio:
//! `RESOURCE_EXHAUSTED: Stream removed`), a 3 MB log line and a 1.5 MB
//! admission denial. [`bounded`] keeps the start of such text.
//!
//! ```
//! use cnpgi_core::echo::{MAX_ECHO_BYTES, bounded};
//!
//! assert_eq!(bounded("short"), "short");
//! let long = "é".repeat(3_000);
//! let cut = bounded(&long);
//! assert!(cut.len() <= MAX_ECHO_BYTES);
//! assert!(cut.ends_with("… (6000 bytes in all)"));
//! ```

use std::borrow::Cow;

/// The most bytes of echoed input kept in one message: 1 KiB.
pub const MAX_ECHO_BYTES: usize = 1024;

/// `text` itself when it is at most [`MAX_ECHO_BYTES`] long; otherwise its
/// beginning, cut on a character boundary, followed by `… (N bytes in all)`,
/// at most [`MAX_ECHO_BYTES`] in all. Bounding bounded text changes nothing.
pub fn bounded(text: &str) -> Cow<'_, str> {
    if text.len() <= MAX_ECHO_BYTES {
        return Cow::Borrowed(text);
    }
    let suffix = format!("… ({} bytes in all)", text.len());
    let mut end = MAX_ECHO_BYTES.saturating_sub(suffix.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{suffix}", &text[..end]))
}

/// [`bounded`], as an owned string.
pub fn bounded_string(text: impl Into<String>) -> String {
    let text = text.into();
    match bounded(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(cut) => cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_whole() {
        let exact = "x".repeat(MAX_ECHO_BYTES);
        assert_eq!(bounded(&exact), exact.as_str());
        assert!(matches!(bounded(&exact), Cow::Borrowed(_)));
    }

    #[test]
    fn long_text_is_cut_on_a_char_boundary_and_says_so() {
        for text in [
            "x".repeat(3_000_000),
            "€".repeat(500_000),
            format!("a{}", "😀".repeat(1000)),
        ] {
            let cut = bounded(&text);
            assert!(cut.len() <= MAX_ECHO_BYTES, "{}", cut.len());
            assert!(cut.len() > MAX_ECHO_BYTES - 40, "keeps nearly 1 KiB: {}", cut.len());
            assert!(cut.ends_with(&format!("… ({} bytes in all)", text.len())), "{cut}");
            assert!(text.starts_with(cut.trim_end_matches(&format!("… ({} bytes in all)", text.len()))));
            assert_eq!(bounded(&cut), cut, "idempotent");
        }
    }

    #[test]
    fn owned_variant_matches() {
        assert_eq!(bounded_string("abc"), "abc");
        assert_eq!(bounded_string("y".repeat(5000)), bounded(&"y".repeat(5000)));
    }
}
