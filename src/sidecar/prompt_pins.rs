//! Pinned prompts, the prompts' rug-pull guard: under pinning the grants carry, per server, the
//! approved definition digest of every granted prompt (`promptDigests`); a prompt is served only
//! while its live prompts/list entry digests the same (the controller's [`definition_digest`],
//! as for tools in [`super::definitions`]). A prompt changed since its approval, or new, is left
//! out of prompts/list and its prompts/get refused until a person approves it on the McpServer
//! and the grants carry the new digest. Servers without `promptDigests` are not pinned: the
//! bounds alone decide.
//!
//! ```text
//! prompts/list: upstream entries ─► keep() ─► narrow_items
//! prompts/get:  upstream prompts/list ─► check(raw) ─► refused, or sent upstream
//! ```

use std::collections::BTreeMap;

use serde_json::Value;

use crate::grants::GrantsDocument;
use crate::mcp::catalog::definition_digest;

use super::resources_prompts::ListKind;

/// The approved prompt digests of `server`, when it is pinned.
pub fn pins<'d>(doc: &'d GrantsDocument, server: &str) -> Option<&'d BTreeMap<String, String>> {
    doc.servers
        .iter()
        .find(|s| s.name == server)
        .and_then(|s| s.prompt_digests.as_ref())
}

/// The entries of a list of `kind` the agent may see: for a pinned server's prompts, only those
/// served as approved; anything else as listed.
pub fn keep(doc: &GrantsDocument, server: &str, kind: ListKind, items: Vec<Value>) -> Vec<Value> {
    match (kind, pins(doc, server)) {
        (ListKind::Prompts, Some(pins)) => items
            .into_iter()
            .filter(|item| approved(pins, item))
            .collect(),
        _ => items,
    }
}

/// Whether the raw prompt `name` is served as approved, judged on the server's live prompt
/// list; otherwise the sentence the agent is refused with.
pub fn check(pins: &BTreeMap<String, String>, name: &str, live: &[Value]) -> Result<(), String> {
    let Some(item) = live
        .iter()
        .find(|i| i.get("name").and_then(Value::as_str) == Some(name))
    else {
        return Err(format!("the server no longer lists the prompt {name:?}"));
    };
    if approved(pins, item) {
        return Ok(());
    }
    Err(format!(
        "the prompt {name:?} differs from the definition a person approved (pinning): it is \
         withheld until it is approved on the McpServer (see its status.pinning.waitingPrompts)"
    ))
}

fn approved(pins: &BTreeMap<String, String>, item: &Value) -> bool {
    let Some(name) = item.get("name").and_then(Value::as_str) else {
        return false;
    };
    pins.get(name)
        .is_some_and(|digest| *digest == definition_digest(item))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pinned(item: &Value) -> BTreeMap<String, String> {
        BTreeMap::from([(
            item["name"].as_str().unwrap().to_string(),
            definition_digest(item),
        )])
    }

    #[test]
    fn a_prompt_is_served_only_as_approved() {
        let review = json!({"name": "review", "description": "Review a file",
                            "arguments": [{"name": "path", "required": true}]});
        let pins = pinned(&review);
        // Key order does not matter (RFC 8785), the definition does.
        let reordered: Value = serde_json::from_str(
            r#"{"arguments": [{"required": true, "name": "path"}], "description": "Review a file", "name": "review"}"#,
        )
        .unwrap();
        assert_eq!(
            check(&pins, "review", std::slice::from_ref(&reordered)),
            Ok(())
        );
        let pulled = json!({"name": "review", "description": "Review a file, then push it",
                            "arguments": [{"name": "path", "required": true}]});
        let refused = check(&pins, "review", std::slice::from_ref(&pulled)).unwrap_err();
        assert!(
            refused.contains("differs from the definition a person approved"),
            "{refused}"
        );
        let new = json!({"name": "new_one"});
        assert!(check(&pins, "new_one", std::slice::from_ref(&new)).is_err());
        assert!(
            check(&pins, "review", &[])
                .unwrap_err()
                .contains("no longer lists")
        );
    }

    #[test]
    fn only_a_pinned_servers_prompts_are_filtered() {
        use crate::grants::ServerGrants;
        let review = json!({"name": "review"});
        let server = |name: &str, digests: Option<BTreeMap<String, String>>| ServerGrants {
            name: name.into(),
            prefix: name.into(),
            optional: false,
            available: true,
            deferred: false,
            endpoint: None,
            tools: vec![],
            resources: vec![],
            prompts: vec![],
            prompt_digests: digests,
        };
        let doc = GrantsDocument::new(vec![
            server("pinned", Some(pinned(&review))),
            server("free", None),
        ]);
        let items = vec![review.clone(), json!({"name": "changed_or_new"})];
        assert_eq!(
            keep(&doc, "pinned", ListKind::Prompts, items.clone()),
            vec![review.clone()]
        );
        assert_eq!(keep(&doc, "free", ListKind::Prompts, items.clone()), items);
        // Resources are not pinned.
        assert_eq!(
            keep(&doc, "pinned", ListKind::Resources, items.clone()),
            items
        );
    }
}
