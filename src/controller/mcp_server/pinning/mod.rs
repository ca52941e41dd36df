//! Pinning as the McpServer reconciler applies it: the settings once pinning is on for a server
//! (its spec, or an McpTenantPolicy rule requiring it for the servers it picks: decided by
//! [`crate::controller::shared::picking::pinning_required_by`], which the admission check reads too), which approvals a person gave
//! (spec and annotation), and what status says about the tools that wait. Pure: the reconciler
//! gathers the policies and namespace labels from its stores; the rules themselves are
//! [`crate::core::pinning`].
//!
//! ```text
//!  McpServer spec.pinning ───────────┐
//!  McpTenantPolicy rules (requirePinning) ─► picking::pinning_required_by ─► Settings { required_by, approvals }
//!  annotation mcp-operator.dev/approve ┘                          │
//!                                        status::next_status ─► core::pinning::pin ─► PinningStatus
//! ```

pub mod store;

use kube::ResourceExt;

use crate::api::mcp_server::{
    APPROVE_ANNOTATION, McpServer, PinningStatus, WAITING_LISTED_MAX, WaitingTool,
    approved_by_annotation,
};
use crate::core::Catalog;
use crate::core::pinning::{self, Approvals, Pinned};

/// Pinning for one server, when it is on.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// What turns it on: [`crate::controller::shared::picking::PINNING_BY_SPEC`] and/or `McpTenantPolicy/<name>`, sorted.
    pub required_by: Vec<String>,
    /// What a person approved.
    pub approvals: Approvals,
    /// The pins kept by the operator for a server of this name and place
    /// ([`store`]), taken when the status holds none (a recreated McpServer).
    pub kept: Option<Catalog>,
}

/// The settings, or None when nothing turns pinning on.
pub fn settings(server: &McpServer, required_by: Vec<String>) -> Option<Settings> {
    if required_by.is_empty() {
        return None;
    }
    let by_spec = server
        .spec
        .pinning
        .as_ref()
        .map(|p| p.approved.clone())
        .unwrap_or_default();
    let by_annotation = server
        .annotations()
        .get(APPROVE_ANNOTATION)
        .map(|v| approved_by_annotation(v))
        .unwrap_or_default();
    Some(Settings {
        required_by,
        approvals: Approvals {
            by_spec,
            by_annotation,
        },
        kept: None,
    })
}

/// The status section for a pinned catalogue.
pub fn status(settings: &Settings, pinned: &Pinned) -> PinningStatus {
    let waiting: Vec<&crate::core::CatalogTool> = pinning::waiting(&pinned.catalog).collect();
    let prompts: Vec<_> = pinning::waiting_prompts(&pinned.catalog).collect();
    PinningStatus {
        required_by: settings.required_by.clone(),
        waiting_count: waiting.len() as u32,
        waiting: waiting
            .iter()
            .take(WAITING_LISTED_MAX)
            .map(|t| listed(*t))
            .collect(),
        stale_approvals: pinned.stale_approvals.clone(),
        waiting_prompt_count: prompts.len() as u32,
        waiting_prompts: prompts
            .iter()
            .take(WAITING_LISTED_MAX)
            .map(|p| {
                let mut w = listed(*p);
                w.summary = prompt_summary(&w.summary);
                w
            })
            .collect(),
        prompts_pinned: true,
        content_key: pinning::content_key(&pinned.catalog),
    }
}

/// How status lists one waiting tool or prompt.
fn listed(entry: &impl pinning::Pinnable) -> WaitingTool {
    let a = entry.awaiting_approval().expect("a waiting entry");
    WaitingTool {
        name: entry.name().to_string(),
        pinned_digest: a.pinned_digest.clone(),
        served_digest: entry.definition_digest().to_string(),
        changed: a.changed.clone(),
        summary: a.what_changed(),
    }
}

/// The ToolsApproved condition: (holds, reason, message). Waiting prompts hold it back too.
pub fn condition(status: &PinningStatus, catalog: &Catalog) -> (bool, &'static str, String) {
    let stale = stale_note(status);
    let count = status.waiting_count + status.waiting_prompt_count;
    if count == 0 {
        let reason = if status.stale_approvals.is_empty() {
            "AllApproved"
        } else {
            "StaleApprovals"
        };
        let prompts = match catalog.prompt_count {
            Some(n) if n > 0 => format!(" and {n} prompts"),
            _ => String::new(),
        };
        return (
            true,
            reason,
            format!(
                "Every tool is served as pinned ({} tools{prompts}).{stale}",
                catalog.tool_count
            ),
        );
    }
    let named: Vec<String> = status
        .waiting
        .iter()
        .map(|w| format!("{} ({})", w.name, w.summary))
        .chain(
            status
                .waiting_prompts
                .iter()
                .map(|w| format!("prompt {} ({})", w.name, w.summary)),
        )
        .take(5)
        .collect();
    let more = count as usize - named.len();
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    let what = match (status.waiting_count, status.waiting_prompt_count) {
        (1, 0) => "1 tool waits".to_string(),
        (n, 0) => format!("{n} tools wait"),
        (0, 1) => "1 prompt waits".to_string(),
        (0, p) => format!("{p} prompts wait"),
        (n, p) => format!("{n} tools and {p} prompts wait"),
    };
    let listed = if status.waiting_prompt_count > 0 {
        "status.pinning.waiting and waitingPrompts"
    } else {
        "status.pinning.waiting"
    };
    (
        false,
        "AwaitingApproval",
        format!(
            "{what} for approval and no agent is granted {}: {}{more}. See {listed}; approve \
             with spec.pinning.approved or the {APPROVE_ANNOTATION} annotation.{stale}",
            if count == 1 { "it" } else { "them" },
            named.join(", ")
        ),
    )
}

/// A prompt's change in words: "new prompt" rather than the tools' "new tool".
pub fn prompt_summary(summary: &str) -> String {
    if summary == "new tool" {
        "new prompt".into()
    } else {
        summary.to_string()
    }
}

fn stale_note(status: &PinningStatus) -> String {
    if status.stale_approvals.is_empty() {
        return String::new();
    }
    let named: Vec<String> = status
        .stale_approvals
        .iter()
        .take(5)
        .map(|s| s.tool.clone())
        .collect();
    format!(
        " spec.pinning.approved names definitions the server does not serve ({}): update or \
         remove them (status.pinning.staleApprovals).",
        named.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::mcp_server::McpServerSpec;
    use crate::controller::shared::picking::PINNING_BY_SPEC;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn server(spec: serde_json::Value, labels: serde_json::Value) -> McpServer {
        let mut s = McpServer::new(
            "files",
            serde_json::from_value::<McpServerSpec>(spec).unwrap(),
        );
        s.metadata.namespace = Some("team-a".into());
        s.metadata.labels = serde_json::from_value(labels).unwrap();
        s
    }

    #[test]
    fn no_settings_when_nothing_requires_pinning() {
        let plain = server(json!({"url": "http://x/mcp"}), json!({}));
        assert_eq!(settings(&plain, Vec::new()), None);
    }

    #[test]
    fn approvals_come_from_the_spec_and_the_annotation() {
        let d = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        let mut s = server(
            json!({"url": "http://x/mcp", "pinning": {"enabled": true, "approved": {"t": d('a')}}}),
            json!({}),
        );
        s.metadata.annotations = Some(BTreeMap::from([(
            APPROVE_ANNOTATION.to_string(),
            format!("{}, {}\n", d('b'), d('c')),
        )]));
        let settings = settings(&s, vec![PINNING_BY_SPEC.into()]).unwrap();
        assert_eq!(settings.approvals.by_spec.get("t"), Some(&d('a')));
        assert_eq!(
            settings
                .approvals
                .by_annotation
                .iter()
                .cloned()
                .collect::<Vec<_>>(),
            vec![d('b'), d('c')]
        );
    }

    #[test]
    fn the_condition_counts_the_waiting_tools_and_names_stale_approvals() {
        use crate::core::catalog::build;
        use crate::core::pinning::{Approvals, pin};
        let def = |d: &str| {
            json!({"name": "read_file", "description": d, "inputSchema": {}})
                .as_object()
                .unwrap()
                .clone()
        };
        let on = Settings {
            required_by: vec![PINNING_BY_SPEC.into()],
            approvals: Approvals {
                by_spec: BTreeMap::from([(
                    "gone_tool".to_string(),
                    format!("sha256:{}", "0".repeat(64)),
                )]),
                ..Default::default()
            },
            kept: None,
        };
        let first = pin(None, build(&[def("a")], &BTreeMap::new(), 1), &on.approvals);
        let section = status(&on, &first);
        let (ok, reason, message) = condition(&section, &first.catalog);
        assert!(ok);
        assert_eq!(reason, "StaleApprovals");
        assert!(message.contains("(gone_tool)"), "{message}");

        let changed = pin(
            Some(&first.catalog),
            build(&[def("b")], &BTreeMap::new(), 1),
            &on.approvals,
        );
        let section = status(&on, &changed);
        assert_eq!(section.waiting_count, 1);
        assert_eq!(section.content_key, pinning::content_key(&changed.catalog));
        let (ok, reason, message) = condition(&section, &changed.catalog);
        assert!(!ok);
        assert_eq!(reason, "AwaitingApproval");
        assert!(
            message.starts_with(
                "1 tool waits for approval and no agent is granted it: read_file (description changed)."
            ),
            "{message}"
        );
        assert!(message.contains(APPROVE_ANNOTATION));
    }
}
