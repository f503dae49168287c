//! Query and path parameters, parsed by serde (never by hand): [`ProfileQuery`],
//! [`ListQuery`] and the build id of the path.

use collector::BuildId;
use serde::Deserialize;

use super::error::ApiError;
use crate::store::ProfileFormat;

/// The windows a request may ask for. The state directory holds the merge of all retained
/// windows, so `all` is the only value served; anything else is a 400, not a silent
/// substitute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowSelector {
    /// Every retained window, merged.
    #[default]
    All,
}

/// `?format=extbinary|text|unsymbolized|pprof&window=all`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileQuery {
    /// Output format (default extbinary).
    #[serde(default)]
    pub format: ProfileFormat,
    /// Window selection (default all).
    #[serde(default)]
    pub window: WindowSelector,
}

/// `GET /api/v1/profiles?all=true|false`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Also list the aggregates with no counted sample (default false).
    #[serde(default)]
    pub all: bool,
}

/// Parses a path build id: lower- or upper-case hex, 2–128 digits; normalised to lower case.
pub fn parse_build_id(s: &str) -> Result<BuildId, ApiError> {
    BuildId::from_hex(s)
        .filter(|_| s.len() >= 2 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| ApiError::BadRequest(format!("invalid build id {s:?}: expected hex")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_ids() {
        assert_eq!(parse_build_id("ABcd").unwrap().0, vec![0xab, 0xcd]);
        assert!(parse_build_id("abc").is_err());
        assert!(parse_build_id("zz").is_err());
        assert!(parse_build_id(" ab").is_err());
    }
}
