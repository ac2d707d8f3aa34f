//! SQL identifiers we splice into statements: checked, then quoted.

use fencing_core::{Error, Result};

/// A table or column name: ASCII letters, digits and `_`, not starting
/// with a digit, at most 63 bytes (PostgreSQL's limit). Anything else is
/// refused rather than escaped, so no input can change a statement's shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ident(String);

impl Ident {
    pub(crate) fn new(name: &str) -> Result<Ident> {
        let ok = !name.is_empty()
            && name.len() <= 63
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if ok {
            Ok(Ident(name.to_owned()))
        } else {
            Err(Error::Config(format!(
                "SQL identifier {name:?} must be 1 to 63 ASCII letters, digits or '_', not starting with a digit"
            )))
        }
    }

    /// The quoted form.
    pub(crate) fn sql(&self) -> String {
        format!("\"{}\"", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_names_refuses_the_rest() {
        assert_eq!(Ident::new("fence_marks").unwrap().sql(), "\"fence_marks\"");
        for bad in [
            "",
            "1abc",
            "a-b",
            "a;drop table x",
            "a\"b",
            "ä",
            &"x".repeat(64),
        ] {
            assert!(Ident::new(bad).is_err(), "{bad:?}");
        }
    }
}
