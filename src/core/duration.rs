//! A duration written the way Go and Kubernetes write it (`500ms`, `10s`, `1h30m`): the CRDs'
//! timeouts and intervals, the defaults in [`super::limits`], and the duration flags of every
//! subcommand (controller, sidecar, probe, check-url; [`parse_duration`]) all parse it with
//! this one parser.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration as Go writes it, restricted to the units that make sense for timeouts and
/// intervals: `500ms`, `10s`, `5m`, `1h30m`, `1.5s`.
pub const DURATION_PATTERN: &str = r"^([0-9]+([.][0-9]+)?(ms|s|m|h))+$";

/// Longest duration string.
pub const DURATION_MAX_LENGTH: u32 = 32;

/// A non-negative duration written the way Go and Kubernetes write durations (`500ms`, `10s`,
/// `5m`, `1h30m`). Serialises back to exactly the text it was read from, so a spec round-trips
/// unchanged. Each field that holds one adds its own range rule to the schema.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Duration {
    text: String,
    value: std::time::Duration,
}

impl Duration {
    /// The duration as a standard library value.
    pub fn as_std(&self) -> std::time::Duration {
        self.value
    }

    /// The text the duration was written as.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// A duration from a literal known to be valid; for defaults.
    pub(crate) fn from_static(text: &'static str) -> Self {
        text.parse()
            .unwrap_or_else(|e| panic!("invalid built-in duration {text:?}: {e}"))
    }
}

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {0:?}: write a number followed by a unit (ms, s, m, h), repeated if you like, e.g. 500ms, 10s, 5m, 1h30m"
)]
pub struct InvalidDuration(String);

impl FromStr for Duration {
    type Err = InvalidDuration;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidDuration(text.to_owned());
        if text.is_empty() || text.len() > DURATION_MAX_LENGTH as usize {
            return Err(invalid());
        }
        let mut rest = text;
        let mut total = std::time::Duration::ZERO;
        while !rest.is_empty() {
            let number_end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .ok_or_else(invalid)?;
            let (number, after) = rest.split_at(number_end);
            let well_formed = match number.split_once('.') {
                None => !number.is_empty(),
                Some((whole, fraction)) => {
                    !whole.is_empty() && !fraction.is_empty() && !fraction.contains('.')
                }
            };
            if !well_formed {
                return Err(invalid());
            }
            let number: f64 = number.parse().map_err(|_| invalid())?;
            let (unit_seconds, unit_len) = if after.starts_with("ms") {
                (0.001, 2)
            } else if after.starts_with('s') {
                (1.0, 1)
            } else if after.starts_with('m') {
                (60.0, 1)
            } else if after.starts_with('h') {
                (3600.0, 1)
            } else {
                return Err(invalid());
            };
            total += std::time::Duration::try_from_secs_f64(number * unit_seconds)
                .map_err(|_| invalid())?;
            rest = &after[unit_len..];
        }
        Ok(Self {
            text: text.to_owned(),
            value: total,
        })
    }
}

/// A command-line duration flag (clap's `value_parser`): the same text a CRD field takes.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    text.parse::<Duration>()
        .map(|d| d.as_std())
        .map_err(|e| e.to_string())
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "minLength": 1,
            "maxLength": DURATION_MAX_LENGTH,
            "pattern": DURATION_PATTERN,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_go_for_the_units_we_accept() {
        let cases = [
            ("500ms", 500),
            ("10s", 10_000),
            ("5m", 300_000),
            ("1h30m", 5_400_000),
            ("1.5s", 1_500),
            ("0s", 0),
            ("1m30s250ms", 90_250),
        ];
        for (text, millis) in cases {
            let d: Duration = text.parse().unwrap();
            assert_eq!(d.as_std().as_millis(), millis, "{text}");
            assert_eq!(d.to_string(), text);
        }
    }

    #[test]
    fn durations_refuse_what_the_schema_pattern_refuses() {
        for text in [
            "", "10", "s", "-5s", "1d", "5 m", "1..5s", ".5s", "5.s", "10ns", "1e3s",
        ] {
            assert!(
                text.parse::<Duration>().is_err(),
                "{text:?} should be refused"
            );
        }
    }

    #[test]
    fn durations_round_trip_through_serde() {
        let d: Duration = serde_json::from_str("\"1h30m\"").unwrap();
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"1h30m\"");
        let err = serde_json::from_str::<Duration>("\"soon\"").unwrap_err();
        assert!(err.to_string().contains("e.g. 500ms"), "{err}");
    }
}
