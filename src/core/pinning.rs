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
//! - Prompts follow the same rules, their pins held the same way in the catalogue's prompts
//!   (a prompt's definition is its prompts/list entry: name, title, description, arguments).
//!   `spec.pinning.approved` and the annotation approve a prompt by its name and digest like a
//!   tool; the catalogue digest approves tools only (it covers nothing else). A catalogue pinned
//!   before prompts were ([`pin_from`]'s `prompts_pinned` false) pins every prompt as served on
//!   its next read, as the first read does, instead of holding them all back as new.

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
    /// Prompts that wait now but did not wait (with this definition) before.
    pub prompts_newly_waiting: Vec<String>,
    /// Prompts that waited before and are granted now.
    pub prompts_released: Vec<String>,
    /// Spec approvals the server does not serve.
    pub stale_approvals: Vec<StaleApproval>,
}

/// Pins `served` against the pins held by `previous` (None: pinning begins with this read, so
/// every served tool and prompt is pinned as it is). Prompts are pinned from `previous` too.
pub fn pin(previous: Option<&Catalog>, served: Catalog, approvals: &Approvals) -> Pinned {
    pin_from(previous, previous.is_some(), served, approvals)
}

/// [`pin`], saying whether `previous` holds the prompts' pins (`prompts_pinned`): false when it
/// was pinned before prompts were, so this read pins every prompt as served instead of making
/// all of them wait as new.
pub fn pin_from(
    previous: Option<&Catalog>,
    prompts_pinned: bool,
    mut served: Catalog,
    approvals: &Approvals,
) -> Pinned {
    let catalogue_approved = approvals.by_annotation.contains(&served.digest);
    let mut tools = Marks::default();
    pin_entries(
        previous.map(|c| c.tools.as_slice()),
        &mut served.tools,
        approvals,
        catalogue_approved,
        &mut tools,
    );
    let mut prompts = Marks::default();
    pin_entries(
        previous
            .filter(|_| prompts_pinned)
            .map(|c| c.prompts.as_slice()),
        &mut served.prompts,
        approvals,
        false,
        &mut prompts,
    );
    let stale_approvals = stale(&served, approvals);
    Pinned {
        catalog: served,
        newly_waiting: tools.newly_waiting,
        released: tools.released,
        prompts_newly_waiting: prompts.newly_waiting,
        prompts_released: prompts.released,
        stale_approvals,
    }
}

/// What pinning reads and marks of a catalogue entry: a tool or a prompt.
pub trait Pinnable {
    fn name(&self) -> &str;
    fn definition_digest(&self) -> &str;
    fn parts(&self) -> &PartDigests;
    fn awaiting_approval(&self) -> Option<&AwaitingApproval>;
    fn set_awaiting_approval(&mut self, mark: Option<AwaitingApproval>);
}

macro_rules! pinnable {
    ($entry:ty) => {
        impl Pinnable for $entry {
            fn name(&self) -> &str {
                &self.name
            }
            fn definition_digest(&self) -> &str {
                &self.definition_digest
            }
            fn parts(&self) -> &PartDigests {
                &self.parts
            }
            fn awaiting_approval(&self) -> Option<&AwaitingApproval> {
                self.awaiting_approval.as_ref()
            }
            fn set_awaiting_approval(&mut self, mark: Option<AwaitingApproval>) {
                self.awaiting_approval = mark;
            }
        }
    };
}
pinnable!(super::CatalogTool);
pinnable!(super::catalog::CatalogPrompt);

#[derive(Default)]
struct Marks {
    newly_waiting: Vec<String>,
    released: Vec<String>,
}

/// The rules of the module comment, for one list (tools or prompts). `previous` None: the
/// list's first read under pinning.
fn pin_entries<T: Pinnable>(
    previous: Option<&[T]>,
    served: &mut [T],
    approvals: &Approvals,
    catalogue_approved: bool,
    marks: &mut Marks,
) {
    let before: BTreeMap<&str, &T> = previous
        .map(|p| p.iter().map(|t| (t.name(), t)).collect())
        .unwrap_or_default();
    for entry in served {
        let name = entry.name().to_string();
        let digest = entry.definition_digest().to_string();
        let old = before.get(name.as_str());
        // The pin and the parts it was taken from.
        let (pinned_digest, pinned_parts) = match old {
            // First read: what Git says was reviewed is the pin (so approvals in the spec hold
            // from the start, also for an McpServer recreated from Git); otherwise what is served.
            _ if previous.is_none() => match approvals.by_spec.get(&name) {
                Some(approved) if approved != &digest => {
                    (Some(approved.clone()), PartDigests::default())
                }
                _ => (Some(digest.clone()), entry.parts().clone()),
            },
            None => (None, PartDigests::default()),
            Some(old) => match old.awaiting_approval() {
                Some(waiting) => (
                    waiting.pinned_digest.clone(),
                    waiting.pinned_in_full(old.parts()),
                ),
                None => (
                    Some(old.definition_digest().to_string()),
                    old.parts().clone(),
                ),
            },
        };
        let accepted = pinned_digest.as_ref() == Some(&digest)
            || approvals.by_spec.get(&name) == Some(&digest)
            || approvals.by_annotation.contains(&digest)
            || catalogue_approved;
        let waited_before = old.and_then(|o| o.awaiting_approval()).is_some();
        if accepted {
            if waited_before {
                marks.released.push(name);
            }
            entry.set_awaiting_approval(None);
            continue;
        }
        let same_wait = old.is_some_and(|o| o.definition_digest() == digest) && waited_before;
        if !same_wait {
            marks.newly_waiting.push(name);
        }
        let changed = match &pinned_digest {
            Some(_) if !pinned_parts.is_empty() => pinned_parts.changed(entry.parts()),
            _ => Vec::new(),
        };
        entry.set_awaiting_approval(Some(AwaitingApproval {
            pinned_parts: pinned_parts.only(&changed),
            changed,
            pinned_digest,
        }));
    }
}

/// Spec approvals that neither a tool nor a prompt of that name is served with.
fn stale(served: &Catalog, approvals: &Approvals) -> Vec<StaleApproval> {
    let tool_digests: BTreeMap<&str, &str> = served
        .tools
        .iter()
        .map(|t| (t.name.as_str(), t.definition_digest.as_str()))
        .collect();
    let prompt_digests: BTreeMap<&str, &str> = served
        .prompts
        .iter()
        .map(|p| (p.name.as_str(), p.definition_digest.as_str()))
        .collect();
    approvals
        .by_spec
        .iter()
        .filter(|(name, digest)| {
            tool_digests.get(name.as_str()) != Some(&digest.as_str())
                && prompt_digests.get(name.as_str()) != Some(&digest.as_str())
        })
        .map(|(name, digest)| StaleApproval {
            tool: name.clone(),
            approved_digest: digest.clone(),
            served_digest: tool_digests
                .get(name.as_str())
                .or_else(|| prompt_digests.get(name.as_str()))
                .map(|d| d.to_string()),
        })
        .collect()
}

/// The tools of a catalogue that wait for approval.
pub fn waiting(catalog: &Catalog) -> impl Iterator<Item = &super::CatalogTool> {
    catalog
        .tools
        .iter()
        .filter(|t| t.awaiting_approval.is_some())
}

/// The prompts of a catalogue that wait for approval.
pub fn waiting_prompts(catalog: &Catalog) -> impl Iterator<Item = &super::catalog::CatalogPrompt> {
    catalog
        .prompts
        .iter()
        .filter(|p| p.awaiting_approval.is_some())
}

/// A key that changes whenever the catalogue's served content (tools, and the resources,
/// templates and prompts beside them), its classification (the McpServer's tools.overrides) or
/// its waiting set changes: the catalogue digest when nothing waits, nothing is overridden and
/// nothing but tools is offered (so such catalogues keep their key), else a digest over it, the
/// overrides' digest, the other lists' digest and every waiting tool's and prompt's pin. The
/// spilled ConfigMap and its readers' caches are keyed by it, so an override changed alone
/// still reaches the grants.
pub fn content_key(catalog: &Catalog) -> String {
    let offered = super::resources_prompts::offered_digest(catalog);
    let mut waiting = waiting(catalog).peekable();
    if waiting.peek().is_none() && catalog.overrides_digest.is_none() && offered.is_none() {
        return catalog.digest.clone();
    }
    let mut hasher = Sha256::new();
    hasher.update(catalog.digest.as_bytes());
    if let Some(overrides) = &catalog.overrides_digest {
        hasher.update(format!("\noverrides {overrides}").as_bytes());
    }
    if let Some(offered) = &offered {
        hasher.update(format!("\noffered {offered}").as_bytes());
    }
    let pin_of = |a: Option<&AwaitingApproval>| {
        a.and_then(|a| a.pinned_digest.clone())
            .unwrap_or_else(|| "new".into())
    };
    for tool in waiting {
        let pin = pin_of(tool.awaiting_approval.as_ref());
        hasher.update(format!("\n{} {pin}", tool.name).as_bytes());
    }
    for prompt in waiting_prompts(catalog) {
        let pin = pin_of(prompt.awaiting_approval.as_ref());
        hasher.update(format!("\nprompt {} {pin}", prompt.name).as_bytes());
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests;
