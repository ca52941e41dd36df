//! What a server offers beside its tools, as its catalogue records it: its resources, resource
//! templates and prompts, each by name with the digest of its definition (the same RFC 8785
//! digest as a tool's). Pure: built from the raw lists `mcp::listing` read; the controller keeps
//! them in status (or the spilled catalogue), pinning judges the prompts
//! ([`super::pinning`]), and the grants carry the granted prompts' digests.
//!
//! ```text
//! resources/list, resources/templates/list, prompts/list (only those the server advertises)
//!     ListRead::{NotOffered, Read, Failed} ─► record() ─► Catalog.{resources, resourceTemplates,
//!                                                          prompts, counts, unreadLists}
//! ```
//!
//! A list that could not be read does not fail the catalogue: the tools are what agents call,
//! so they are kept as read, the failed list is named in `unreadLists` (and CatalogSynced's
//! message), and [`keep_unread`] carries that list over from the previous catalogue, so a
//! prompt's pin survives a passing failure.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::catalog::{Catalog, DESCRIPTION_DISPLAY_CHARS, definition_digest};
use super::parts::{AwaitingApproval, PartDigests};

/// One resource of a catalogue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogResource {
    /// The resource's URI as the server lists it.
    pub uri: String,
    /// The resource's name, when the server gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// SHA-256 of the RFC 8785 canonical JSON of the whole listed definition.
    pub definition_digest: String,
}

/// One resource template of a catalogue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogResourceTemplate {
    /// The RFC 6570 URI template as the server lists it.
    pub uri_template: String,
    /// The template's name, when the server gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// SHA-256 of the RFC 8785 canonical JSON of the whole listed definition.
    pub definition_digest: String,
}

/// One prompt of a catalogue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogPrompt {
    /// The prompt's name as the server lists it.
    pub name: String,
    /// The description, cut to a display length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// SHA-256 of the RFC 8785 canonical JSON of the whole listed definition (name, title,
    /// description, arguments, …): what pinning compares.
    pub definition_digest: String,
    /// Short digests of the parts a person reviews (title, description; arguments and the rest
    /// count as other), so a change can be told by part.
    #[serde(default, skip_serializing_if = "PartDigests::is_empty")]
    pub parts: PartDigests,
    /// Set while pinning withholds this prompt from every agent: its definition is not the one
    /// pinned, and no person approved it yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaiting_approval: Option<AwaitingApproval>,
}

/// A list beside the tools that the last read could not read. The catalogue keeps the previous
/// read's entries of that list (none if there was none).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnreadList {
    /// The list: resources/list, resources/templates/list or prompts/list.
    pub list: String,
    /// The reason word (e.g. TooManyPages, RepeatedCursor, Timeout).
    pub reason: String,
    /// What went wrong, in a sentence.
    pub message: String,
}

/// One list as a read found it.
#[derive(Debug, Clone, PartialEq)]
pub enum ListRead {
    /// The server does not advertise the capability: the list was not asked for.
    NotOffered,
    /// Every page was read.
    Read(Vec<Map<String, Value>>),
    /// The list could not be read (reason word, sentence).
    Failed { reason: String, message: String },
}

/// The three lists of one read.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedRead {
    pub resources: ListRead,
    pub resource_templates: ListRead,
    pub prompts: ListRead,
}

impl Default for OfferedRead {
    fn default() -> Self {
        OfferedRead {
            resources: ListRead::NotOffered,
            resource_templates: ListRead::NotOffered,
            prompts: ListRead::NotOffered,
        }
    }
}

/// The lists' method names, which are also what `unreadLists[].list` says.
pub const RESOURCES_LIST: &str = "resources/list";
pub const TEMPLATES_LIST: &str = "resources/templates/list";
pub const PROMPTS_LIST: &str = "prompts/list";

/// Records the lists of `read` in `catalog`: counts and sorted entries for each list read, the
/// failed ones in `unreadLists` (their entries left for [`keep_unread`]).
pub fn record(catalog: &mut Catalog, read: &OfferedRead) {
    let mut unread = |list: &str, r: &ListRead| {
        if let ListRead::Failed { reason, message } = r {
            catalog.unread_lists.push(UnreadList {
                list: list.to_string(),
                reason: reason.clone(),
                message: message.clone(),
            });
        }
    };
    unread(RESOURCES_LIST, &read.resources);
    unread(TEMPLATES_LIST, &read.resource_templates);
    unread(PROMPTS_LIST, &read.prompts);
    if let ListRead::Read(items) = &read.resources {
        let mut resources: Vec<CatalogResource> = items.iter().map(resource).collect();
        resources.sort_by(|a, b| a.uri.cmp(&b.uri));
        catalog.resource_count = Some(resources.len() as u32);
        catalog.resources = resources;
    }
    if let ListRead::Read(items) = &read.resource_templates {
        let mut templates: Vec<CatalogResourceTemplate> = items.iter().map(template).collect();
        templates.sort_by(|a, b| a.uri_template.cmp(&b.uri_template));
        catalog.resource_template_count = Some(templates.len() as u32);
        catalog.resource_templates = templates;
    }
    if let ListRead::Read(items) = &read.prompts {
        let mut prompts: Vec<CatalogPrompt> = items.iter().map(prompt).collect();
        prompts.sort_by(|a, b| a.name.cmp(&b.name));
        catalog.prompt_count = Some(prompts.len() as u32);
        catalog.prompts = prompts;
    }
}

/// Carries each list named in `catalog.unreadLists` over from `previous` (its count and
/// entries, pins included), so a list that failed this time keeps what was last read of it.
pub fn keep_unread(catalog: &mut Catalog, previous: Option<&Catalog>) {
    let Some(previous) = previous else { return };
    for unread in catalog.unread_lists.clone() {
        match unread.list.as_str() {
            RESOURCES_LIST => {
                catalog.resource_count = previous.resource_count;
                catalog.resources = previous.resources.clone();
            }
            TEMPLATES_LIST => {
                catalog.resource_template_count = previous.resource_template_count;
                catalog.resource_templates = previous.resource_templates.clone();
            }
            PROMPTS_LIST => {
                catalog.prompt_count = previous.prompt_count;
                catalog.prompts = previous.prompts.clone();
            }
            _ => {}
        }
    }
}

/// `sha256:<hex>` over every resource's, template's and prompt's digest (in catalogue order,
/// each list marked), or None when the server offers none of the three lists: so a catalogue
/// of tools only keeps the content key it always had.
pub fn offered_digest(catalog: &Catalog) -> Option<String> {
    if catalog.resource_count.is_none()
        && catalog.resource_template_count.is_none()
        && catalog.prompt_count.is_none()
    {
        return None;
    }
    let mut hasher = Sha256::new();
    let mut add = |list: &str, count: Option<u32>, digests: Vec<&str>| {
        hasher.update(format!("{list} {count:?}\n").as_bytes());
        for d in digests {
            hasher.update(d.as_bytes());
            hasher.update(b"\n");
        }
    };
    add(
        RESOURCES_LIST,
        catalog.resource_count,
        catalog
            .resources
            .iter()
            .map(|r| r.definition_digest.as_str())
            .collect(),
    );
    add(
        TEMPLATES_LIST,
        catalog.resource_template_count,
        catalog
            .resource_templates
            .iter()
            .map(|t| t.definition_digest.as_str())
            .collect(),
    );
    add(
        PROMPTS_LIST,
        catalog.prompt_count,
        catalog
            .prompts
            .iter()
            .map(|p| p.definition_digest.as_str())
            .collect(),
    );
    for u in &catalog.unread_lists {
        hasher.update(format!("unread {} {}\n", u.list, u.reason).as_bytes());
    }
    Some(format!("sha256:{}", hex::encode(hasher.finalize())))
}

fn text(item: &Map<String, Value>, key: &str) -> Option<String> {
    item.get(key).and_then(Value::as_str).map(str::to_string)
}

fn resource(item: &Map<String, Value>) -> CatalogResource {
    CatalogResource {
        uri: text(item, "uri").unwrap_or_default(),
        name: text(item, "name"),
        definition_digest: definition_digest(&Value::Object(item.clone())),
    }
}

fn template(item: &Map<String, Value>) -> CatalogResourceTemplate {
    CatalogResourceTemplate {
        uri_template: text(item, "uriTemplate").unwrap_or_default(),
        name: text(item, "name"),
        definition_digest: definition_digest(&Value::Object(item.clone())),
    }
}

fn prompt(item: &Map<String, Value>) -> CatalogPrompt {
    CatalogPrompt {
        name: text(item, "name").unwrap_or_default(),
        description: text(item, "description")
            .map(|d| super::catalog::cut(&d, DESCRIPTION_DISPLAY_CHARS)),
        definition_digest: definition_digest(&Value::Object(item.clone())),
        parts: PartDigests::of(item),
        awaiting_approval: None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::core::catalog::build;

    fn items(v: Value) -> Vec<Map<String, Value>> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_object().unwrap().clone())
            .collect()
    }

    fn tools_only() -> Catalog {
        build(
            &items(json!([{"name": "t", "inputSchema": {}}])),
            &BTreeMap::new(),
            1,
        )
    }

    #[test]
    fn lists_read_are_recorded_sorted_with_counts_and_digests() {
        let mut catalog = tools_only();
        record(
            &mut catalog,
            &OfferedRead {
                resources: ListRead::Read(items(json!([
                    {"uri": "test://b", "name": "b"},
                    {"uri": "test://a", "name": "a", "mimeType": "text/plain"}]))),
                resource_templates: ListRead::Read(items(
                    json!([{"uriTemplate": "test://{id}", "name": "by id"}]),
                )),
                prompts: ListRead::Read(items(json!([
                    {"name": "simple", "description": "A simple prompt."},
                    {"name": "args", "arguments": [{"name": "topic", "required": true}]}]))),
            },
        );
        assert_eq!(catalog.resource_count, Some(2));
        assert_eq!(catalog.resources[0].uri, "test://a");
        assert_eq!(
            catalog.resources[0].definition_digest,
            definition_digest(&json!({"uri": "test://a", "name": "a", "mimeType": "text/plain"}))
        );
        assert_eq!(catalog.resource_template_count, Some(1));
        assert_eq!(catalog.resource_templates[0].uri_template, "test://{id}");
        assert_eq!(catalog.prompt_count, Some(2));
        let names: Vec<&str> = catalog.prompts.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["args", "simple"]);
        // Arguments are part of what a person reviews: they count as "other".
        assert!(catalog.prompts[0].parts.other.is_some());
        assert!(catalog.unread_lists.is_empty());
        let value = serde_json::to_value(&catalog).unwrap();
        assert_eq!(value["resourceTemplates"][0]["uriTemplate"], "test://{id}");
        assert_eq!(value["promptCount"], 2);
    }

    #[test]
    fn a_server_that_offers_none_keeps_the_tool_catalogue_as_it_was() {
        let mut catalog = tools_only();
        let before = catalog.clone();
        record(&mut catalog, &OfferedRead::default());
        assert_eq!(catalog, before);
        assert_eq!(offered_digest(&catalog), None);
        let value = serde_json::to_value(&catalog).unwrap();
        for absent in [
            "resources",
            "resourceCount",
            "prompts",
            "promptCount",
            "unreadLists",
        ] {
            assert!(value.get(absent).is_none(), "{absent} in {value}");
        }
    }

    #[test]
    fn a_failed_list_is_named_and_keeps_the_previous_entries() {
        let offered = |prompts: ListRead| OfferedRead {
            prompts,
            ..OfferedRead::default()
        };
        let mut first = tools_only();
        record(
            &mut first,
            &offered(ListRead::Read(items(json!([{"name": "p"}])))),
        );
        let mut second = tools_only();
        record(
            &mut second,
            &offered(ListRead::Failed {
                reason: "RepeatedCursor".into(),
                message: "the server repeated a cursor".into(),
            }),
        );
        assert_eq!(second.prompt_count, None);
        keep_unread(&mut second, Some(&first));
        assert_eq!(second.prompts, first.prompts);
        assert_eq!(second.prompt_count, Some(1));
        assert_eq!(second.unread_lists[0].list, PROMPTS_LIST);
        assert_eq!(second.unread_lists[0].reason, "RepeatedCursor");
        // The tools are kept as read, whatever happened to the prompts.
        assert_eq!(second.tools, first.tools);
        assert_ne!(offered_digest(&second), offered_digest(&first));
    }

    #[test]
    fn a_changed_prompt_changes_its_digest_and_the_offered_digest() {
        let with = |description: &str| {
            let mut c = tools_only();
            record(
                &mut c,
                &OfferedRead {
                    prompts: ListRead::Read(items(
                        json!([{"name": "p", "description": description}]),
                    )),
                    ..OfferedRead::default()
                },
            );
            c
        };
        let (a, b) = (with("Summarise."), with("Summarise, then mail it out."));
        assert_ne!(
            a.prompts[0].definition_digest,
            b.prompts[0].definition_digest
        );
        assert_ne!(a.prompts[0].parts.changed(&b.prompts[0].parts), vec![]);
        assert_ne!(offered_digest(&a), offered_digest(&b));
        assert_eq!(a.digest, b.digest, "the tools' digest is the tools' only");
    }
}
