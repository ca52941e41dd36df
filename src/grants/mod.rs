//! The pure narrowing core: intersects what a server offers, what the tenant's policies permit
//! and what an AgentSpec asks for, and writes the result as the grants document. No I/O, no
//! Kubernetes types, no async: plain data in, plain data out.
//!
//! ```text
//!  controller (AgentSpec reconciler)                          sidecar
//!    McpServer, McpTenantPolicy, AgentSpec                      grants.json
//!        │ converts (evaluates label selectors)                     │ serde
//!        ▼                                                          ▼
//!   input::ResolveInput ──► resolve::resolve() ──► Resolution { document: GrantsDocument,
//!                             uses pattern::PatternSet             servers, findings, ready }
//!                                                                   │
//!                                   document::permits(doc, "<prefix>__<tool>")  (call time)
//! ```
//!
//! - [`input`]: the plain inputs the controller builds from the three kinds of objects.
//! - [`pattern`]: `*`/`?` tool-name patterns and allow/deny sets (deny wins, empty allow = all).
//! - [`resolve`]: the one function computing the intersection, with per-server counts and the
//!   findings the AgentSpec's conditions report.
//! - [`document`]: the grants document (ConfigMap `grants.json`), its digest, and the call-time
//!   check the sidecar makes.
//! - [`resources_prompts`]: the resource and prompt grants (pattern bounds, all must permit;
//!   none without an allow pattern) and the names the agent sees them by (`<prefix>+<uri>`).
//! - [`signature`]: `grants.sig`: the operator's Ed25519 signature binding the document's bytes
//!   to its AgentSpec and a sequence; the keyring; what a sidecar refuses and why.

pub mod document;
pub mod input;
pub mod pattern;
pub mod resolve;
pub mod resources_prompts;
pub mod signature;

pub use document::{
    Endpoint, GrantedTool, GrantsDocument, HeaderReference, OAuth2Reference,
    READABLE_SCHEMA_VERSIONS, SCHEMA_VERSION, SCHEMA_VERSION_V1, ServerGrants, TlsReference,
    permits, qualified_name,
};
pub use input::{
    AgentServerInput, Approval, McpServerInput, PolicyInput, ResolveInput, RuleInput, TenantDefault,
};
pub use pattern::{Pattern, PatternSet};
pub use resolve::{Collision, Finding, Reason, Resolution, ServerOutcome, ToolRef, resolve};
pub use resources_prompts::{Bounds, PatternBound, qualified_uri, split_qualified_uri};
