//! The `json_patch` target: JSON Patches parsed, applied and diffed.

use cnpgi_core::patch::{create_patch, parse_patch, patched};
use serde_json::Value;

/// JSON Patches as plugins answer them, applied to objects: any patch
/// parses or is refused, and applies or fails naming the operation, never a
/// panic; a patch that applies leaves the input object as it was.
///
/// The input is the object, a NUL byte, the patch (without a NUL byte: the
/// patch, applied to `{}`).
pub fn json_patch(data: &[u8]) {
    let (object, patch) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&b"{}"[..], data),
    };
    let Ok(object) = serde_json::from_slice::<Value>(object) else {
        return;
    };
    let Ok(patch) = parse_patch(patch) else { return };
    let before = object.clone();
    if let Ok(after) = patched(&object, &patch) {
        assert_eq!(object, before, "patched() changed its input");
        // The diff of the two, applied to the first, gives the second.
        let diff = create_patch(&object, &after);
        assert_eq!(
            patched(&object, &diff).ok().as_ref(),
            Some(&after),
            "create_patch does not round-trip"
        );
    }
}
