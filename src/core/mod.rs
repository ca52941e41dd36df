//! The vocabulary every other module speaks, at the bottom of the crate: what a server's
//! catalogue holds (tools, access levels, approval), which protocol era and transport a server
//! uses, the bounds on reading it and their defaults, Secret and ConfigMap key references, and
//! Go-style durations. Plain data and pure functions; depends on nothing else in this crate.
//!
//! ```text
//!   api (CRDs) ──┐
//!   mcp (client) ┼──► core
//!   grants ──────┘
//! ```
//!
//! - [`catalog`]: `Access`, `Approval`, `Catalog`, `CatalogTool`; building and digesting a
//!   catalogue from raw tool definitions.
//! - [`parts`]: the parts of a tool definition a person reviews, their digests, and the
//!   awaiting-approval mark a catalogue tool carries.
//! - [`pinning`]: pinned tool definitions: which tools of a new read wait for a person's
//!   approval (the rug-pull guard), approvals.
//! - [`resources_prompts`]: the resources, resource templates and prompts a catalogue records
//!   beside the tools, and what a failed list of them leaves.
//! - [`server`]: `Era`, `ServerInfo`, `Transport`.
//! - [`limits`]: `Limits` and every default (CRD fields, probe flags).
//! - [`refs`]: `SecretKeySelector`, `ConfigMapKeySelector`.
//! - [`duration`]: `Duration`, the one parser of `10s`/`1h30m`.

pub mod catalog;
pub mod duration;
pub mod limits;
pub mod parts;
pub mod pinning;
pub mod refs;
pub mod resources_prompts;
pub mod server;

pub use catalog::{Access, Approval, Catalog, CatalogTool};
pub use duration::Duration;
pub use limits::Limits;
pub use refs::{ConfigMapKeySelector, SecretKeySelector};
pub use server::{Era, ServerInfo, Transport};
