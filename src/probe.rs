//! probe.
