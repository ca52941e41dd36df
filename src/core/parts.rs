//! The parts of a tool definition a person reviews (title, description, schemas, annotations,
//! the rest), their short digests, and the mark a catalogue tool carries while it waits for a
//! person's approval. Plain data the catalogue holds ([`super::catalog`]) and pinning decides
//! ([`super::pinning`]); neither of those is needed to read it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Hex characters kept of a part's SHA-256. Part digests only say *which* part changed (the
/// guard itself compares whole `definitionDigest`s), so 48 bits are plenty, and 10,000 tools'
/// parts still fit a spilled catalogue's ConfigMap.
pub const PART_DIGEST_HEX: usize = 12;

/// One part of a tool definition a person reviews.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum Part {
    Title,
    Description,
    InputSchema,
    OutputSchema,
    Annotations,
    /// Any other field of the definition (`_meta`, `icons`, `execution`, …).
    Other,
}

impl Part {
    /// Every part, in the order they are reported.
    pub const ALL: [Part; 6] = [
        Part::Title,
        Part::Description,
        Part::InputSchema,
        Part::OutputSchema,
        Part::Annotations,
        Part::Other,
    ];

    /// The part as the definition's JSON names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Title => "title",
            Part::Description => "description",
            Part::InputSchema => "inputSchema",
            Part::OutputSchema => "outputSchema",
            Part::Annotations => "annotations",
            Part::Other => "other",
        }
    }
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Short digests (first [`PART_DIGEST_HEX`] hex characters of the SHA-256 of the RFC 8785
/// canonical JSON) of each part of a tool definition; absent when the definition lacks it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartDigests {
    /// The title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The input schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<String>,
    /// The output schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<String>,
    /// The annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<String>,
    /// Every other field except the name, together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other: Option<String>,
}

impl PartDigests {
    /// The part digests of one raw tool definition.
    pub fn of(tool: &Map<String, Value>) -> Self {
        let part = |key: &str| tool.get(key).map(short_digest);
        let rest: Map<String, Value> = tool
            .iter()
            .filter(|(k, _)| {
                k.as_str() != "name" && !Part::ALL.iter().any(|p| p.as_str() == k.as_str())
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        PartDigests {
            title: part("title"),
            description: part("description"),
            input_schema: part("inputSchema"),
            output_schema: part("outputSchema"),
            annotations: part("annotations"),
            other: (!rest.is_empty()).then(|| short_digest(&Value::Object(rest))),
        }
    }

    /// True when no part is known (a catalogue written before parts were kept).
    pub fn is_empty(&self) -> bool {
        *self == PartDigests::default()
    }

    pub(super) fn get(&self, part: Part) -> Option<&str> {
        self.slot(part).as_deref()
    }

    pub(super) fn slot(&self, part: Part) -> &Option<String> {
        match part {
            Part::Title => &self.title,
            Part::Description => &self.description,
            Part::InputSchema => &self.input_schema,
            Part::OutputSchema => &self.output_schema,
            Part::Annotations => &self.annotations,
            Part::Other => &self.other,
        }
    }

    pub(super) fn slot_mut(&mut self, part: Part) -> &mut Option<String> {
        match part {
            Part::Title => &mut self.title,
            Part::Description => &mut self.description,
            Part::InputSchema => &mut self.input_schema,
            Part::OutputSchema => &mut self.output_schema,
            Part::Annotations => &mut self.annotations,
            Part::Other => &mut self.other,
        }
    }

    /// Only these parts (the others left out).
    pub(super) fn only(&self, parts: &[Part]) -> PartDigests {
        let mut out = PartDigests::default();
        for p in parts {
            *out.slot_mut(*p) = self.slot(*p).clone();
        }
        out
    }

    /// The parts whose digests differ (a part added or removed differs too).
    pub fn changed(&self, other: &PartDigests) -> Vec<Part> {
        Part::ALL
            .into_iter()
            .filter(|p| self.get(*p) != other.get(*p))
            .collect()
    }
}

fn short_digest(value: &Value) -> String {
    let canonical =
        serde_json_canonicalizer::to_vec(value).expect("a serde_json value canonicalises");
    let mut hex = hex::encode(Sha256::digest(&canonical));
    hex.truncate(PART_DIGEST_HEX);
    hex
}

/// Why a tool is withheld under pinning, and what it was pinned at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwaitingApproval {
    /// The `definitionDigest` last accepted for this tool; absent when the tool is new since
    /// pinning began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_digest: Option<String>,
    /// The part digests of that accepted definition, for the changed parts only (the others
    /// are the served definition's): a spilled catalogue of 10,000 waiting tools stays small.
    #[serde(default, skip_serializing_if = "PartDigests::is_empty")]
    pub pinned_parts: PartDigests,
    /// The parts in which the served definition differs from the pinned one; empty for a new
    /// tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<Part>,
}

impl AwaitingApproval {
    /// Every part digest of the pinned definition, given the served definition's parts this
    /// mark was made against (`changed` parts from `pinned_parts`, the rest from `served`).
    pub(super) fn pinned_in_full(&self, served: &PartDigests) -> PartDigests {
        let mut full = served.clone();
        for p in &self.changed {
            *full.slot_mut(*p) = self.pinned_parts.slot(*p).clone();
        }
        full
    }

    /// "new tool" or "description and inputSchema changed".
    pub fn what_changed(&self) -> String {
        if self.pinned_digest.is_none() {
            return "new tool".into();
        }
        if self.changed.is_empty() {
            // The pinned parts were not kept (an older catalogue): only the whole digest is known.
            return "definition changed".into();
        }
        let names: Vec<&str> = self.changed.iter().map(|p| p.as_str()).collect();
        let list = match names.as_slice() {
            [one] => one.to_string(),
            [init @ .., last] => format!("{} and {last}", init.join(", ")),
            [] => unreachable!("checked above"),
        };
        format!("{list} changed")
    }
}
