//! The MCP client side: connect, negotiate the protocol era, list every page of `tools/list`
//! within bounds, and build the classified catalogue. Knows nothing of Kubernetes.

pub mod catalog;
