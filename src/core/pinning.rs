//! Pinned tool definitions, the rug-pull guard: which tools of a freshly read catalogue must
//! wait for a person's approval before any agent is granted them. Pure: the McpServer
//! reconciler calls [`pin`] with the previous catalogue (which carries the pins) and the one it
//! just read; `grants` leaves out every tool marked [`AwaitingApproval`].
//!
//! ```text
//!  previous catalogue ──pins──┐
//!  served catalogue ──────────┼─► pin() ─► catalogue with awaiting marks, stale approvals
//!  approvals (spec, annotation)┘
//! ```
//!
//! Where the pins live: a tool's pin is the digest of the definition last accepted for it. For
//! a tool that does not wait, that is its own `definitionDigest`; for a waiting tool it is
//! `awaitingApproval.pinnedDigest` (absent for a tool that is new since pinning began). So the
//! catalogue in status (or its spilled ConfigMap) holds every pin and nothing else has to.
//!
//! The rules:
//!
//! - First read under pinning (no previous pins): every tool served is pinned as it is.
//! - A tool whose definition equals its pin is granted; so is one that changes back to it.
//! - A tool whose definition differs from its pin, or a tool with no pin (new), waits unless
//!   its served digest is approved: in `spec.pinning.approved` (tool → digest), or named by the
//!   approve annotation, or the annotation names the served catalogue's digest (approving every
//!   tool as served). An approved tool stops waiting, so its served digest becomes its pin.
//! - A removed tool disappears with its pin; if it comes back, it is new.
//! - Classification (`tools.overrides`) is not part of the definition, so it never needs
//!   approval; both the served and the overridden access are kept as read (a policy judges
//!   the served one), and a changed override changes the [`content_key`].
//! - An approval in the spec that the server does not serve is reported, never an error.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::catalog::Catalog;
pub use super::parts::{AwaitingApproval, PART_DIGEST_HEX, Part, PartDigests};

/// The approvals a person gave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Approvals {
    /// `spec.pinning.approved`: tool name → the `definitionDigest` approved for it.
    pub by_spec: BTreeMap<String, String>,
    /// Digests named by the approve annotation: tools' `definitionDigest`s, or a catalogue
    /// digest (approving every tool of exactly that catalogue).
    pub by_annotation: BTreeSet<String>,
}

/// An entry of `spec.pinning.approved` that the server does not serve.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaleApproval {
    /// The tool the entry names.
    pub tool: String,
    /// The digest the entry approves.
    pub approved_digest: String,
    /// What the server serves for that tool now; absent when it serves no such tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_digest: Option<String>,
}

/// The outcome of pinning one served catalogue.
#[derive(Clone, Debug, PartialEq)]
pub struct Pinned {
    /// The served catalogue, each tool that must wait marked [`AwaitingApproval`].
    pub catalog: Catalog,
    /// Tools that wait now but did not wait (with this definition) before: for the event.
    pub newly_waiting: Vec<String>,
    /// Tools that waited before and are granted now (approved, or changed back).
    pub released: Vec<String>,
    /// Spec approvals the server does not serve.
    pub stale_approvals: Vec<StaleApproval>,
}

/// Pins `served` against the pins held by `previous` (None: pinning begins with this read, so
/// every served tool is pinned as it is).
pub fn pin(previous: Option<&Catalog>, mut served: Catalog, approvals: &Approvals) -> Pinned {
    let before: BTreeMap<&str, &super::CatalogTool> = previous
        .map(|c| c.tools.iter().map(|t| (t.name.as_str(), t)).collect())
        .unwrap_or_default();
    let catalogue_approved = approvals.by_annotation.contains(&served.digest);
    let mut newly_waiting = Vec::new();
    let mut released = Vec::new();
    for tool in &mut served.tools {
        let old = before.get(tool.name.as_str());
        // The pin and the parts it was taken from.
        let (pinned_digest, pinned_parts) = match old {
            // First read: what Git says was reviewed is the pin (so approvals in the spec hold
            // from the start, also for an McpServer recreated from Git); otherwise what is served.
            _ if previous.is_none() => match approvals.by_spec.get(&tool.name) {
                Some(approved) if approved != &tool.definition_digest => {
                    (Some(approved.clone()), PartDigests::default())
                }
                _ => (Some(tool.definition_digest.clone()), tool.parts.clone()),
            },
            None => (None, PartDigests::default()),
            Some(old) => match &old.awaiting_approval {
                Some(waiting) => (
                    waiting.pinned_digest.clone(),
                    waiting.pinned_in_full(&old.parts),
                ),
                None => (Some(old.definition_digest.clone()), old.parts.clone()),
            },
        };
        let digest = &tool.definition_digest;
        let accepted = pinned_digest.as_ref() == Some(digest)
            || approvals.by_spec.get(&tool.name) == Some(digest)
            || approvals.by_annotation.contains(digest)
            || catalogue_approved;
        let waited_before = old.and_then(|o| o.awaiting_approval.as_ref());
        tool.awaiting_approval = if accepted {
            if waited_before.is_some() {
                released.push(tool.name.clone());
            }
            None
        } else {
            let same_wait =
                old.is_some_and(|o| &o.definition_digest == digest) && waited_before.is_some();
            if !same_wait {
                newly_waiting.push(tool.name.clone());
            }
            let changed = match &pinned_digest {
                Some(_) if !pinned_parts.is_empty() => pinned_parts.changed(&tool.parts),
                _ => Vec::new(),
            };
            Some(AwaitingApproval {
                pinned_parts: pinned_parts.only(&changed),
                changed,
                pinned_digest,
            })
        };
    }
    let served_digests: BTreeMap<&str, &str> = served
        .tools
        .iter()
        .map(|t| (t.name.as_str(), t.definition_digest.as_str()))
        .collect();
    let stale_approvals = approvals
        .by_spec
        .iter()
        .filter(|(tool, digest)| served_digests.get(tool.as_str()) != Some(&digest.as_str()))
        .map(|(tool, digest)| StaleApproval {
            tool: tool.clone(),
            approved_digest: digest.clone(),
            served_digest: served_digests.get(tool.as_str()).map(|d| d.to_string()),
        })
        .collect();
    Pinned {
        catalog: served,
        newly_waiting,
        released,
        stale_approvals,
    }
}

/// The tools of a catalogue that wait for approval.
pub fn waiting(catalog: &Catalog) -> impl Iterator<Item = &super::CatalogTool> {
    catalog
        .tools
        .iter()
        .filter(|t| t.awaiting_approval.is_some())
}

/// A key that changes whenever the catalogue's served content, its classification (the
/// McpServer's tools.overrides) or its waiting set changes: the catalogue digest when nothing
/// waits and nothing is overridden (so such catalogues keep their key), else a digest over it,
/// the overrides' digest and every waiting tool's pin. The spilled ConfigMap and its readers'
/// caches are keyed by it, so an override changed alone still reaches the grants.
pub fn content_key(catalog: &Catalog) -> String {
    let mut waiting = waiting(catalog).peekable();
    if waiting.peek().is_none() && catalog.overrides_digest.is_none() {
        return catalog.digest.clone();
    }
    let mut hasher = Sha256::new();
    hasher.update(catalog.digest.as_bytes());
    if let Some(overrides) = &catalog.overrides_digest {
        hasher.update(format!("\noverrides {overrides}").as_bytes());
    }
    for tool in waiting {
        let pin = tool
            .awaiting_approval
            .as_ref()
            .and_then(|a| a.pinned_digest.as_deref());
        hasher.update(format!("\n{} {}", tool.name, pin.unwrap_or("new")).as_bytes());
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests;
