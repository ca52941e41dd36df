//! CRD types.
