//! Plugin names: one string names a plugin's Service label, socket file and
//! `spec.plugins[].name`. (gRPC service names are in [`service`](crate::service).)
//!
//! ```
//! use cnpgi_core::names::validate_plugin_name;
//!
//! assert!(validate_plugin_name("cnpg-i-hello-world.cloudnative-pg.io").is_ok());
//! ```

/// Checks a plugin name against the CNPG-I rules: 1 to 63 characters, ASCII
/// letters, digits, `-` and `.`, beginning and ending with a letter or digit.
/// The same string names the plugin's Service label, socket file and
/// `spec.plugins[].name`.
///
/// ```
/// assert!(cnpgi_core::names::validate_plugin_name("cnpg-i-hello-world.cloudnative-pg.io").is_ok());
/// assert!(cnpgi_core::names::validate_plugin_name("-bad").is_err());
/// ```
pub fn validate_plugin_name(name: &str) -> Result<(), String> {
    const MAX: usize = 63;
    if name.is_empty() {
        return Err("plugin name is empty".into());
    }
    if name.len() > MAX {
        return Err(format!(
            "plugin name {name:?} is {} characters long, at most {MAX} are allowed",
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '.'))
    {
        return Err(format!(
            "plugin name {name:?} contains {bad:?}; only ASCII letters, digits, '-' and '.' are allowed"
        ));
    }
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !edge_ok(name.chars().next()) || !edge_ok(name.chars().last()) {
        return Err(format!(
            "plugin name {name:?} must begin and end with a letter or digit"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::validate_plugin_name;

    #[test]
    fn plugin_names() {
        for good in ["a", "cnpg-i-hello-world.cloudnative-pg.io", "x1", &"a".repeat(63)] {
            assert!(validate_plugin_name(good).is_ok(), "{good}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("-a", "begin and end"),
            ("a.", "begin and end"),
            ("a_b", "'_'"),
            ("a/b", "'/'"),
            (&"a".repeat(64), "at most 63"),
        ] {
            let err = validate_plugin_name(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
