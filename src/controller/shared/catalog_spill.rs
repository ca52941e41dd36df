//! Catalogues too large for an McpServer's status (etcd caps an object at about 1.5 MiB) move to
//! a companion ConfigMap `<server>-mcp-catalog`, gzip-compressed, owned by the McpServer; status
//! then keeps the counts and digest with empty tool, resource, template and prompt lists and
//! names the ConfigMap. The
//! McpServer reconciler writes and removes it; the AgentSpec reconciler reads it back.

use std::collections::BTreeMap;
use std::io::Write;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube::{Api, Client, Resource, ResourceExt};

use crate::api::mcp_server::McpServer;
use crate::controller::shared::config_map::{apply_if_changed, delete_if_present};
use crate::core::Catalog;
use crate::core::pinning::content_key;

/// Above this many bytes of tool, resource, template and prompt entries, the catalogue leaves
/// status.
pub const STATUS_TOOLS_BUDGET: usize = 512 * 1024;
/// The key holding the gzip-compressed catalogue JSON.
pub const CATALOG_KEY: &str = "catalog.json.gz";
const DIGEST_ANNOTATION: &str = "mcp-operator.dev/catalog-digest";

pub fn config_map_name(server: &str) -> String {
    format!("{server}-mcp-catalog")
}

/// Whether the catalogue's lists (tools, resources, resource templates, prompts) together are
/// too large for status.
pub fn too_large_for_status(catalog: &Catalog) -> bool {
    let size = |v: Result<Vec<u8>, serde_json::Error>| v.map_or(usize::MAX, |v| v.len());
    let total = [
        size(serde_json::to_vec(&catalog.tools)),
        size(serde_json::to_vec(&catalog.resources)),
        size(serde_json::to_vec(&catalog.resource_templates)),
        size(serde_json::to_vec(&catalog.prompts)),
    ]
    .into_iter()
    .fold(0usize, usize::saturating_add);
    total > STATUS_TOOLS_BUDGET
}

/// The gzip-compressed JSON of the whole catalogue.
pub fn compress(catalog: &Catalog) -> Vec<u8> {
    let json = serde_json::to_vec(catalog).expect("a catalogue serialises");
    let mut encoder = flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::best());
    encoder.write_all(&json).expect("writing to memory");
    encoder.finish().expect("writing to memory")
}

/// Reads a spilled catalogue back (the sidecar and tests use this).
pub fn decompress(bytes: &[u8]) -> Option<Catalog> {
    let mut json = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut json).ok()?;
    serde_json::from_slice(&json).ok()
}

/// Makes the companion ConfigMap hold `catalog` (built and written only when its content key
/// changed: its digest, and under pinning which tools wait). Returns whether anything was
/// written.
pub async fn publish(
    client: &Client,
    server: &McpServer,
    catalog: &Catalog,
    field_manager: &str,
) -> Result<bool, kube::Error> {
    let namespace = server.namespace().unwrap_or_default();
    let name = config_map_name(&server.name_any());
    let key = content_key(catalog);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    apply_if_changed(&api, &name, DIGEST_ANNOTATION, &key, field_manager, || {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                owner_references: server.controller_owner_ref(&()).map(|o| vec![o]),
                labels: Some(BTreeMap::from([
                    (
                        "app.kubernetes.io/managed-by".to_string(),
                        "mcp-operator".to_string(),
                    ),
                    ("mcp-operator.dev/mcpserver".to_string(), server.name_any()),
                ])),
                annotations: Some(BTreeMap::from([(
                    DIGEST_ANNOTATION.to_string(),
                    key.clone(),
                )])),
                ..Default::default()
            },
            binary_data: Some(BTreeMap::from([(
                CATALOG_KEY.to_string(),
                ByteString(compress(catalog)),
            )])),
            ..Default::default()
        }
    })
    .await
}

/// The full catalogue from the companion ConfigMap, if it is there and readable.
pub async fn read(client: &Client, server: &McpServer) -> Option<Catalog> {
    read_checked(client, server).await.ok()?
}

/// The same, telling an apiserver error (Err) from a ConfigMap that is missing or does not
/// hold a readable catalogue (None).
pub async fn read_checked(
    client: &Client,
    server: &McpServer,
) -> Result<Option<Catalog>, kube::Error> {
    let api: Api<ConfigMap> =
        Api::namespaced(client.clone(), &server.namespace().unwrap_or_default());
    let Some(cm) = api.get_opt(&config_map_name(&server.name_any())).await? else {
        return Ok(None);
    };
    Ok(cm
        .binary_data
        .and_then(|d| d.get(CATALOG_KEY).and_then(|b| decompress(&b.0))))
}

/// Removes the companion ConfigMap once the catalogue fits in status again.
pub async fn remove(client: &Client, server: &McpServer) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> =
        Api::namespaced(client.clone(), &server.namespace().unwrap_or_default());
    delete_if_present(&api, &config_map_name(&server.name_any())).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::catalog::build;
    use serde_json::json;

    #[test]
    fn ten_thousand_tools_spill_and_fit_a_config_map() {
        let tools: Vec<_> = (0..10_000)
            .map(|i| {
                json!({"name": format!("tool_{i:05}"),
                       "description": format!("Tool number {i} does a thing to the thing {i}."),
                       "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}})
                .as_object()
                .unwrap()
                .clone()
            })
            .collect();
        let catalog = build(&tools, &BTreeMap::new(), 100);
        assert!(too_large_for_status(&catalog));
        let gz = compress(&catalog);
        // A ConfigMap holds at most 1 MiB of data.
        assert!(gz.len() < 1024 * 1024, "compressed to {} bytes", gz.len());
        assert_eq!(decompress(&gz).unwrap(), catalog);
    }

    /// Each waiting tool adds its pinned digest (about 50 bytes compressed): 10,000 tools of
    /// which 8,000 wait at once still fit. All 10,000 do not (about 1.09 MB); the README says so.
    #[test]
    fn ten_thousand_tools_with_eight_thousand_waiting_for_approval_fit_a_config_map() {
        use crate::core::pinning::{Approvals, pin};
        let tools = |changed: usize| -> Vec<_> {
            (0..10_000)
                .map(|i| {
                    let version = if i < changed { "v2" } else { "v1" };
                    json!({"name": format!("tool_{i:05}"),
                           "description": format!("Tool number {i} does a thing ({version})."),
                           "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}})
                    .as_object()
                    .unwrap()
                    .clone()
                })
                .collect()
        };
        let none = Approvals::default();
        let first = pin(None, build(&tools(0), &BTreeMap::new(), 100), &none).catalog;
        let changed = pin(
            Some(&first),
            build(&tools(8_000), &BTreeMap::new(), 100),
            &none,
        )
        .catalog;
        assert_eq!(
            changed
                .tools
                .iter()
                .filter(|t| t.awaiting_approval.is_some())
                .count(),
            8_000
        );
        let gz = compress(&changed);
        eprintln!(
            "10,000 tools: {} bytes compressed; 8,000 of them waiting: {} bytes",
            compress(&first).len(),
            gz.len()
        );
        assert!(gz.len() < 1024 * 1024, "compressed to {} bytes", gz.len());
        assert_eq!(decompress(&gz).unwrap(), changed);
    }

    #[test]
    fn small_catalogues_stay_in_status() {
        let tools = vec![
            json!({"name": "a", "inputSchema": {}})
                .as_object()
                .unwrap()
                .clone(),
        ];
        assert!(!too_large_for_status(&build(&tools, &BTreeMap::new(), 1)));
    }
}
