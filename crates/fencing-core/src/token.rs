//! The fencing token: one `u64` minted by the coordinator with each grant.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Longest decimal form of a `u64` (`18446744073709551615`).
const MAX_DIGITS: usize = 20;

/// A strictly monotonic number minted by a [`FencingSource`](crate::FencingSource)
/// with every grant.
///
/// Tokens from the same source identity are totally ordered: a later grant
/// always carries a larger token, also across coordinator failover. Tokens
/// from different sources are not comparable: `validate` refuses a grant of
/// another source, and a gate refuses a token of another source than the
/// one its mark is bound to when the token is presented with its source
/// ([`Gate::admit_from`](crate::Gate::admit_from) or
/// [`Gate::admit_grant`](crate::Gate::admit_grant)). The unbound
/// [`Gate::admit_any_source`](crate::Gate::admit_any_source) cannot tell sources apart; use it
/// only where one source feeds the store.
///
/// A token proves nothing by itself: it is a number a client sends. A
/// plain gate admits a forged one, and a forged huge token (`u64::MAX`)
/// raises the mark so far that every real holder is refused from then on.
/// Where clients are not trusted that far, a
/// [`ValidatingGate`](crate::ValidatingGate) asks the source before it
/// raises a mark. A restore of the coordinator from a backup can rewind
/// its counter under the same source id (see docs/gates.md, "Restoring a coordinator").
///
/// The text form is canonical decimal: digits only, no sign, no leading
/// zeros, no whitespace. Parsing anything else is an [`Error::InvalidToken`],
/// so a token survives any round trip through headers, files or logs
/// unchanged.
///
/// ```
/// use fencing_core::FencingToken;
///
/// let t: FencingToken = "42".parse()?;
/// assert_eq!(t, FencingToken::new(42));
/// assert_eq!(t.to_string(), "42");
/// assert!("-1".parse::<FencingToken>().is_err());
/// assert!(" 7".parse::<FencingToken>().is_err());
/// // Lossless to SQL BIGINT while below 2^63:
/// assert_eq!(i64::try_from(t)?, 42);
/// # Ok::<(), fencing_core::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The smallest token. No backend mints it; gates start below it.
    pub const ZERO: FencingToken = FencingToken(0);

    /// Wraps a raw value minted by a coordinator.
    #[must_use]
    pub const fn new(value: u64) -> Self {
        FencingToken(value)
    }

    /// The raw value.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({})", self.0)
    }
}

impl From<u64> for FencingToken {
    fn from(value: u64) -> Self {
        FencingToken(value)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> Self {
        token.0
    }
}

impl TryFrom<i64> for FencingToken {
    type Error = Error;

    /// Reads a token back from a signed column (SQL `BIGINT`).
    fn try_from(value: i64) -> Result<Self, Error> {
        u64::try_from(value)
            .map(FencingToken)
            .map_err(|_| Error::invalid_token(value.to_string(), "negative value"))
    }
}

impl TryFrom<FencingToken> for i64 {
    type Error = Error;

    /// Stores a token in a signed column. Every backend mints values below
    /// 2^63, so this only fails for a token that no coordinator produced.
    fn try_from(token: FencingToken) -> Result<Self, Error> {
        i64::try_from(token.0)
            .map_err(|_| Error::invalid_token(token.to_string(), "above i64::MAX"))
    }
}

impl FromStr for FencingToken {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let reason = if s.is_empty() {
            "empty"
        } else if s.len() > MAX_DIGITS {
            "too long for a 64-bit token"
        } else if !s.bytes().all(|b| b.is_ascii_digit()) {
            "not a decimal number (digits only, no sign or spaces)"
        } else if s.len() > 1 && s.starts_with('0') {
            "leading zero (tokens are canonical decimal)"
        } else {
            return s
                .parse::<u64>()
                .map(FencingToken)
                .map_err(|_| Error::invalid_token(s, "above the 64-bit range"));
        };
        Err(Error::invalid_token(s, reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_each_malformed_form_with_a_typed_error() {
        for bad in [
            "",
            "-1",
            "18446744073709551616",
            "abc",
            " 7",
            "7 ",
            "+7",
            "07",
            "1_0",
            "0x10",
        ] {
            match bad.parse::<FencingToken>() {
                Err(Error::InvalidToken { input, .. }) => assert_eq!(input, bad),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn accepts_the_full_range() {
        assert_eq!("0".parse::<FencingToken>().unwrap(), FencingToken::ZERO);
        assert_eq!(
            "18446744073709551615".parse::<FencingToken>().unwrap(),
            FencingToken::new(u64::MAX)
        );
    }

    /// Logs show the value inside its type's name; `u64::from` gives it
    /// back unchanged.
    #[test]
    fn debug_names_the_type_and_u64_takes_the_value_back() {
        let t = FencingToken::new(42);
        assert_eq!(format!("{t:?}"), "FencingToken(42)");
        assert_eq!(u64::from(t), 42);
        assert_eq!(FencingToken::from(42u64), t);
    }

    #[test]
    fn i64_conversion_is_lossless_and_bounded() {
        let max = FencingToken::new(i64::MAX as u64);
        assert_eq!(i64::try_from(max).unwrap(), i64::MAX);
        assert!(i64::try_from(FencingToken::new(i64::MAX as u64 + 1)).is_err());
        assert!(FencingToken::try_from(-1i64).is_err());
        assert_eq!(FencingToken::try_from(7i64).unwrap(), FencingToken::new(7));
    }

    #[test]
    fn serde_is_a_plain_number() {
        let json = serde_json::to_string(&FencingToken::new(9)).unwrap();
        assert_eq!(json, "9");
        assert_eq!(
            serde_json::from_str::<FencingToken>("9").unwrap(),
            FencingToken::new(9)
        );
    }

    proptest! {
        #[test]
        fn display_then_parse_round_trips(v in any::<u64>()) {
            let t = FencingToken::new(v);
            prop_assert_eq!(t.to_string().parse::<FencingToken>().unwrap(), t);
        }

        #[test]
        fn parse_never_panics_and_accepts_only_canonical(s in "\\PC{0,24}") {
            if let Ok(t) = s.parse::<FencingToken>() {
                prop_assert_eq!(t.to_string(), s);
            }
        }

        #[test]
        fn order_matches_the_number(a in any::<u64>(), b in any::<u64>()) {
            prop_assert_eq!(FencingToken::new(a).cmp(&FencingToken::new(b)), a.cmp(&b));
        }

        #[test]
        fn i64_round_trip_below_2_pow_63(v in 0..=i64::MAX) {
            let t = FencingToken::try_from(v).unwrap();
            prop_assert_eq!(i64::try_from(t).unwrap(), v);
        }
    }
}
