//! The `probe` subcommand: connect to one MCP server exactly as the controller would and print one
//! JSON document, the catalogue or the failure.

use std::process::ExitCode;

/// Flags of `mcp-operator probe`.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// The server's URL (http or https).
    pub url: String,
}

/// Runs the probe and prints its JSON document.
pub fn main(_args: ProbeArgs) -> ExitCode {
    ExitCode::FAILURE
}
